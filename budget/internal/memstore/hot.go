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

// Mark is the commits of the other handles to the database (External) and
// this handle's (Local): write transactions run one at a time, so when the
// next one starts at m.Next() nothing else wrote in between.
func (t *tx) Mark(context.Context) (budget.Mark, error) {
	mine := t.s.commits.Load()
	return budget.Mark{External: t.s.db.commits.Load() - mine, Local: mine}, nil
}

// LockReservations and LockLimits do nothing: write transactions already
// run one at a time.
func (t *tx) LockReservations(context.Context, []string) error { return t.write() }
func (t *tx) LockLimits(context.Context, []string) error       { return t.write() }

// holdsOn lists the holds on (limit, subject, start) expiring after now.
func (t *tx) holdsOn(l *budget.Limit, start time.Time, now int64) []budget.Hold {
	var out []budget.Hold
	s := ns(start)
	for k, h := range t.st.holds {
		if k.limitID == l.ID && h.Subject == l.Subject && ns(h.WindowStart) == s && ns(h.ExpiresAt) > now {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b budget.Hold) int { return strings.Compare(a.ReservationID, b.ReservationID) })
	return out
}

func (t *tx) Windows(_ context.Context, refs []budget.WindowRef, now time.Time) ([]budget.WindowState, error) {
	out := make([]budget.WindowState, len(refs))
	for i, r := range refs {
		l, w := r.Limit, &out[i]
		w.Holds = t.holdsOn(l, r.Start, now.UnixNano())
		if l.Metric == budget.MetricConcurrent {
			w.Stored = true
			continue
		}
		if c, ok := t.st.counters[counterKey{l.ID, l.Subject, ns(r.Start)}]; ok {
			w.Used, w.Stored = c.used, true
			continue
		}
		var err error
		if !r.NoSeed {
			if w.Used, err = t.sum(l, r.Start, r.End); err != nil {
				return nil, err
			}
		}
		if r.PrevStart.IsZero() {
			continue
		}
		var latest int64
		for k := range t.st.counters {
			if k.limitID == l.ID && k.subject == l.Subject && (latest == 0 || k.start > latest) {
				latest = k.start
			}
		}
		w.Latest = fromNs(latest)
		if c, ok := t.st.counters[counterKey{l.ID, l.Subject, ns(r.PrevStart)}]; ok {
			w.PrevUsed = c.used
		} else if w.PrevUsed, err = t.sum(l, r.PrevStart, r.PrevEnd); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// withHolds is reservation r with its holds when it is live.
func (t *tx) withHolds(r budget.ReservationRow) budget.ReservationRow {
	r.Holds = nil
	if r.State != budget.ReservationLive {
		return r
	}
	for k, h := range t.st.holds {
		if k.reservationID == r.ID {
			r.Holds = append(r.Holds, h)
		}
	}
	slices.SortFunc(r.Holds, func(a, b budget.Hold) int { return strings.Compare(a.LimitID, b.LimitID) })
	return r
}

func (t *tx) Reservations(_ context.Context, ids []string) ([]budget.ReservationRow, error) {
	var out []budget.ReservationRow
	for _, id := range ids {
		if r, ok := t.st.reservations[id]; ok {
			out = append(out, t.withHolds(r))
		}
	}
	return out, nil
}

func (t *tx) ExpiredReservations(_ context.Context, now time.Time, max int) ([]budget.ReservationRow, error) {
	var out []budget.ReservationRow
	n := now.UnixNano()
	for _, r := range t.st.reservations {
		if r.State == budget.ReservationLive && ns(r.ExpiresAt) <= n {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b budget.ReservationRow) int {
		return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), strings.Compare(a.ID, b.ID))
	})
	if len(out) > max {
		out = out[:max]
	}
	for i := range out {
		out[i] = t.withHolds(out[i])
	}
	return out, nil
}

// Apply writes w in the order budget.Tx documents, each step as the SQL
// stores do it.
func (t *tx) Apply(_ context.Context, w *budget.WriteSet) ([]bool, int64, error) {
	if err := t.write(); err != nil {
		return nil, 0, err
	}
	st := t.st
	inserted := make([]bool, len(w.Events))
	if len(w.Events) > 0 {
		own(st, "events", &st.events)
	}
	for i := range w.Events {
		u := w.Events[i].Usage
		k := eventKey{u.Key, u.RequestID}
		if _, dup := st.events[k]; dup {
			continue
		}
		u.At = stored(u.At)
		u.CostKnown, u.NoPrice, u.Placed = false, false, false
		st.events[k] = event{u: u, modelNorm: budget.NormalizeModel(u.Model), noPrice: w.Events[i].NoPrice}
		inserted[i] = true
	}
	if rs := w.Rollups(inserted); len(rs) > 0 {
		own(st, "rollups", &st.rollups)
		for _, r := range rs {
			k := keyOf(&r)
			cur, ok := st.rollups[k]
			if !ok {
				cur = r
				cur.Totals = budget.Totals{}
			}
			cur.Add(&r.Totals)
			st.rollups[k] = cur
		}
	}
	if err := t.applyCounters(w, inserted); err != nil {
		return nil, 0, err
	}
	if len(w.Rollovers) > 0 {
		own(st, "rollovers", &st.rollovers)
	}
	for _, r := range w.Rollovers {
		k := counterKey{r.LimitID, r.Subject, ns(r.WindowStart)}
		if _, ok := st.rollovers[k]; ok {
			continue
		}
		r.WindowStart, r.PrevWindowStart, r.LoggedAt = stored(r.WindowStart), stored(r.PrevWindowStart), stored(r.LoggedAt)
		st.rollovers[k] = r
	}
	if err := t.insertReservations(w.NewReservations); err != nil {
		return nil, 0, err
	}
	if err := t.settle(w.Settles); err != nil {
		return nil, 0, err
	}
	if err := t.renew(w.Renewals); err != nil {
		return nil, 0, err
	}
	var deleted int64
	if !w.DeleteSettledBefore.IsZero() {
		before := w.DeleteSettledBefore.UnixNano()
		expired := w.ExpiredBefore().UnixNano()
		own(st, "reservations", &st.reservations)
		own(st, "holds", &st.holds)
		for id, r := range st.reservations {
			cut := before
			if r.State == budget.ReservationExpired {
				cut = expired
			}
			if r.State != budget.ReservationLive && ns(r.SettledAt) < cut {
				delete(st.reservations, id)
				maps.DeleteFunc(st.holds, func(k holdKey, _ budget.Hold) bool { return k.reservationID == id })
				deleted++
			}
		}
	}
	return inserted, deleted, nil
}

