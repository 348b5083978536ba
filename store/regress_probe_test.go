package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// A prober working from a stale list re-probes a provider another process
// has just failed and backed off: two failures counted for one round.
func TestProberStaleListDoubleProbe(t *testing.T) {
	ctx := context.Background()
	path := tmpDB(t)
	a := newTracker(t, openStore(t, path), nil)
	b := newTracker(t, openStore(t, path), nil)
	defer a.Close(ctx)
	defer b.Close(ctx)
	past := time.Now().Add(-time.Hour)
	a.ParkAt(ctx, "a-slow", budget.RateLimited, time.Second, nil, past)
	a.ParkAt(ctx, "b-down", budget.RateLimited, time.Second, nil, past)
	var mu sync.Mutex
	probes := map[string]int{}
	aDone := make(chan struct{})
	pb := &budget.Prober{Tracker: b, Owner: "B", Probe: func(_ context.Context, p string) error {
		mu.Lock()
		probes[p]++
		mu.Unlock()
		if p == "a-slow" {
			<-aDone // meanwhile process A probes b-down and fails
			return errors.New("down")
		}
		return errors.New("down")
	}}
	pa := &budget.Prober{Tracker: a, Owner: "A", Probe: func(_ context.Context, p string) error {
		mu.Lock()
		probes[p]++
		mu.Unlock()
		return errors.New("down")
	}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); pb.RunOnce(ctx) }()
	time.Sleep(100 * time.Millisecond) // B has listed both and is probing a-slow
	// A's pass: a-slow is claimed by B, b-down gets probed and fails.
	if _, err := pa.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := a.ProviderState(ctx, "b-down")
	t.Logf("after A's failed probe: resume_at in %v, failures %d", time.Until(st.ResumeAt).Round(time.Second), st.ProbeFailures)
	close(aDone)
	wg.Wait()
	st, _ = a.ProviderState(ctx, "b-down")
	if probes["b-down"] > 1 {
		t.Errorf("b-down probed %d times in one round although A had backed it off (failures now %d, resume_at in %v)", probes["b-down"], st.ProbeFailures, time.Until(st.ResumeAt).Round(time.Second))
	}
}
