package memstore

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// tx is one transaction: st is the state it reads and, when not ro, the
// fork it writes.
type tx struct {
	s  *Store
	st *state
	ro bool
}

// Every role, the optional ones included (budget/roles.go).
var (
	_ budget.Tx         = (*tx)(nil)
	_ budget.HistoryTx  = (*tx)(nil)
	_ budget.AlertTx    = (*tx)(nil)
	_ budget.ProviderTx = (*tx)(nil)
	_ budget.AuditTx    = (*tx)(nil)
)

func (t *tx) write() error {
	if t.ro {
		return errReadOnly
	}
	return nil
}

// ---- limits

func (t *tx) LimitsVersion(context.Context) (int64, error) { return t.st.limitsVersion, nil }

func (t *tx) Limits(_ context.Context, key string) ([]budget.Limit, error) {
	var out []budget.Limit
	for _, l := range t.st.limits {
		if key == "" || l.Key == key || l.IsDefault() {
			out = append(out, l)
		}
	}
	return out, nil
}

func (t *tx) OwnedLimits(_ context.Context, level budget.Level, owner string) ([]budget.Limit, error) {
	var out []budget.Limit
	for _, l := range t.st.limits {
		if owner != "" && l.Level() == level && l.Owner() == owner {
			out = append(out, l)
		}
	}
	return out, nil
}

func (t *tx) AddRaise(_ context.Context, id string, r budget.Raise) error {
	if err := t.write(); err != nil {
		return err
	}
	l, ok := t.st.limits[id]
	if !ok {
		return notFound("limit", id)
	}
	own(t.st, "limits", &t.st.limits)
	r.Until, r.At = stored(r.Until), stored(r.At)
	l.Raises = append(slices.Clone(l.Raises), r)
	t.st.limits[id] = l
	t.st.limitsVersion++
	return nil
}

// ---- teams

func (t *tx) Placement(_ context.Context, key string) (string, string, error) {
	team, ok := t.st.keyTeams[key]
	if !ok {
		return "", "", nil
	}
	return team, t.st.teams[team], nil
}

