package dashboard

import (
	"cmp"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// filter is the overview's query: which limits, in which order.
type filter struct {
	Key, Team, Org string
	Sort           string // "util" (default: fullest first) or "name" (listing order)
}

func parseFilter(q url.Values) filter {
	f := filter{Key: strings.TrimSpace(q.Get("key")), Team: strings.TrimSpace(q.Get("team")),
		Org: strings.TrimSpace(q.Get("org")), Sort: q.Get("sort")}
	if f.Sort != "name" {
		f.Sort = "util"
	}
	return f
}

// Any reports whether f narrows the limits shown.
func (f filter) Any() bool { return f.Key != "" || f.Team != "" || f.Org != "" }

// placement is where keys and teams sit: key -> team, team -> org.
type placement struct {
	keyTeam map[string]string
	teamOrg map[string]string
}

func placementOf(ts []budget.Team) placement {
	p := placement{keyTeam: map[string]string{}, teamOrg: map[string]string{}}
	for _, t := range ts {
		p.teamOrg[t.Name] = t.Org
		for _, k := range t.Keys {
			p.keyTeam[k] = t.Name
		}
	}
	return p
}

// keyIn reports whether key k passes f's team and org.
func (p placement) keyIn(k string, f filter) bool {
	team := p.keyTeam[k]
	return (f.Team == "" || team == f.Team) && (f.Org == "" || (team != "" && p.teamOrg[team] == f.Org))
}

// applies reports whether limit l (a status's, Subject set) counts
// requests of the team and org f names: the team's or org's own limits,
// those of its teams and keys, and the org limits above the team.
func (p placement) applies(l *budget.Limit, f filter) bool {
	if f.Team != "" {
		ok := false
		switch l.Level() {
		case budget.LevelTeam:
			ok = l.Team == f.Team
		case budget.LevelOrg:
			ok = l.Org == p.teamOrg[f.Team] && l.Org != ""
		case budget.LevelKey:
			ok = p.keyTeam[l.Key] == f.Team
		case budget.LevelDefault:
			ok = p.keyTeam[l.SubjectKey()] == f.Team
		}
		if !ok {
			return false
		}
	}
	if f.Org != "" {
		ok := false
		switch l.Level() {
		case budget.LevelOrg:
			ok = l.Org == f.Org
		case budget.LevelTeam:
			ok = p.teamOrg[l.Team] == f.Org
		case budget.LevelKey:
			ok = p.keyIn(l.Key, filter{Org: f.Org})
		case budget.LevelDefault:
			ok = p.keyIn(l.SubjectKey(), filter{Org: f.Org})
		}
		if !ok {
			return false
		}
	}
	return true
}

// overviewPage is the overview's data.
type overviewPage struct {
	page
	Filter      filter
	Keys        []string // known keys, for the key field's suggestions
	Teams, Orgs []string
	Showing     string // what the filter shows, in words
	Rows        []limitRow
	Refusals    []refusalRow
	HasRefusals bool // Config.Refusals is set
	Providers   []providerRow
	Alerts      []alertRow
	AlertsError string
}

// refusalRow is a refusal as listed.
type refusalRow struct {
	At, Ago     string
	Key         string
	LimitID     string
	Code        string // why it was refused
	Limit       string // "key alice, tokens per 1h" ("" when the limit is gone)
	LimitSubKey string // the subject of the limit's page, for a default's
}

// providerRow is a parked provider as listed.
type providerRow struct {
	Provider, Kind   string
	ParkedAt         string
	ResumeAt, Resume string
	Probing          bool // past its resume-at: a probe decides
	ProbeFailures    int
}

// alertRow is an alert as listed.
type alertRow struct {
	At, Ago              string
	LimitID, Subject     string
	Who                  string
	Threshold            string // "80%", or "exhausted"
	Used, Limit, Percent string
	Delivery             string // "delivered 18:15 UTC", "not delivered yet"
	Window               string // "in the window from 2026-03-01 13:00 UTC" ("" for the current one)
}

// statuses are limits' statuses with their forecasts, side by side.
type statuses struct {
	sts []budget.Status
	fcs []*budget.Forecast
}

func (s *statuses) add(st budget.Status, f *budget.Forecast) {
	s.sts = append(s.sts, st)
	s.fcs = append(s.fcs, f)
}

func (h *Handler) serveOverview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := h.clock()
	f := parseFilter(r.URL.Query())
	p, err := h.overview(ctx, f, c)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The budget could not be read.", err)
		return
	}
	if h.cfg.Manage {
		p.Manage = &manage{NewKey: true, Teams: p.Teams, Team: f.Team}
		if f.Team != "" {
			p.Manage.LimitFor = &limitFor{Who: "team " + f.Team, Field: "team", Owner: f.Team}
		}
	}
	h.render(w, r, http.StatusOK, "overview", p)
}

