package memstore

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// rollupKey is a daily rollup's identity.
type rollupKey struct {
	day                                   int64
	key, team, org, user, provider, model string
	tags                                  budget.Tags
}

func keyOf(r *budget.Rollup) rollupKey {
	return rollupKey{ns(r.Day), r.Key, r.Team, r.Org, r.User, r.Provider, r.Model, r.Tags}
}

// matches reports whether an event or rollup with these dimensions is one
// h selects.
func matches(h *budget.History, key, team, org, user, provider, modelNorm string, tags budget.Tags) bool {
	switch {
	case h.Team != "" && team != h.Team, h.Org != "" && org != h.Org, h.Team == "" && h.Org == "" && key != h.Key:
		return false
	case h.Provider != "" && provider != h.Provider, h.User != "" && user != h.User:
		return false
	case h.Model != "" && !budget.MatchModel(h.Model, modelNorm), h.Tag != "" && !tags.Has(h.Tag):
		return false
	}
	return true
}

func (t *tx) Rollups(_ context.Context, from, to time.Time, key string, by []budget.Dim) ([]budget.Rollup, error) {
	var rs []budget.Rollup
	for _, r := range t.st.rollups {
		if d := ns(r.Day); d >= from.UnixNano() && d < to.UnixNano() && (key == "" || r.Key == key) {
			rs = append(rs, r)
		}
	}
	return group(rs, by), nil
}

// group sums rs per day and the columns of by, as the SQL stores' GROUP BY.
func group(rs []budget.Rollup, by []budget.Dim) []budget.Rollup {
	cols := budget.RollupColumns(by)
	m := make(map[rollupKey]*budget.Rollup)
	for _, r := range rs {
		r.Only(cols)
		k := keyOf(&r)
		if g := m[k]; g != nil {
			g.Add(&r.Totals)
			continue
		}
		m[k] = &r
	}
	out := make([]budget.Rollup, 0, len(m))
	for _, g := range m {
		out = append(out, *g)
	}
	return out
}

func (t *tx) EventTotals(_ context.Context, from, to time.Time, key string, by []budget.Dim) ([]budget.Rollup, error) {
	m := make(map[rollupKey]*budget.Rollup)
	for _, e := range t.st.events {
		u := &e.u
		if a := u.At.UnixNano(); a < from.UnixNano() || a >= to.UnixNano() || key != "" && u.Key != key {
			continue
		}
		r := budget.Rollup{Day: budget.Day(u.At), Key: u.Key, Team: u.Team, Org: u.Org, User: u.User, Provider: u.Provider, Model: u.Model, Tags: u.Tags}
		k := keyOf(&r)
		g := m[k]
		if g == nil {
			g = &r
			m[k] = g
		}
		tot := budget.Totals{Requests: u.Amount(budget.MetricRequests), Input: u.Input, Output: u.Output, Reasoning: u.Reasoning,
			CacheRead: u.CacheRead, CacheWrite: u.CacheWrite, Cost: u.Cost}
		if e.noPrice {
			tot.NoPrice = 1
		}
		g.Add(&tot)
	}
	out := make([]budget.Rollup, 0, len(m))
	for _, g := range m {
		out = append(out, *g)
	}
	return group(out, by), nil
}

func (t *tx) Events(_ context.Context, from, to time.Time, key string, fn func(budget.Usage) error) error {
	var out []event
	for _, e := range t.st.events {
		if a := e.u.At.UnixNano(); a >= from.UnixNano() && a < to.UnixNano() && (key == "" || e.u.Key == key) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b event) int {
		return cmp.Or(a.u.At.Compare(b.u.At), strings.Compare(a.u.Key, b.u.Key), strings.Compare(a.u.RequestID, b.u.RequestID))
	})
	for _, e := range out {
		u := e.u
		u.CostKnown, u.NoPrice, u.Placed = true, e.noPrice, true
		if err := fn(u); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) PrunedBefore(context.Context) (time.Time, error) { return fromNs(t.st.prunedBefore), nil }

func (t *tx) Prune(_ context.Context, before time.Time) (int64, error) {
	if err := t.write(); err != nil {
		return 0, err
	}
	own(t.st, "events", &t.st.events)
	var n int64
	for k, e := range t.st.events {
		if e.u.At.UnixNano() < before.UnixNano() {
			delete(t.st.events, k)
			n++
		}
	}
	t.st.prunedBefore = before.UnixNano()
	t.st.limitsVersion++ // as the SQL stores: writers re-read the horizon
	return n, nil
}

func (t *tx) OpenReservationsBefore(_ context.Context, before, committable time.Time, max int) ([]budget.ReservationRow, error) {
	var out []budget.ReservationRow
	for _, r := range t.st.reservations {
		if !r.At.Before(before) {
			continue
		}
		if r.State == budget.ReservationLive || r.State == budget.ReservationExpired && !r.SettledAt.Before(committable) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b budget.ReservationRow) int { return strings.Compare(a.ID, b.ID) })
	if len(out) > max {
		out = out[:max]
	}
	return out, nil
}
