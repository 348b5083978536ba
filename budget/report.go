package budget

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Dim is a dimension a report groups by.
type Dim string

const (
	DimKey      Dim = "key"
	DimTeam     Dim = "team"
	DimOrg      Dim = "org"
	DimUser     Dim = "user"
	DimProvider Dim = "provider"
	DimModel    Dim = "model"
	DimDay      Dim = "day"   // UTC, YYYY-MM-DD
	DimWeek     Dim = "week"  // the ISO week's Monday (UTC), YYYY-MM-DD
	DimMonth    Dim = "month" // UTC, YYYY-MM
	// DimTags is the rollups' and events' column of tags: a report by a
	// tag ("tag:NAME", TagDim) groups stores' rows by it, then by the
	// tag's value. It is not a dimension ParseDims accepts.
	DimTags Dim = "tags"
)

// maxDims bounds a report's dimensions: each of the nine once, and a few
// tags.
const maxDims = 12

// ParseDims parses a comma-separated list of dimensions ("" is none: one
// row of totals). Each may appear once.
func ParseDims(s string) ([]Dim, error) {
	var out []Dim
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, f := range strings.Split(s, ",") {
		d := Dim(strings.TrimSpace(f))
		switch d {
		case DimKey, DimTeam, DimOrg, DimUser, DimProvider, DimModel, DimDay, DimWeek, DimMonth:
		default:
			if !strings.HasPrefix(string(d), "tag:") {
				return nil, invalid("by", f, "want key, team, org, user, provider, model, day, week, month or tag:NAME")
			}
			var err error
			if d, err = parseTagDim(string(d)); err != nil {
				return nil, err
			}
		}
		if len(out) == maxDims {
			return nil, invalid("by", s, "at most "+strconv.Itoa(maxDims)+" dimensions")
		}
		if slices.Contains(out, d) {
			return nil, invalid("by", f, "is given twice")
		}
		out = append(out, d)
	}
	return out, nil
}

// ReportQuery asks for the usage of [Since, Until) grouped by By.
type ReportQuery struct {
	Since, Until time.Time
	By           []Dim
	Key          string // only this key's events, when set
}

// ReportRow is one group: its values of the query's dimensions, in By's
// order, and its totals.
type ReportRow struct {
	Values []string
	Totals
}

