package storetest

import (
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra, suiteCase{"BackfillLeavesEndedWindowsToTheHistory", testBackfill})
}

// storedCounters is every counter row of the store, by limit id and
// window start.
func storedCounters(t *testing.T, s budget.Store) map[string]map[time.Time]int64 {
	t.Helper()
	var rows []budget.CounterRow
	if err := s.View(ctx, func(tx budget.Tx) error {
		var err error
		rows, err = historyRole(t, tx).CounterRows(ctx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[time.Time]int64{}
	for _, r := range rows {
		if out[r.LimitID] == nil {
			out[r.LimitID] = map[time.Time]int64{}
		}
		out[r.LimitID][r.WindowStart.UTC()] = r.Used
	}
	return out
}

// testBackfill: a Tracker with Config.Backfill (budget import) creates no
// counter row for a window that ended before its write, and so logs no
// rollover into it; a row such a window already has gains the events. Every
// total reads the same as without Backfill (seeded from the history), the
// current window's row is written as always, with its rollover, and a later
// ordinary write into an ended window seeds its row with everything.
func testBackfill(t *testing.T, newDB NewDB) {
	open := newDB(t)
	s := open()
	c := NewClock(T0.Add(30 * time.Minute)) // 09:30, inside the 09:00 hour
	plain := NewTracker(t, s, c, time.Second)
	hour := SetLimit(t, plain, budget.LimitSpec{Key: "k", Window: "1h"}, 1<<40)
	alerted := SetLimit(t, plain, budget.LimitSpec{Key: "k", Window: "1h", Metric: "requests", Alerts: &[]int{50}}, 1<<40)
	day := SetLimit(t, plain, budget.LimitSpec{Key: "k", Window: "daily"}, 1<<40)
	// 07:00's row exists before the import.
	RecordSync(t, plain, ev("before", "k", "p", "m", 7, 0, T0.Add(-2*time.Hour)))

	back := newTracker(t, s, c, time.Second, func(cfg *budget.Config) { cfg.Backfill = true })
	RecordSync(t, back,
		ev("a", "k", "p", "m", 10, 0, T0.Add(-3*time.Hour)),             // 06:00, ended, no row
		ev("b", "k", "p", "m", 20, 0, T0.Add(-2*time.Hour+time.Minute)), // 07:00, ended, has a row
		ev("c", "k", "p", "m", 40, 0, T0.Add(-time.Hour)),               // 08:00, ended, no row
		ev("d", "k", "p", "m", 80, 0, T0.Add(10*time.Minute)),           // 09:00, current
	)
	rows := storedCounters(t, s)
	h := rows[hour.ID]
	if _, ok := h[T0.Add(-3*time.Hour)]; ok {
		t.Errorf("the ended 06:00 window got a counter row: %v", h)
	}
	if _, ok := h[T0.Add(-time.Hour)]; ok {
		t.Errorf("the ended 08:00 window got a counter row: %v", h)
	}
	if h[T0.Add(-2*time.Hour)] != 27 || h[T0] != 80 {
		t.Errorf("hourly rows = %v; want 07:00 27 (its row gained the event), 09:00 80", h)
	}
	if got := len(rows[alerted.ID]); got != 4 {
		t.Errorf("the limit with alert thresholds has %d rows; want 4 (written as always)", got)
	}
	if d := rows[day.ID][T0.Add(-9*time.Hour)]; d != 157 { // the day starts at 00:00 UTC
		t.Errorf("daily row = %d; want 157", d)
	}
	for _, w := range []struct {
		at   time.Time
		want int64
	}{{T0.Add(-3 * time.Hour), 10}, {T0.Add(-2 * time.Hour), 27}, {T0.Add(-time.Hour), 40}, {T0, 80}} {
		for _, tr := range []*budget.Tracker{back, plain} {
			if u, _ := Used(t, tr, budget.Request{Key: "k"}, w.at, hour.ID); u != w.want {
				t.Errorf("used at %v = %d; want %d (the history's)", w.at, u, w.want)
			}
		}
	}
	r, err := plain.Inspect(ctx, "k", c.Now(), 20)
	if err != nil {
		t.Fatal(err)
	}
	var into []time.Time
	for _, ro := range r.Rollovers {
		if ro.LimitID == hour.ID {
			into = append(into, ro.WindowStart.UTC())
			if ro.WindowStart.Equal(T0) && ro.PrevUsed != 40 {
				t.Errorf("rollover into 09:00: prev_used %d; want 40 (08:00's history)", ro.PrevUsed)
			}
		}
	}
	if len(into) != 1 || !into[0].Equal(T0) {
		t.Errorf("hourly rollovers into %v; want only the one into 09:00 (no row created for an ended window)", into)
	}
	// Rows at both ends of the ended windows' span (the store may find
	// them by a range over the span) gain their events; the window between
	// them still gets none.
	edge := SetLimit(t, plain, budget.LimitSpec{Key: "k2", Window: "1h"}, 1<<40)
	RecordSync(t, plain, ev("e6", "k2", "p", "m", 1, 0, T0.Add(-3*time.Hour)), ev("e8", "k2", "p", "m", 2, 0, T0.Add(-time.Hour)))
	RecordSync(t, back,
		ev("f6", "k2", "p", "m", 10, 0, T0.Add(-3*time.Hour+time.Minute)),
		ev("f7", "k2", "p", "m", 20, 0, T0.Add(-2*time.Hour)),
		ev("f8", "k2", "p", "m", 40, 0, T0.Add(-time.Hour+time.Minute)),
	)
	e := storedCounters(t, s)[edge.ID]
	if _, ok := e[T0.Add(-2*time.Hour)]; ok || e[T0.Add(-3*time.Hour)] != 11 || e[T0.Add(-time.Hour)] != 42 {
		t.Errorf("k2's hourly rows = %v; want 06:00 11 and 08:00 42 (both gained their events), none at 07:00", e)
	}
	// An ordinary write into 08:00 creates its row, seeded with the history.
	RecordSync(t, plain, ev("late", "k", "p", "m", 1, 0, T0.Add(-time.Hour+time.Minute)))
	if got := storedCounters(t, s)[hour.ID][T0.Add(-time.Hour)]; got != 41 {
		t.Errorf("08:00's row after an ordinary write = %d; want 41", got)
	}
	noDrift(t, plain)
}
