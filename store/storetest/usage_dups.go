package storetest

import (
	"strconv"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra, suiteCase{"DuplicatesAmongManyNewEvents", testDuplicatesAmongMany})
}

// testDuplicatesAmongMany: batches of hundreds of events (several of a
// store's multi-row statements each) in which some ids the history already
// holds, and some repeat within the batch, hide among new ones. Exactly
// the new ones count and are reported new, batch after batch, on the
// synchronous path and the asynchronous one. (SQLite finds a held id by
// its insert's row count falling short, then inserts the next batches
// telling row by row: both ways must agree.)
func testDuplicatesAmongMany(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1<<40)
	mk := func(i int) budget.Usage { return ev("r"+strconv.Itoa(i), "k", "p", "m", int64(1+i%7), 0, T0) }
	var want int64
	var first []budget.Usage
	for i := 0; i < 300; i += 2 { // the even ids
		first = append(first, mk(i))
		want += int64(1 + i%7)
	}
	RecordSync(t, tr, first...)
	// 20 batches: each the next 40 new ids, 30 held ones and a repeat of
	// its own first event, in an order that is not the history's.
	next := 300
	for b := range 20 {
		var evs []budget.Usage
		var isNew []bool
		for j := range 40 {
			evs, isNew = append(evs, mk(next+j)), append(isNew, true)
			if j < 30 {
				k := (b*30 + j) * 2 % 300
				evs, isNew = append(evs, mk(k)), append(isNew, false)
			}
		}
		evs, isNew = append(evs, mk(next)), append(isNew, false)
		for j := range 40 {
			want += int64(1 + (next+j)%7)
		}
		next += 40
		if b%2 == 1 { // the asynchronous path
			for _, e := range evs {
				if err := tr.Record(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			fr, err := tr.Flush(ctx)
			if err != nil || fr.Written != 40 || fr.Duplicates != int64(len(evs)-40) {
				t.Fatalf("batch %d: Flush = %+v, %v; want 40 written, %d duplicates", b, fr, err, len(evs)-40)
			}
		} else {
			dup := RecordSync(t, tr, evs...)
			for i := range evs {
				if dup[i] == isNew[i] {
					t.Fatalf("batch %d: event %d (%s) reported duplicate=%v; want %v", b, i, evs[i].RequestID, dup[i], !isNew[i])
				}
			}
		}
		if u, _ := Used(t, tr, budget.Request{Key: "k"}, T0, l.ID); u != want {
			t.Fatalf("after batch %d: used = %d; want %d (only new events count)", b, u, want)
		}
	}
	noDrift(t, tr)
}
