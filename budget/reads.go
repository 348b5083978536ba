package budget

import (
	"context"
	"slices"
	"time"
)

// The reads below are what the proxy's gauges, its health check and the
// dashboard's charts need from the store, each in one read-only snapshot,
// so that no caller outside the package holds a Tx.

// Ping reads the store once (its limits' version): nil when it answers.
func (t *Tracker) Ping(ctx context.Context) error {
	return t.store.View(ctx, func(tx Tx) error {
		_, err := tx.LimitsVersion(ctx)
		return err
	})
}

// StoreAs finds an optional role of the tracker's store by type assertion
// (a store that keeps gateway keys, say), looking through wrappers that
// have an Unwrap() Store method. It never hands out the Store itself
// (T = Store finds nothing): transactions stay inside the package.
func StoreAs[T any](t *Tracker) (T, bool) {
	var zero T
	if _, isStore := any(&zero).(*Store); isStore {
		return zero, false
	}
	s := t.store
	for {
		if v, ok := s.(T); ok {
			return v, true
		}
		u, ok := s.(interface{ Unwrap() Store })
		if !ok {
			var zero T
			return zero, false
		}
		s = u.Unwrap()
	}
}

// UsageSeries is the usage of l's counter (for l.Subject, in l's metric)
// in each bucket [edges[i], edges[i+1]): len(edges)-1 sums of the history,
// as verify compares a counter with. Usage still queued in the writer is
// not there yet.
func (t *Tracker) UsageSeries(ctx context.Context, l *Limit, edges []time.Time) ([]int64, error) {
	out := make([]int64, max(len(edges)-1, 0))
	err := t.viewHistory(ctx, func(tx Tx, h HistoryTx) error {
		for i := range out {
			v, err := h.SumUsage(ctx, l, edges[i], edges[i+1])
			if err != nil {
				return err
			}
			out[i] = v
		}
		return nil
	})
	return out, err
}

// CurrentSubjects returns, for each limit id given with the start of its
// current window, the subjects that window has a counter or holds for
// (sorted bytewise).
func (t *Tracker) CurrentSubjects(ctx context.Context, starts map[string]time.Time) (map[string][]string, error) {
	out := make(map[string][]string, len(starts))
	err := t.viewHistory(ctx, func(tx Tx, h HistoryTx) error {
		for id, start := range starts {
			subs, err := h.Subjects(ctx, id, start)
			if err != nil {
				return err
			}
			out[id] = subs
		}
		return nil
	})
	return out, err
}

// Gauge is one limit's use at an instant, as a metrics gauge reports it.
type Gauge struct {
	Limit Limit
	// Used is the window's usage (live leases for a concurrent limit); for
	// a limit counted per key or end user, the most used subject's.
	Used int64
	// Max is the limit in force at the instant (raises included).
	Max int64
}

// Gauges reads, at now and in one snapshot, the gauges of the limits keep
// selects: each limit's window at now (the counter, or the history's sum
// when it has none yet; live leases for a concurrent limit), and for a
// limit counted per key or end user the counters of the subjects its
// current window has rows for. Per-subject concurrent limits and limits
// whose limit is 0 are left out.
func (t *Tracker) Gauges(ctx context.Context, keep func(*Limit) bool, now time.Time) ([]Gauge, error) {
	var out []Gauge
	err := t.viewHistory(ctx, func(tx Tx, h HistoryTx) error {
		out = out[:0]
		ls, err := tx.Limits(ctx, "")
		if err != nil {
			return err
		}
		ls = slices.DeleteFunc(ls, func(l Limit) bool { return !keep(&l) })
		if len(ls) == 0 {
			return nil
		}
		perSubject := func(l *Limit) bool { return l.IsDefault() || l.Each() }
		used := make([]int64, len(ls))
		var refs []WindowRef
		var of []int // refs[j] is a window of ls[of[j]]
		for i := range ls {
			l := &ls[i]
			switch {
			case perSubject(l) && l.Metric == MetricConcurrent:
				used[i] = -1 // leases per key or user: not reported
			case perSubject(l):
				// The counters of this window only, each subject's.
				start, end := l.Window.Bounds(now)
				subs, err := h.Subjects(ctx, l.ID, start)
				if err != nil {
					return err
				}
				for _, sub := range subs {
					c := *l
					c.Subject = sub
					refs, of = append(refs, WindowRef{Limit: &c, Start: start, End: end, NoSeed: true}), append(of, i)
				}
			case l.Metric == MetricConcurrent:
				refs, of = append(refs, WindowRef{Limit: l}), append(of, i)
			default:
				start, end := l.Window.Bounds(now)
				refs, of = append(refs, WindowRef{Limit: l, Start: start, End: end}), append(of, i)
			}
		}
		if len(refs) > 0 {
			ws, err := tx.Windows(ctx, refs, now)
			if err != nil {
				return err
			}
			for j := range ws {
				u := ws[j].Used
				if refs[j].Limit.Metric == MetricConcurrent {
					u = int64(len(ws[j].Holds)) // those live at now
				}
				used[of[j]] = max(used[of[j]], u) // a subject's most used counter
			}
		}
		for i := range ls {
			if used[i] < 0 {
				continue
			}
			if m := ls[i].MaxAt(now); m > 0 {
				out = append(out, Gauge{Limit: ls[i], Used: used[i], Max: m})
			}
		}
		return nil
	})
	return out, err
}