// applyCounters creates the counters w creates, from the history (which
// holds w's events by now), or adds to them if they exist after all; the
// others gain what their inserted events add, and must exist if that is
// more than nothing.
func (t *tx) applyCounters(w *budget.WriteSet, inserted []bool) error {
	if len(w.Counters) == 0 {
		return nil
	}
	deltas := w.CounterDeltas(inserted)
	st := t.st
	own(st, "counters", &st.counters)
	for i := range w.Counters {
		c := &w.Counters[i]
		l := c.Ref.Limit
		k := counterKey{l.ID, l.Subject, ns(c.Ref.Start)}
		row, ok := st.counters[k]
		switch {
		case ok:
			if deltas[i] == 0 {
				continue
			}
			row.used = min(row.used+deltas[i], budget.MaxTokens)
		case c.Create:
			used, err := t.sum(l, c.Ref.Start, c.Ref.End)
			if err != nil {
				return err
			}
			row = counterRow{end: ns(c.Ref.End), used: used}
		case deltas[i] == 0 || c.IfStored:
			continue
		default:
			return fmt.Errorf("%w: add to counter %s@%d: the row is gone", budget.ErrConflict, l.ID, c.Ref.Start.Unix())
		}
		st.counters[k] = row
	}
	return nil
}

func (t *tx) insertReservations(rs []budget.ReservationRow) error {
	if len(rs) == 0 {
		return nil
	}
	st := t.st
	own(st, "reservations", &st.reservations)
	own(st, "holds", &st.holds)
	for _, r := range rs {
		if _, ok := st.reservations[r.ID]; ok {
			return fmt.Errorf("insert reservation %s: the id is taken", r.ID)
		}
		for _, h := range r.Holds {
			k := holdKey{h.ReservationID, h.LimitID}
			if _, ok := st.holds[k]; ok {
				return fmt.Errorf("insert hold of %s on %s: taken twice", h.ReservationID, h.LimitID)
			}
			h.WindowStart, h.ExpiresAt = stored(h.WindowStart), stored(h.ExpiresAt)
			st.holds[k] = h
		}
		r.Holds = nil
		r.At, r.ExpiresAt, r.SettledAt = stored(r.At), stored(r.ExpiresAt), stored(r.SettledAt)
		if r.OnExpiry == "" {
			r.OnExpiry = budget.ExpireRelease
		}
		st.reservations[r.ID] = r
	}
	return nil
}

// settle refuses (ErrConflict) a reservation that is not live, or, unless
// it is being recovered, expired.
func (t *tx) settle(ss []budget.Settle) error {
	if len(ss) == 0 {
		return nil
	}
	st := t.st
	own(st, "reservations", &st.reservations)
	own(st, "holds", &st.holds)
	for _, s := range ss {
		r, ok := st.reservations[s.ID]
		if !ok || r.State != budget.ReservationLive && (s.State == budget.ReservationExpired || r.State != budget.ReservationExpired) {
			return fmt.Errorf("%w: settle reservation %s: it is no longer unsettled", budget.ErrConflict, s.ID)
		}
		r.State, r.SettledAt = s.State, stored(s.At)
		st.reservations[s.ID] = r
		maps.DeleteFunc(st.holds, func(k holdKey, _ budget.Hold) bool { return k.reservationID == s.ID })
	}
	return nil
}

func (t *tx) renew(rs []budget.Renewal) error {
	if len(rs) == 0 {
		return nil
	}
	st := t.st
	own(st, "reservations", &st.reservations)
	own(st, "holds", &st.holds)
	forever := ns(budget.Forever)
	for _, rn := range rs {
		r, ok := st.reservations[rn.ID]
		if !ok || r.State != budget.ReservationLive {
			return fmt.Errorf("%w: renew reservation %s: it is no longer live", budget.ErrConflict, rn.ID)
		}
		r.ExpiresAt = stored(rn.ExpiresAt)
		r.Holds = slices.Clone(r.Holds) // older snapshots keep theirs
		for i := range r.Holds {
			for _, nh := range rn.Holds {
				if nh.LimitID == r.Holds[i].LimitID && nh.Subject == r.Holds[i].Subject && nh.WindowStart.Equal(r.Holds[i].WindowStart) {
					r.Holds[i].Amount = nh.Amount
				}
			}
		}
		st.reservations[rn.ID] = r
		for k, h := range st.holds {
			if k.reservationID == rn.ID && ns(h.ExpiresAt) != forever {
				h.ExpiresAt = r.ExpiresAt
				for _, nh := range rn.Holds {
					if nh.LimitID == h.LimitID && nh.Subject == h.Subject && nh.WindowStart.Equal(h.WindowStart) {
						h.Amount = nh.Amount
					}
				}
				st.holds[k] = h
			}
		}
	}
	return nil
}
