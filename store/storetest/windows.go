package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra, suiteCase{"ManyWindowsInOneBatch", testManyWindows})
}

// A batch that opens more windows than a store reads or creates in one
// statement (an import of events a minute apart) gives each row what the
// history holds, seeds the rows of a limit set after the events, and logs
// each rollover once: three per-minute limits of three shapes (global, a
// provider's, a model pattern's), 300 windows each, in one RecordSync.
func testManyWindows(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	global := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1m"}, 1<<40)
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Scope: "provider", ScopeValue: "openai", Window: "1m", Metric: "output"}, 1<<40)
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Scope: "model", ScopeValue: "gpt-4*", Window: "1m", Metric: "input"}, 1<<40)
	const n = 300
	start := T0.Add(-n * time.Minute)
	batch := func(prefix string, offset time.Duration) []budget.Usage {
		evs := make([]budget.Usage, n)
		for i := range evs {
			p, m := "openai", "gpt-4o"
			if i%3 == 1 {
				p, m = "anthropic", "claude-sonnet-4"
			}
			evs[i] = ev(fmt.Sprint(prefix, i), "k", p, m, int64(i+1), 2, start.Add(time.Duration(i)*time.Minute+offset))
		}
		return evs
	}
	RecordSync(t, tr, batch("a", 0)...)
	noDrift(t, tr)
	r, err := tr.Inspect(ctx, "k", T0, 2*n)
	if err != nil {
		t.Fatal(err)
	}
	logged := 0
	for _, ro := range r.Rollovers {
		if ro.LimitID != global.ID {
			continue
		}
		logged++
		// The window before holds the event of the minute before: input
		// i and output 2.
		if i := int(ro.WindowStart.Sub(start) / time.Minute); ro.PrevUsed != int64(i)+2 {
			t.Fatalf("rollover into minute %d logged prev_used %d; want %d", i, ro.PrevUsed, i+2)
		}
	}
	if logged != n-1 {
		t.Fatalf("rollovers of the global limit = %d; want %d, one per window after the first", logged, n-1)
	}
	// A limit set now counts the events already recorded in its windows:
	// the next batch creates its rows from the history.
	hourly := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1<<40)
	RecordSync(t, tr, batch("b", 30*time.Second)...)
	noDrift(t, tr)
	last := T0.Add(-time.Second)
	var want int64
	for i := range n {
		if at := start.Add(time.Duration(i) * time.Minute); !at.Before(last.Truncate(time.Hour)) {
			want += 2 * (int64(i+1) + 2) // both batches' events of the hour
		}
	}
	if used, _ := Used(t, tr, budget.Request{Key: "k"}, last, hourly.ID); used != want {
		t.Fatalf("the hourly limit set after the events: used %d; want %d", used, want)
	}
}