func (t *tx) Teams(context.Context) ([]budget.Team, error) {
	out := make([]budget.Team, 0, len(t.st.teams))
	for name, org := range t.st.teams {
		tm := budget.Team{Name: name, Org: org, Keys: []string{}}
		for k, team := range t.st.keyTeams {
			if team == name {
				tm.Keys = append(tm.Keys, k)
			}
		}
		slices.Sort(tm.Keys)
		out = append(out, tm)
	}
	slices.SortFunc(out, func(a, b budget.Team) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (t *tx) Orgs(context.Context) ([]string, error) {
	return slices.Sorted(maps.Keys(t.st.orgs)), nil
}

func (t *tx) PutTeam(_ context.Context, tm budget.Team) error {
	if err := t.write(); err != nil {
		return err
	}
	if tm.Org != "" && !t.st.orgs[tm.Org] {
		own(t.st, "orgs", &t.st.orgs)
		t.st.orgs[tm.Org] = true
	}
	own(t.st, "teams", &t.st.teams)
	t.st.teams[tm.Name] = tm.Org
	t.st.limitsVersion++
	return nil
}

func (t *tx) DeleteTeam(_ context.Context, name string) error {
	if err := t.write(); err != nil {
		return err
	}
	if _, ok := t.st.teams[name]; !ok {
		return notFound("team", name)
	}
	own(t.st, "teams", &t.st.teams)
	delete(t.st.teams, name)
	own(t.st, "keyTeams", &t.st.keyTeams)
	maps.DeleteFunc(t.st.keyTeams, func(_, team string) bool { return team == name })
	t.st.limitsVersion++
	return nil
}

func (t *tx) SetKeyTeam(_ context.Context, key, team string) error {
	if err := t.write(); err != nil {
		return err
	}
	own(t.st, "keyTeams", &t.st.keyTeams)
	if team == "" {
		delete(t.st.keyTeams, key)
	} else {
		if _, ok := t.st.teams[team]; !ok {
			return notFound("team", team)
		}
		t.st.keyTeams[key] = team
	}
	t.st.limitsVersion++
	return nil
}

func (t *tx) Limit(_ context.Context, id string) (budget.Limit, error) {
	l, ok := t.st.limits[id]
	if !ok {
		return budget.Limit{}, notFound("limit", id)
	}
	return l, nil
}

func (t *tx) InsertLimit(_ context.Context, l budget.Limit, now time.Time) error {
	if err := t.write(); err != nil {
		return err
	}
	if _, ok := t.st.limits[l.ID]; ok {
		return fmt.Errorf("insert limit %s: an id taken twice", l.ID)
	}
	for _, o := range t.st.limits {
		if o.SameIdentity(&l) {
			return fmt.Errorf("insert limit %s: limit %s has its owner, scope, value, metric and window", l.ID, o.ID)
		}
	}
	own(t.st, "limits", &t.st.limits)
	l.Subject = ""
	l.Raises = nil
	if l.Window.Kind == budget.Once {
		l.Window.Anchor = stored(now) // its creation, as the SQL stores keep it
	}
	t.st.limits[l.ID] = l
	t.st.limitsVersion++
	return nil
}

func (t *tx) UpdateLimit(_ context.Context, l budget.Limit, _ time.Time) error {
	if err := t.write(); err != nil {
		return err
	}
	cur, ok := t.st.limits[l.ID]
	if !ok {
		return notFound("limit", l.ID)
	}
	own(t.st, "limits", &t.st.limits)
	cur.Max, cur.Enabled, cur.Alerts = l.Max, l.Enabled, slices.Clone(l.Alerts)
	cur.Window.ResetTime, cur.Window.Zone = l.Window.ResetTime, l.Window.Zone
	t.st.limits[l.ID] = cur
	t.st.limitsVersion++
	return nil
}

func (t *tx) DeleteLimit(_ context.Context, id string) error {
	if err := t.write(); err != nil {
		return err
	}
	if _, ok := t.st.limits[id]; !ok {
		return notFound("limit", id)
	}
	st := t.st
	own(st, "limits", &st.limits)
	delete(st.limits, id)
	st.limitsVersion++
	own(st, "counters", &st.counters)
	maps.DeleteFunc(st.counters, func(k counterKey, _ counterRow) bool { return k.limitID == id })
	own(st, "rollovers", &st.rollovers)
	maps.DeleteFunc(st.rollovers, func(k counterKey, _ budget.Rollover) bool { return k.limitID == id })
	own(st, "holds", &st.holds)
	maps.DeleteFunc(st.holds, func(k holdKey, _ budget.Hold) bool { return k.limitID == id })
	return nil
}

// ---- prices

func (t *tx) PricesVersion(context.Context) (int64, error) { return t.st.pricesVersion, nil }

func (t *tx) Versions(context.Context) (int64, int64, error) {
	return t.st.limitsVersion, t.st.pricesVersion, nil
}

func (t *tx) Prices(context.Context) ([]budget.Price, error) {
	out := make([]budget.Price, 0, len(t.st.prices))
	for _, p := range t.st.prices {
		out = append(out, p)
	}
	return out, nil
}

func (t *tx) UnpricedEvents(context.Context) (int64, error) {
	var n int64
	for _, e := range t.st.events {
		if e.u.Unpriced {
			n++
		}
	}
	return n, nil
}

func (t *tx) PutPrices(_ context.Context, ps []budget.Price) error {
	if err := t.write(); err != nil {
		return err
	}
	own(t.st, "prices", &t.st.prices)
	for _, p := range ps {
		p.From = stored(p.From)
		t.st.prices[priceKey{p.Provider, p.Model, p.Tier, p.AboveInput, ns(p.From)}] = p
	}
	t.st.pricesVersion++
	return nil
}

func (t *tx) DeletePrice(_ context.Context, p budget.Price) error {
	if err := t.write(); err != nil {
		return err
	}
	own(t.st, "prices", &t.st.prices)
	delete(t.st.prices, priceKey{p.Provider, p.Model, p.Tier, p.AboveInput, ns(p.From)})
	t.st.pricesVersion++
	return nil
}

// ---- the history and counters

// sum is the history's total for l over [start, end), saturating at
// budget.MaxTokens like the SQL stores' sums.
func (t *tx) sum(l *budget.Limit, start, end time.Time) (int64, error) {
	switch l.Metric {
	case budget.MetricTokens, budget.MetricInput, budget.MetricOutput, budget.MetricRequests, budget.MetricUSD:
	default:
		return 0, fmt.Errorf("no usage history for metric %s", l.Metric)
	}
	h, lo, hi := l.History(), start.UnixNano(), end.UnixNano()
	var total int64
	if hz := t.st.prunedBefore; lo < hz {
		// Pruned: the whole days' rollups (see budget.Tx.SumUsage).
		from := budget.Day(start)
		if !from.Equal(start) {
			from = from.AddDate(0, 0, 1)
		}
		for _, r := range t.st.rollups {
			if d := r.Day.UnixNano(); d < ns(from) || d >= min(hi, hz) || !matches(&h, r.Key, r.Team, r.Org, r.User, r.Provider, budget.NormalizeModel(r.Model), r.Tags) {
				continue
			}
			total = min(total+r.Amount(l.Metric), budget.MaxTokens)
		}
		lo = hz
	}
	for k, e := range t.st.events {
		switch {
		case h.Team != "":
			if e.u.Team != h.Team {
				continue
			}
		case h.Org != "":
			if e.u.Org != h.Org {
				continue
			}
		case k.key != h.Key:
			continue
		}
		if a := e.u.At.UnixNano(); a < lo || a >= hi {
			continue
		}
		switch {
		case h.Provider != "" && e.u.Provider != h.Provider:
			continue
		case h.Model != "" && !budget.MatchModel(h.Model, e.modelNorm):
			continue
		case h.User != "" && e.u.User != h.User, h.Tag != "" && !e.u.Tags.Has(h.Tag):
			continue
		}
		total = min(total+e.u.Amount(l.Metric), budget.MaxTokens)
	}
	return total, nil
}

// SumUsage counts the events in [start, end) that l.History() selects (a
// model pattern through budget.MatchModel, as GLOB does).
func (t *tx) SumUsage(_ context.Context, l *budget.Limit, start, end time.Time) (int64, error) {
	return t.sum(l, start, end)
}

func (t *tx) CounterRows(context.Context) ([]budget.CounterRow, error) {
	out := make([]budget.CounterRow, 0, len(t.st.counters))
	for k, c := range t.st.counters {
		out = append(out, budget.CounterRow{LimitID: k.limitID, Subject: k.subject, WindowStart: fromNs(k.start),
			WindowEnd: fromNs(c.end), Used: c.used})
	}
	slices.SortFunc(out, func(a, b budget.CounterRow) int {
		return cmp.Or(strings.Compare(a.LimitID, b.LimitID), strings.Compare(a.Subject, b.Subject), a.WindowStart.Compare(b.WindowStart))
	})
	return out, nil
}

func (t *tx) Rollovers(_ context.Context, key string, n int) ([]budget.Rollover, error) {
	var out []budget.Rollover
	for k, r := range t.st.rollovers {
		l, ok := t.st.limits[k.limitID]
		if !ok {
			continue
		}
		sk, _, _ := strings.Cut(k.subject, budget.SubjectSep)
		if key != "" && l.Key != key && (!l.IsDefault() || sk != key) {
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b budget.Rollover) int {
		return cmp.Or(b.LoggedAt.Compare(a.LoggedAt), b.WindowStart.Compare(a.WindowStart), strings.Compare(a.LimitID, b.LimitID))
	})
	if len(out) > n {
		out = out[:max(n, 0)]
	}
	return out, nil
}

// ---- providers

func (p *provider) state() budget.ProviderState {
	s := p.p
	s.Affected = nil
	if p.affectedRaw != "" {
		s.Affected = strings.Split(p.affectedRaw, "\n")
	}
	return s
}

func (t *tx) Provider(_ context.Context, name string) (budget.ProviderState, error) {
	p, ok := t.st.providers[name]
	if !ok {
		return budget.ProviderState{}, notFound("provider", name)
	}
	return p.state(), nil
}

func (t *tx) Providers(context.Context) ([]budget.ProviderState, error) {
	out := make([]budget.ProviderState, 0, len(t.st.providers))
	for _, p := range t.st.providers {
		out = append(out, p.state())
	}
	slices.SortFunc(out, func(a, b budget.ProviderState) int { return strings.Compare(a.Provider, b.Provider) })
	return out, nil
}

func (t *tx) ParkProvider(_ context.Context, p budget.ProviderState) error {
	if err := t.write(); err != nil {
		return err
	}
	own(t.st, "providers", &t.st.providers)
	cur := t.st.providers[p.Provider] // the probe count and claim stay
	cur.p.Provider, cur.p.Kind, cur.p.RetryAfter = p.Provider, p.Kind, p.RetryAfter
	cur.p.ParkedAt, cur.p.ResumeAt = stored(p.ParkedAt), stored(p.ResumeAt)
	cur.affectedRaw = strings.Join(p.Affected, "\n")
	t.st.providers[p.Provider] = cur
	return nil
}

func (t *tx) DeleteProvider(_ context.Context, name string) (bool, error) {
	if err := t.write(); err != nil {
		return false, err
	}
	if _, ok := t.st.providers[name]; !ok {
		return false, nil
	}
	own(t.st, "providers", &t.st.providers)
	delete(t.st.providers, name)
	return true, nil
}

func (t *tx) ProbeFailed(_ context.Context, name string, next func(budget.ProviderState) time.Time) (budget.ProviderState, error) {
	if err := t.write(); err != nil {
		return budget.ProviderState{}, err
	}
	cur, ok := t.st.providers[name]
	if !ok {
		return budget.ProviderState{}, fmt.Errorf("provider %q is not parked: %w", name, budget.ErrNotFound)
	}
	own(t.st, "providers", &t.st.providers)
	cur.p.ProbeFailures++
	cur.probeOwner, cur.probeUntil = "", 0
	cur.p.ResumeAt = stored(next(cur.state()))
	t.st.providers[name] = cur
	return cur.state(), nil
}

func (t *tx) ClaimProbe(_ context.Context, name, owner string, now, until time.Time) (bool, error) {
	if err := t.write(); err != nil {
		return false, err
	}
	cur, ok := t.st.providers[name]
	n := now.UnixNano()
	if !ok || ns(cur.p.ResumeAt) > n || cur.probeOwner != "" && cur.probeOwner != owner && cur.probeUntil > n {
		return false, nil
	}
	own(t.st, "providers", &t.st.providers)
	cur.probeOwner, cur.probeUntil = owner, ns(until)
	t.st.providers[name] = cur
	return true, nil
}

// LockDefinitions does nothing: write transactions run one at a time.
func (t *tx) LockDefinitions(context.Context) error { return t.write() }

func (t *tx) Subjects(_ context.Context, id string, start time.Time) ([]string, error) {
	set := map[string]bool{}
	for k := range t.st.counters {
		if k.limitID == id && k.start == ns(start) {
			set[k.subject] = true
		}
	}
	for _, h := range t.st.holds {
		if h.LimitID == id && ns(h.WindowStart) == ns(start) {
			set[h.Subject] = true
		}
	}
	return slices.Sorted(maps.Keys(set)), nil
}
