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
		suiteCase{"ReparkKeepsProbeCount", testRepark},
		suiteCase{"ConcurrentProbeFailed", testConcurrentProbeFailed},
		suiteCase{"ParkingSurvivesReopen", testParkReopen},
		suiteCase{"ParkedRefusesUntilResume", testParkedRefuses},
		suiteCase{"ProbeBackoff", testProbeBackoff},
		suiteCase{"ProberGiveUpAndCancel", testProberGiveUp},
		suiteCase{"ProberSingleClaim", testProberClaim},
	)
}

func testRepark(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	if _, err := tr.Park(ctx, "openai", budget.RateLimited, time.Minute, []string{"req-1"}); err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * time.Minute)
	for range 2 {
		if _, err := tr.ProbeFailed(ctx, "openai"); err != nil {
			t.Fatal(err)
		}
	}
	p, err := tr.Park(ctx, "openai", budget.Overloaded, 30*time.Second, []string{"req-2"})
	if err != nil {
		t.Fatal(err)
	}
	if p.ProbeFailures != 2 || p.Kind != budget.Overloaded || !p.ResumeAt.Equal(c.Now().Add(30*time.Second)) || len(p.Affected) != 1 || p.Affected[0] != "req-2" {
		t.Fatalf("re-parked state = %+v; want 2 failures kept, kind/times/labels refreshed", p)
	}
}

