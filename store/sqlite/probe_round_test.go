package sqlite_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Two processes' probers share one round: while B probes the first
// provider of its list, A probes the other and backs it off, and B, working
// from its older list, does not probe that one again.
func TestProbeRoundSkipsProviderAnotherProcessBackedOff(t *testing.T) {
	ctx := context.Background()
	path := tmpDB(t)
	now := func(c *budget.Config) { c.Now = fixed }
	a := newTracker(t, openStore(t, path), now)
	b := newTracker(t, openStore(t, path), now)
	past := fixed().Add(-time.Hour)
	for _, p := range []string{"p1", "p2"} {
		if _, err := a.ParkAt(ctx, p, budget.RateLimited, time.Second, nil, past); err != nil {
			t.Fatal(err)
		}
	}
	errDown := errors.New("down")
	var mu sync.Mutex
	probes := map[string]int{}
	count := func(p string) {
		mu.Lock()
		probes[p]++
		mu.Unlock()
	}
	first := make(chan string, 1)
	release := make(chan struct{})
	var once sync.Once
	pb := &budget.Prober{Tracker: b, Owner: "B", Probe: func(_ context.Context, p string) error {
		count(p)
		once.Do(func() {
			first <- p
			<-release // meanwhile A probes the other provider and fails
		})
		return errDown
	}}
	pa := &budget.Prober{Tracker: a, Owner: "A", Probe: func(_ context.Context, p string) error {
		count(p)
		return errDown
	}}
	type result struct {
		rep budget.ProbeReport
		err error
	}
	resB := make(chan result, 1)
	go func() { rep, err := pb.RunOnce(ctx); resB <- result{rep, err} }()
	held := within(t, 10*time.Second, first, "B's first probe")
	other := map[string]string{"p1": "p2", "p2": "p1"}[held]
	repA, err := pa.RunOnce(ctx)
	if err != nil || repA.Probed != 1 || repA.Failed != 1 {
		t.Fatalf("A's pass while B probes %s = %+v, %v; want %s probed once and failed", held, repA, err, other)
	}
	st, err := a.ProviderState(ctx, other)
	if err != nil || st.ProbeFailures != 1 || !st.ResumeAt.After(fixed()) {
		t.Fatalf("%s after A's failed probe = %+v, %v; want 1 failure and resume-at after now", other, st, err)
	}
	close(release)
	r := within(t, 10*time.Second, resB, "B's pass")
	if r.err != nil || r.rep.Probed != 1 {
		t.Errorf("B's pass = %+v, %v; want only %s probed", r.rep, r.err, held)
	}
	mu.Lock()
	defer mu.Unlock()
	if probes[other] != 1 || probes[held] != 1 {
		t.Errorf("probes in one round = %v; want each provider probed once", probes)
	}
	if st, err := a.ProviderState(ctx, other); err != nil || st.ProbeFailures != 1 {
		t.Errorf("%s after the round = %+v, %v; want still 1 failure", other, st, err)
	}
}