// overview reads what the overview shows for f at c.now.
func (h *Handler) overview(ctx context.Context, f filter, c clock) (*overviewPage, error) {
	t := h.cfg.Tracker
	p := &overviewPage{page: h.page("Budgets", c), Filter: f, HasRefusals: h.cfg.Refusals != nil}
	ts, err := t.Teams(ctx)
	if err != nil {
		return nil, err
	}
	pl := placementOf(ts)
	all, err := t.Limits(ctx, "")
	if err != nil {
		return nil, err
	}
	byID := make(map[string]*budget.Limit, len(all))
	keys := map[string]bool{}
	orgs := map[string]bool{}
	for i := range all {
		byID[all[i].ID] = &all[i]
		if all[i].Key != "" {
			keys[all[i].Key] = true
		}
	}
	for _, tm := range ts {
		p.Teams = append(p.Teams, tm.Name)
		if tm.Org != "" {
			orgs[tm.Org] = true
		}
		for _, k := range tm.Keys {
			keys[k] = true
		}
	}

	// A key's Inspect has its own limits, the defaults counted for it, its
	// team's and its org's; Inspect of "" every limit but the defaults,
	// which defaultStatuses adds per key.
	rep, err := t.Inspect(ctx, f.Key, c.now, 0)
	if err != nil {
		return nil, err
	}
	var ss statuses
	for i := range rep.Limits {
		if pl.applies(&rep.Limits[i].Limit, f) {
			ss.add(rep.Limits[i], rep.Forecasts[i])
		}
	}
	if f.Key == "" {
		if err := h.defaultStatuses(ctx, all, c.now, func(k string) bool { return pl.keyIn(k, f) }, &ss); err != nil {
			return nil, err
		}
	}
	for i := range ss.sts {
		if k := ss.sts[i].Limit.SubjectKey(); k != "" {
			keys[k] = true
		}
	}
	p.Rows = make([]limitRow, len(ss.sts))
	for i := range ss.sts {
		p.Rows[i] = rowOf(&ss.sts[i], ss.fcs[i], c)
	}
	order := make([]int, len(ss.sts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if f.Sort == "util" {
			if c := cmp.Compare(p.Rows[b].Util, p.Rows[a].Util); c != 0 {
				return c
			}
		}
		return ss.sts[a].Limit.Compare(&ss.sts[b].Limit)
	})
	rows := make([]limitRow, len(order))
	for i, j := range order {
		rows[i] = p.Rows[j]
	}
	p.Rows = rows

	// The form keeps a filter's value even when nothing has that name.
	if f.Team != "" && !slices.Contains(p.Teams, f.Team) {
		p.Teams = append(p.Teams, f.Team)
	}
	if f.Org != "" {
		orgs[f.Org] = true
	}
	p.Keys = sortedKeys(keys)
	p.Orgs = sortedKeys(orgs)
	p.Showing = showing(f)
	for _, pr := range rep.Providers {
		p.Providers = append(p.Providers, providerRow{Provider: pr.Provider, Kind: string(pr.Kind), ParkedAt: c.at(pr.ParkedAt),
			ResumeAt: c.at(pr.ResumeAt), Resume: c.rel(pr.ResumeAt), Probing: !pr.Refusing(c.now), ProbeFailures: pr.ProbeFailures})
	}
	shown := make(map[string]bool, len(p.Rows))
	for i := range p.Rows {
		shown[p.Rows[i].ID] = true
	}
	if h.cfg.Refusals != nil {
		for _, rf := range h.cfg.Refusals() {
			if len(p.Refusals) == h.cfg.Listed {
				break
			}
			if f.Key != "" && rf.Key != f.Key || !pl.keyIn(rf.Key, f) {
				continue
			}
			row := refusalRow{At: c.at(rf.At), Ago: c.rel(rf.At), Key: rf.Key, LimitID: rf.LimitID, Code: rf.Code}
			if l := byID[rf.LimitID]; l != nil {
				row.Limit = l.Describe() + ", " + per(l)
				if l.IsDefault() {
					row.LimitSubKey = rf.Key
				}
			}
			p.Refusals = append(p.Refusals, row)
		}
	}
	// Alerts: the newest, of the limits shown when a filter narrows them
	// (read a few more then, as some are left out).
	n := h.cfg.Listed
	if f.Any() {
		n *= 10
	}
	as, err := h.cfg.Alerts(ctx, n)
	if err != nil {
		h.cfg.Logger.Error("dashboard: listing alerts failed", "err", err)
		p.AlertsError = "The alerts could not be read: " + err.Error()
	}
	for i := range as {
		if len(p.Alerts) == h.cfg.Listed {
			break
		}
		if f.Any() && !shown[as[i].LimitID] {
			continue
		}
		p.Alerts = append(p.Alerts, alertOf(&as[i], byID[as[i].LimitID], c))
	}
	return p, nil
}

