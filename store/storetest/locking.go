package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra, suiteCase{"CommitRacesReserveAcrossHandles", testCommitRacesReserve})
}

// Two handles on one database race on one limit: handle a commits
// reservations that filled the limit, each for less than it held, while
// handle b's callers keep reserving what the commits free. b must never be
// admitted beyond what a's settled commits freed (a commit's usage and its
// freed hold are seen together), it must in the end be admitted exactly
// what was freed, and usage must total what was committed.
func testCommitRacesReserve(t *testing.T, newDB NewDB) {
	open := newDB(t)
	c := NewClock(T0)
	// RefreshInterval 0: each handle reads the other's writes at once.
	a, b := NewTracker(t, open(), c, 0), NewTracker(t, open(), c, 0)
	const (
		limit    = 1000
		held     = 100 // a's estimate: 10 fill the limit
		actual   = 40  // what each of a's commits charges, freeing 60
		wanted   = 60  // b's estimate
		fill     = limit / held
		bCallers = 16
		rounds   = 4
	)
	for round := range rounds {
		key := fmt.Sprint("k", round)
		l := SetLimit(t, a, budget.LimitSpec{Key: key, Window: "1h"}, limit)
		req := func(est int64) budget.Request {
			return budget.Request{Key: key, Provider: "p", Model: "m", Estimate: tokens(est)}
		}
		var rs []*budget.Reservation
		for range fill {
			r, err := a.Reserve(ctx, req(held), time.Minute)
			if err != nil {
				t.Fatalf("round %d: filling reservation: %v", round, err)
			}
			rs = append(rs, r)
		}
		// settled counts a's commits; b's callers try again after each.
		var mu sync.Mutex
		settled := 0
		progress := sync.NewCond(&mu)
		var wg sync.WaitGroup
		bAdmitted := make([]*budget.Reservation, bCallers)
		for i := range bCallers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seen := -1; ; {
					mu.Lock()
					for settled == seen {
						progress.Wait()
					}
					seen = settled
					mu.Unlock()
					r, err := b.Reserve(ctx, req(wanted), time.Minute)
					var ex *budget.ExceededError
					switch {
					case err == nil:
						bAdmitted[i] = r
						return
					case !errors.As(err, &ex):
						t.Errorf("round %d: b.Reserve: %v", round, err)
						return
					case seen == fill: // refused after every commit landed
						return
					}
				}
			}()
		}
		if err := concurrently(fill, func(i int) error {
			_, err := a.Commit(ctx, rs[i].ID, budget.Usage{Input: actual - 10, Output: 10})
			mu.Lock()
			settled++
			progress.Broadcast()
			mu.Unlock()
			return err
		}); err != nil {
			t.Fatalf("round %d: a.Commit: %v", round, err)
		}
		wg.Wait()
		n := int64(admitted(bAdmitted))
		if want := int64(fill * (held - actual) / wanted); n != want {
			t.Fatalf("round %d: b admitted %d reservations of %d while a freed %d; want exactly %d",
				round, n, wanted, fill*(held-actual), want)
		}
		for name, tr := range map[string]*budget.Tracker{"a": a, "b": b} {
			if used, reserved := Used(t, tr, req(0), T0, l.ID); used != fill*actual || reserved != n*wanted {
				t.Fatalf("round %d: %s sees used/reserved %d/%d; want %d/%d", round, name, used, reserved, fill*actual, n*wanted)
			}
		}
		// b commits what it holds; usage totals every commit of both.
		for _, r := range bAdmitted {
			if r == nil {
				continue
			}
			if _, err := b.Commit(ctx, r.ID, budget.Usage{Input: wanted}); err != nil {
				t.Fatalf("round %d: b.Commit: %v", round, err)
			}
		}
		for name, tr := range map[string]*budget.Tracker{"a": a, "b": b} {
			if used, reserved := Used(t, tr, req(0), T0, l.ID); used != fill*actual+n*wanted || reserved != 0 {
				t.Fatalf("round %d: after b's commits %s sees used/reserved %d/%d; want %d/0", round, name, used, reserved, fill*actual+n*wanted)
			}
		}
	}
	noDrift(t, a)
}
