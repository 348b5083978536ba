package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra,
		suiteCase{"TwoTrackersOneHandle", testTwoTrackersOneHandle},
		suiteCase{"CommitWhoseEventIsStored", testCommitEventStored},
	)
}

// Two Trackers on one store handle, one of them also writing other things
// (parking a provider) all along: each writer's memory of the store must
// not survive the other's commits, so each hour's reservations are admitted
// exactly up to the limit, round after round.
func testTwoTrackersOneHandle(t *testing.T, newDB NewDB) {
	s := newDB(t)()
	c := NewClock(T0)
	a, b := NewTracker(t, s, c, time.Second), NewTracker(t, s, c, time.Second)
	const max, n = 10, 24
	SetLimit(t, a, budget.LimitSpec{Key: "k", Metric: "requests", Window: "1h"}, max)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // admin writes through the same handle, between the reservations
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := b.Park(ctx, "other", budget.RateLimited, time.Second, nil); err != nil {
				t.Errorf("Park: %v", err)
				return
			}
			if _, err := b.Unpark(ctx, "other"); err != nil {
				t.Errorf("Unpark: %v", err)
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for round := range 12 {
		c.Set(T0.Add(time.Duration(round) * time.Hour))
		rs := reserveAll(t, a, b, n, func(int) (budget.Request, budget.ReserveOptions) {
			return budget.Request{Key: "k", Estimate: budget.Estimate{Tokens: 1}}, budget.ReserveOptions{TTL: time.Minute}
		})
		if got := admitted(rs); got != max {
			t.Fatalf("round %d: %d of %d reservations admitted; want exactly %d", round, got, n, max)
		}
		for i, r := range rs {
			if r == nil {
				continue
			}
			tr := a
			if i%2 == 1 {
				tr = b
			}
			if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 1}); err != nil {
				t.Fatalf("round %d: commit: %v", round, err)
			}
		}
	}
	noDrift(t, a)
}

// A reservation whose id the history already holds as a request id (an
// import, a client that chose it): its commit settles it without recording
// the event twice, and the tracker goes on writing.
func testCommitEventStored(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := tr.Reserve(ctx, budget.Request{Key: "k", Estimate: budget.Estimate{Tokens: 50}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	RecordSync(t, tr, budget.Usage{RequestID: r.ID, Key: "k", Input: 5, At: c.Now()})
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 10}); err != nil {
		t.Fatalf("commit of a reservation whose id is already an event: %v", err)
	}
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 10}); !errors.Is(err, budget.ErrSettled) {
		t.Fatalf("second commit = %v; want ErrSettled", err)
	}
	RecordSync(t, tr, budget.Usage{RequestID: "after", Key: "k", Input: 7, At: c.Now()})
	if used, reserved := Used(t, tr, budget.Request{Key: "k"}, c.Now(), l.ID); used != 12 || reserved != 0 {
		t.Fatalf("used %d, reserved %d; want 12 (the stored event and the next one), 0", used, reserved)
	}
	noDrift(t, tr)
}