// alertOf is an alert's row; l is its limit (nil when it is gone).
func alertOf(a *budget.Alert, l *budget.Limit, c clock) alertRow {
	m := a.Metric
	if m == "" && l != nil {
		m = l.Metric
	}
	m = cmp.Or(m, budget.MetricTokens)
	threshold := strconv.Itoa(a.Threshold) + "%"
	if a.Kind == budget.AlertExhausted {
		threshold = "exhausted"
	}
	row := alertRow{At: c.at(a.At), Ago: c.rel(a.At), LimitID: a.LimitID, Subject: a.Subject, Threshold: threshold,
		Used: amount(m, a.Used), Limit: amount(m, a.Max), Percent: percent(a.Used, a.Max)}
	lim := budget.Limit{Subject: a.Subject}
	switch a.Level {
	case budget.LevelKey:
		lim.Key = a.Owner
	case budget.LevelTeam:
		lim.Team = a.Owner
	case budget.LevelOrg:
		lim.Org = a.Owner
	}
	if l != nil {
		lim.Scope, lim.ScopeValue = l.Scope, l.ScopeValue
	}
	row.Who = who(&lim)
	if l != nil && l.Window.Kind != budget.Once {
		if start, _ := l.Window.Bounds(c.now); !a.WindowStart.Equal(start) {
			row.Window = "in the window from " + c.at(a.WindowStart)
		}
	}
	switch {
	case !a.DeliveredAt.IsZero():
		row.Delivery = "delivered " + c.at(a.DeliveredAt)
	case a.Attempts > 0:
		row.Delivery = "not delivered yet: " + strconv.Itoa(a.Attempts) + " failed attempt(s), next " + c.at(a.NextAttempt)
	default:
		row.Delivery = "not delivered yet"
	}
	return row
}

// defaultStatuses adds the statuses of the default limits of all, for
// each key that keep admits and that has a counter or a hold of one in its
// window holding now: one Inspect per such key, keeping its defaults.
func (h *Handler) defaultStatuses(ctx context.Context, all []budget.Limit, now time.Time, keep func(string) bool, ss *statuses) error {
	starts := map[string]time.Time{}
	for i := range all {
		if l := &all[i]; l.IsDefault() && l.Metric != budget.MetricConcurrent {
			starts[l.ID], _ = l.Window.Bounds(now)
		}
	}
	if len(starts) == 0 {
		return nil
	}
	// The subjects of each default's current window only, not every
	// counter row the history has.
	subjects, err := h.cfg.Tracker.CurrentSubjects(ctx, starts)
	if err != nil {
		return err
	}
	keys := map[string]bool{}
	for _, subs := range subjects {
		for _, sub := range subs {
			if k := budget.DefaultSubjectKey(sub); k != "" && keep(k) {
				keys[k] = true
			}
		}
	}
	for _, k := range sortedKeys(keys) {
		rep, err := h.cfg.Tracker.Inspect(ctx, k, now, 0)
		if err != nil {
			return err
		}
		for i := range rep.Limits {
			if rep.Limits[i].Limit.IsDefault() {
				ss.add(rep.Limits[i], rep.Forecasts[i])
			}
		}
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// showing says which limits a filter shows.
func showing(f filter) string {
	var parts []string
	if f.Key != "" {
		parts = append(parts, "key "+f.Key)
	}
	if f.Team != "" {
		parts = append(parts, "team "+f.Team)
	}
	if f.Org != "" {
		parts = append(parts, "org "+f.Org)
	}
	by := "fullest first"
	if f.Sort == "name" {
		by = "by level and owner"
	}
	if len(parts) == 0 {
		return "Every limit, " + by + "."
	}
	return "The limits that apply to the requests of " + strings.Join(parts, " in ") + ", " + by + "."
}
