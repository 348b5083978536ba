package budget

import (
	"context"
	"time"

	"github.com/tokenbudget/tokenbudget/cache"
)

// A limit's Status comes from one of three places, all here but the first:
//
//   - a check reads the cache (Tracker.status in check.go): the committed
//     total, this process's pending deltas and the live holds of a
//     cache.Counter, loaded by readCounter and refreshed every
//     Config.RefreshInterval;
//   - the writer decides reservations on its memory of the store
//     (memWindow.status), exact because it is loaded under the store's
//     locks, or known current through Tx.Mark;
//   - Inspect reads the store alone (storedStatuses).
//
// All three count a window's usage as its counter row, or the history's sum
// when it has none yet, and its reservations as the holds live at the
// instant asked about.

// status is the window's Status at at: only holds live at at count.
func (w *memWindow) status(at time.Time) Status {
	st := Status{Limit: *w.l, Max: w.l.MaxAt(at)}
	atNs := at.UnixNano()
	var sum, n, next int64
	for i := range w.holds {
		h := &w.holds[i]
		if h.expires <= atNs {
			continue
		}
		sum = min(sum+h.amount, MaxTokens)
		n++
		if next == 0 || h.expires < next {
			next = h.expires
		}
	}
	if next != 0 {
		st.NextExpiry = time.Unix(0, next).UTC()
	}
	if w.l.Metric == MetricConcurrent {
		st.Used = n
		return st
	}
	st.WindowStart, st.ResetAt = time.Unix(0, w.start).UTC(), time.Unix(0, w.end).UTC()
	st.Used, st.Reserved = w.used, sum
	return st
}

// storedStatuses are the limits' statuses at at as the store alone says,
// read in one Windows call.
func storedStatuses(ctx context.Context, tx Tx, ls []Limit, at time.Time) ([]Status, error) {
	refs := make([]WindowRef, len(ls))
	for i := range ls {
		refs[i] = refAt(&ls[i], at)
		if ls[i].userless() { // nothing to read: no user's counter
			refs[i].NoSeed, refs[i].PrevStart, refs[i].PrevEnd = true, time.Time{}, time.Time{}
		}
	}
	ws, err := tx.Windows(ctx, refs, at)
	if err != nil {
		return nil, err
	}
	out := make([]Status, len(ls))
	for i := range ls {
		out[i] = newMemWindow(refs[i], ws[i]).status(at)
	}
	return out, nil
}

// readCounter is a limit window's stored usage (seeded from the history
// when it has no row yet) and its live holds at now.
func readCounter(ctx context.Context, tx Tx, l *Limit, start, end, now time.Time) (int64, []cache.Hold, error) {
	ws, err := tx.Windows(ctx, []WindowRef{{Limit: l, Start: start, End: end}}, now)
	if err != nil {
		return 0, nil, err
	}
	var holds []cache.Hold
	if hs := ws[0].Holds; len(hs) > 0 {
		holds = make([]cache.Hold, len(hs))
		for i, h := range hs {
			holds[i] = cache.Hold{ID: h.ReservationID, Amount: h.Amount, ExpiresAt: h.ExpiresAt.UnixNano()}
		}
	}
	return ws[0].Used, holds, nil
}