// Report sums the usage of q's range by its dimensions, rows sorted by
// their values. Whole UTC days come from the daily rollups, the partial
// days at either end from the events; a partial day before the prune
// horizon cannot be split and is refused.
func (t *Tracker) Report(ctx context.Context, q ReportQuery) ([]ReportRow, error) {
	if err := checkRange(q.Since, q.Until); err != nil {
		return nil, err
	}
	var all []Rollup
	err := t.viewHistory(ctx, func(tx Tx, h HistoryTx) error {
		all = all[:0]
		horizon, err := h.PrunedBefore(ctx)
		if err != nil {
			return err
		}
		first, last := ceilDay(q.Since), Day(q.Until)
		if !first.Before(last) { // within one day, or two partial days with no whole one between
			first, last = q.Until, q.Until
		}
		for _, part := range [][2]time.Time{{q.Since, first}, {last, q.Until}} {
			if !part[0].Before(part[1]) {
				continue
			}
			if part[0].Before(horizon) {
				field, v := "since", q.Since
				if !part[0].Equal(q.Since) {
					field, v = "until", q.Until
				}
				return invalid(field, v.UTC().Format(time.RFC3339), "splits a day before the prune horizon "+
					horizon.Format(time.RFC3339)+", which only daily rollups cover: give UTC midnights")
			}
			rs, err := h.EventTotals(ctx, part[0], part[1], q.Key, q.By)
			if err != nil {
				return err
			}
			all = append(all, rs...)
		}
		if first.Before(last) {
			rs, err := h.Rollups(ctx, first, last, q.Key, q.By)
			if err != nil {
				return err
			}
			all = append(all, rs...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	rows := Group(all, q.By)
	if len(q.By) == 0 && len(rows) == 0 {
		rows = []ReportRow{{Values: []string{}}} // the totals of nothing
	}
	return rows, nil
}

// Group sums rollups by the dimensions by: one row per distinct tuple of
// their values, sorted by those values.
func Group(rs []Rollup, by []Dim) []ReportRow {
	// A group's key is its values in a fixed array (ParseDims admits at
	// most maxDims): no string built per row. A day's name is formatted
	// once per day.
	type key [maxDims]string
	groups := make(map[key]int)
	var out []ReportRow
	days := make(map[int64][3]string) // day, week, month
	var k key
	for i := range rs {
		r := &rs[i]
		for j, d := range by[:min(len(by), len(k))] {
			switch d {
			case DimDay, DimWeek, DimMonth:
				n := r.Day.UnixNano()
				names, ok := days[n]
				if !ok {
					names = [3]string{r.value(DimDay), r.value(DimWeek), r.value(DimMonth)}
					days[n] = names
				}
				switch d {
				case DimDay:
					k[j] = names[0]
				case DimWeek:
					k[j] = names[1]
				default:
					k[j] = names[2]
				}
			default:
				k[j] = r.value(d)
			}
		}
		g, ok := groups[k]
		if !ok {
			g = len(out)
			groups[k] = g
			out = append(out, ReportRow{Values: slices.Clone(k[:len(by)])})
		}
		out[g].Add(&r.Totals)
	}
	slices.SortFunc(out, func(a, b ReportRow) int { return slices.Compare(a.Values, b.Values) })
	return out
}

// value is r's value of dimension d.
func (r *Rollup) value(d Dim) string {
	switch d {
	case DimKey:
		return r.Key
	case DimTeam:
		return r.Team
	case DimOrg:
		return r.Org
	case DimUser:
		return r.User
	case DimProvider:
		return r.Provider
	case DimModel:
		return r.Model
	case DimDay:
		return r.Day.Format(time.DateOnly)
	case DimWeek:
		wd := (int(r.Day.Weekday()) + 6) % 7 // Monday = 0
		return r.Day.AddDate(0, 0, -wd).Format(time.DateOnly)
	case DimMonth:
		return r.Day.Format("2006-01")
	}
	if name := d.TagName(); name != "" {
		v, _ := r.Tags.Value(name)
		return v
	}
	return ""
}

// ceilDay is the first UTC midnight at or after t.
func ceilDay(t time.Time) time.Time {
	d := Day(t)
	if d.Equal(t) {
		return d
	}
	return d.AddDate(0, 0, 1)
}

func checkRange(since, until time.Time) error {
	if err := CheckInstant("since", since); err != nil {
		return err
	}
	if err := CheckInstant("until", until); err != nil {
		return err
	}
	if !since.Before(until) {
		return invalid("until", until.UTC().Format(time.RFC3339), "must be after since "+since.UTC().Format(time.RFC3339))
	}
	return nil
}

// ExportResult says what an export could not give as events.
type ExportResult struct {
	Events int64
	// RolledUp is the part of the range before the prune horizon: only
	// daily rollups remain of it (zero when none).
	RolledUpFrom, RolledUpTo time.Time
}

// Export calls fn with every event of [since, until) (key's only, when
// key is set), in order of instant, key and request id, as stored: with
// its team, organisation, user and cost. What was pruned is not there;
// the result says which part of the range that is.
func (t *Tracker) Export(ctx context.Context, since, until time.Time, key string, fn func(Usage) error) (ExportResult, error) {
	var res ExportResult
	if err := checkRange(since, until); err != nil {
		return res, err
	}
	err := t.viewHistory(ctx, func(tx Tx, h HistoryTx) error {
		res = ExportResult{}
		horizon, err := h.PrunedBefore(ctx)
		if err != nil {
			return err
		}
		if since.Before(horizon) {
			res.RolledUpFrom, res.RolledUpTo = since, minTime(horizon, until)
		}
		return h.Events(ctx, since, until, key, func(u Usage) error {
			res.Events++
			return fn(u)
		})
	})
	return res, err
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// PruneResult is what Prune did.
type PruneResult struct {
	Before  time.Time // the horizon now: a UTC midnight
	Deleted int64     // events deleted
}

// maxListed bounds the ids a refusal names.
const maxListed = 5

// Prune deletes the events before before, rounded down to a UTC midnight,
// keeping their daily rollups, in one transaction. It refuses (invalid
// input naming "before") a horizon that would leave a limit's current
// window, or a reservation that may still settle, without the events it
// needs, and one where the rollups of the days to prune disagree with
// their events. Afterwards records and imports of events before the
// horizon are refused: their ids could no longer be deduplicated.
func (t *Tracker) Prune(ctx context.Context, before time.Time) (PruneResult, error) {
	if err := CheckInstant("before", before); err != nil {
		return PruneResult{}, err
	}
	cut := Day(before)
	now := t.now()
	if !cut.Before(Day(now)) {
		return PruneResult{}, invalid("before", before.UTC().Format(time.RFC3339), "must be before today (UTC): today's events are still being written")
	}
	var res PruneResult
	err := t.updateHistory(ctx, func(tx Tx, h HistoryTx) error {
		res = PruneResult{Before: cut}
		horizon, err := h.PrunedBefore(ctx)
		if err != nil {
			return err
		}
		if !cut.After(horizon) {
			res.Before = horizon
			return nil // already pruned that far
		}
		// What goes must be in the rollups.
		if err := checkRollups(ctx, h, horizon, cut); err != nil {
			return err
		}
		// The deletion next: it ends holding the definitions' lock, so
		// the checks below see every limit committed before them; a
		// refusal rolls the deletion back.
		if res.Deleted, err = h.Prune(ctx, cut); err != nil {
			return err
		}
		ls, err := tx.Limits(ctx, "")
		if err != nil {
			return err
		}
		for i := range ls {
			l := &ls[i]
			if l.Metric == MetricConcurrent {
				continue
			}
			if start, _ := l.Window.Bounds(now); start.Before(cut) {
				return invalid("before", cut.Format(time.RFC3339), fmt.Sprintf("limit %s's current window started at %s: its counters may still need to be seeded from the events (prune before %s at the latest)",
					l.ID, start.UTC().Format(time.RFC3339), Day(start).Format(time.RFC3339)))
			}
		}
		open, err := h.OpenReservationsBefore(ctx, cut, now.Add(-t.cfg.SettledRetention), maxListed)
		if err != nil {
			return err
		}
		if len(open) > 0 {
			ids := make([]string, len(open))
			for i := range open {
				ids[i] = open[i].ID
			}
			return invalid("before", cut.Format(time.RFC3339), "reservations made before it may still settle: "+strings.Join(ids, ", "))
		}
		return nil
	})
	if err != nil {
		return PruneResult{}, err
	}
	t.horizon.Store(cut.UnixNano())
	return res, nil
}

// checkRollups confirms the rollups of [from, to) hold exactly what the
// events there sum to, before the events go.
func checkRollups(ctx context.Context, h HistoryTx, from, to time.Time) error {
	bad, err := rollupDrift(ctx, h, from, to)
	if err != nil {
		return err
	}
	if len(bad) > 0 {
		return invalid("before", to.Format(time.RFC3339), fmt.Sprintf("the daily rollups of %d group(s) disagree with their events (first: %s %s); run budget verify", len(bad), bad[0].Day.Format(time.DateOnly), bad[0].Key))
	}
	return nil
}

// RollupDrift is a rollup that disagrees with the events of its day.
type RollupDrift struct {
	Day                                   time.Time
	Key, Team, Org, User, Provider, Model string
	Rollup, Events                        Totals
}

// rollupDrift compares the rollups of [from, to) with the events (from
// zero: the start of the history).
func rollupDrift(ctx context.Context, h HistoryTx, from, to time.Time) ([]RollupDrift, error) {
	if from.IsZero() {
		from = beforeAll // the start of the history
	}
	rs, err := h.Rollups(ctx, from, to, "", AllDims)
	if err != nil {
		return nil, err
	}
	es, err := h.EventTotals(ctx, from, to, "", AllDims)
	if err != nil {
		return nil, err
	}
	type entry struct {
		r    Rollup
		a, b Totals
	}
	m := make(map[rollupKey]*entry)
	for i, list := range [2][]Rollup{rs, es} {
		for _, r := range list {
			k := rollupKey{r.Day.UnixNano(), r.Key, r.Team, r.Org, r.User, r.Provider, r.Model, r.Tags}
			e := m[k]
			if e == nil {
				e = &entry{r: r}
				m[k] = e
			}
			if i == 0 {
				e.a.Add(&r.Totals)
			} else {
				e.b.Add(&r.Totals)
			}
		}
	}
	var out []RollupDrift
	for _, e := range m {
		if e.a != e.b {
			out = append(out, RollupDrift{Day: e.r.Day, Key: e.r.Key, Team: e.r.Team, Org: e.r.Org, User: e.r.User,
				Provider: e.r.Provider, Model: e.r.Model, Rollup: e.a, Events: e.b})
		}
	}
	slices.SortFunc(out, func(a, b RollupDrift) int {
		if c := a.Day.Compare(b.Day); c != 0 {
			return c
		}
		return slices.Compare([]string{a.Key, a.Team, a.Org, a.User, a.Provider, a.Model}, []string{b.Key, b.Team, b.Org, b.User, b.Provider, b.Model})
	})
	return out, nil
}

// VerifyRollups compares the daily rollups of every day the events still
// cover (from the prune horizon on) with those events.
func (t *Tracker) VerifyRollups(ctx context.Context) ([]RollupDrift, error) {
	var out []RollupDrift
	err := t.viewHistory(ctx, func(tx Tx, h HistoryTx) error {
		horizon, err := h.PrunedBefore(ctx)
		if err != nil {
			return err
		}
		out, err = rollupDrift(ctx, h, horizon, Forever)
		return err
	})
	return out, err
}

// PrunedBefore is the prune horizon (zero when nothing was pruned).
func (t *Tracker) PrunedBefore(ctx context.Context) (time.Time, error) {
	var horizon time.Time
	err := t.store.View(ctx, func(tx Tx) error {
		var err error
		horizon, err = prunedBefore(ctx, tx)
		return err
	})
	if err == nil {
		t.horizon.Store(nsOf(horizon))
	}
	return horizon, err
}