func testConcurrentProbeFailed(t *testing.T, newDB NewDB) {
	open := newDB(t)
	c := NewClock(T0)
	a := NewTracker(t, open(), c, time.Second)
	b := NewTracker(t, open(), c, time.Second)
	if _, err := a.Park(ctx, "p", budget.RateLimited, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := a
			if i%2 == 1 {
				tr = b
			}
			for range 5 {
				if _, err := tr.ProbeFailed(ctx, "p"); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	p, err := b.ProviderState(ctx, "p")
	if err != nil || p.ProbeFailures != 100 {
		t.Fatalf("probe failures = %d, %v; want 100 (no increment lost)", p.ProbeFailures, err)
	}
}

func testParkReopen(t *testing.T, newDB NewDB) {
	open := newDB(t)
	c := NewClock(T0)
	s := open()
	a := NewTracker(t, s, c, time.Second)
	if _, err := a.Park(ctx, "anthropic", budget.Overloaded, 90*time.Second, []string{"agent-7"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b := NewTracker(t, open(), c, time.Second)
	p, err := b.ProviderState(ctx, "anthropic")
	if err != nil || p.Kind != budget.Overloaded || !p.ResumeAt.Equal(T0.Add(90*time.Second)) || p.Affected[0] != "agent-7" {
		t.Fatalf("after reopen = %+v, %v; want the parked state", p, err)
	}
}

func testParkedRefuses(t *testing.T, newDB NewDB) {
	tr, c, open := setup(t, newDB)
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	if _, err := tr.Park(ctx, "openai", budget.RateLimited, 30*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	req := budget.Request{Key: "k", Provider: "openai", Model: "m", Estimate: tokens(1)}
	c.Advance(10 * time.Second)
	d, err := tr.Check(ctx, req)
	if err != nil || d.Allowed || d.Parked == nil || d.Parked.RetryAfterSeconds() != 20 || d.Breach != nil {
		t.Fatalf("check of a parked provider = %+v, %v; want refused, parked, 20s left, no breach", d, err)
	}
	var pe *budget.ParkedError
	if !errors.As(d.Err(), &pe) || pe.Provider.Kind != budget.RateLimited {
		t.Fatalf("Decision.Err() = %v; want *ParkedError", d.Err())
	}
	if _, err := tr.Reserve(ctx, req, time.Minute); !errors.As(err, &pe) || pe.RetryAfter != 20*time.Second {
		t.Fatalf("Reserve to a parked provider = %v; want *ParkedError with 20s", err)
	}
	// Another provider of the same key is not affected.
	if d, _ := tr.Check(ctx, budget.Request{Key: "k", Provider: "anthropic"}); !d.Allowed {
		t.Fatalf("another provider refused: %+v", d)
	}
	// Another process sees the park within its refresh interval.
	other := NewTracker(t, open(), c, 0)
	if d, _ := other.Check(ctx, req); d.Parked == nil {
		t.Fatal("another process did not see the park")
	}
	c.Advance(20 * time.Second) // exactly resume-at: requests flow, no probe ran
	if d, err := tr.Check(ctx, req); err != nil || !d.Allowed || d.Parked != nil {
		t.Fatalf("check at resume-at = %+v, %v; want allowed", d, err)
	}
	if _, err := tr.Reserve(ctx, req, time.Minute); err != nil {
		t.Fatalf("Reserve at resume-at = %v", err)
	}
	ps, _ := tr.ParkedProviders(ctx)
	if len(ps) != 1 {
		t.Fatalf("parked providers = %+v; want still listed until unparked", ps)
	}
	if was, err := tr.Unpark(ctx, "openai"); err != nil || !was {
		t.Fatalf("Unpark = %v, %v", was, err)
	}
	if was, err := tr.Unpark(ctx, "openai"); err != nil || was {
		t.Fatalf("second Unpark = %v, %v; want false, nil", was, err)
	}
	for _, bad := range []func() error{
		func() error { _, err := tr.Park(ctx, "", budget.RateLimited, 0, nil); return err },
		func() error { _, err := tr.Park(ctx, "x", "sleepy", 0, nil); return err },
		func() error { _, err := tr.Park(ctx, "x", budget.RateLimited, -time.Second, nil); return err },
	} {
		if err := bad(); !errors.Is(err, budget.ErrInvalid) {
			t.Errorf("bad park = %v; want ErrInvalid", err)
		}
	}
}

func testProbeBackoff(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	if _, err := tr.Park(ctx, "p", budget.RateLimited, 10*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	c.Advance(10 * time.Second)
	var prev time.Duration
	for i, want := range []time.Duration{20 * time.Second, 40 * time.Second, 80 * time.Second} {
		if _, err := tr.ProbeFailed(ctx, "p"); err != nil {
			t.Fatal(err)
		}
		p, _ := tr.ProviderState(ctx, "p")
		if got := p.ResumeAt.Sub(c.Now()); got != want || got <= prev {
			t.Fatalf("after failure %d resume in %v; want %v", i+1, got, want)
		}
		prev = want
	}
	for range 20 {
		tr.ProbeFailed(ctx, "p")
	}
	p, _ := tr.ProviderState(ctx, "p")
	if got := p.ResumeAt.Sub(c.Now()); got != budget.DefaultMaxProbeBackoff {
		t.Fatalf("backoff after many failures = %v; want capped at %v", got, budget.DefaultMaxProbeBackoff)
	}
}

func testProberGiveUp(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	tr.Park(ctx, "down", budget.Overloaded, time.Second, nil)
	tr.Park(ctx, "up", budget.RateLimited, time.Second, nil)
	var gaveUp []string
	pr := &budget.Prober{Tracker: tr, MaxFailures: 3,
		Probe: func(_ context.Context, p string) error {
			if p == "down" {
				return errors.New("still 529")
			}
			return nil
		},
		OnGiveUp: func(p string, n int) { gaveUp = append(gaveUp, p) }}
	rep, err := pr.RunOnce(ctx)
	if err != nil || rep.Probed != 0 {
		t.Fatalf("pass before resume-at = %+v, %v; want nothing probed", rep, err)
	}
	for i := 0; i < 3; i++ {
		c.Advance(time.Hour) // past any backoff
		if _, err := pr.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.ProviderState(ctx, "up"); !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("a provider whose probe succeeded is still parked: %v", err)
	}
	if _, err := tr.ProviderState(ctx, "down"); !errors.Is(err, budget.ErrNotFound) || len(gaveUp) != 1 || gaveUp[0] != "down" {
		t.Fatalf("after 3 failures: state err %v, gave up on %v; want unparked and reported", err, gaveUp)
	}
	// Run stops when its context is cancelled.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := pr.Run(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel = %v; want context.Canceled", err)
	}
}

func testProberClaim(t *testing.T, newDB NewDB) {
	open := newDB(t)
	c := NewClock(T0)
	a := NewTracker(t, open(), c, time.Second)
	b := NewTracker(t, open(), c, time.Second)
	a.Park(ctx, "p", budget.RateLimited, time.Second, nil)
	c.Advance(time.Minute)
	started := make(chan struct{})
	release := make(chan struct{})
	pa := &budget.Prober{Tracker: a, Probe: func(context.Context, string) error {
		close(started)
		<-release
		return errors.New("down")
	}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); pa.RunOnce(ctx) }()
	<-started
	pb := &budget.Prober{Tracker: b, Probe: func(context.Context, string) error { t.Error("second prober probed a claimed provider"); return nil }}
	if rep, err := pb.RunOnce(ctx); err != nil || rep.Probed != 0 {
		t.Fatalf("second prober = %+v, %v; want nothing probed while claimed", rep, err)
	}
	close(release)
	wg.Wait()
	c.Advance(time.Hour)
	pb.Probe = func(context.Context, string) error { return nil }
	if rep, err := pb.RunOnce(ctx); err != nil || rep.Recovered != 1 {
		t.Fatalf("after the claim was dropped = %+v, %v; want the second prober to probe", rep, err)
	}
}
