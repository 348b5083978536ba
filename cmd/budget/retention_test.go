package main

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func TestParseRetain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"400d", 400 * 24 * time.Hour},
		{"1d", 24 * time.Hour},
		{" 30d ", 30 * 24 * time.Hour},
		{"9600h", 9600 * time.Hour},
		{"24h", 24 * time.Hour},
		{"24h30m", 24*time.Hour + 30*time.Minute},
	} {
		if got, err := parseRetain(tc.in); err != nil || got != tc.want {
			t.Errorf("parseRetain(%q): got %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"0d", "-1d", "1.5d", "d", "12h", "23h59m", "forever", "400", "106752d", "-400h"} {
		if _, err := parseRetain(in); err == nil || !strings.Contains(err.Error(), "retain") {
			t.Errorf("parseRetain(%q): got %v; want an error naming retain", in, err)
		}
	}
	for _, v := range []string{"12h", "1.5d", "soon"} {
		db := tempDB(t)
		if r := run(t, "proxy", "--db", db, "--mock-upstream", "--retain", v); r.code != 2 || !strings.Contains(r.stderr, "retain") || exists(db) {
			t.Errorf("proxy --retain %s: got %v; want exit 2 naming retain, no database", v, r)
		}
	}
	if help := mustRun(t, 0, "proxy", "-h").stdout; !strings.Contains(help, "-retain") {
		t.Errorf("proxy -h lacks --retain")
	}
}

// prunes collects the outcome of each prune of a retention loop.
type prunes chan struct {
	res budget.PruneResult
	err error
}

func (p prunes) done(res budget.PruneResult, err error) {
	p <- struct {
		res budget.PruneResult
		err error
	}{res, err}
}

// next waits for the next prune (the loop runs it at start, then once
// per tick).
func (p prunes) next(t *testing.T) (budget.PruneResult, error) {
	t.Helper()
	select {
	case r := <-p:
		return r.res, r.err
	case <-time.After(30 * time.Second):
		t.Fatal("no prune within 30s")
	}
	return budget.PruneResult{}, nil
}

// TestRetention: the loop prunes at start and at each tick before now -
// retain; a refusal is logged and the next tick prunes again.
func TestRetention(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustImport(t, db, randomHistory(rand.New(rand.NewPCG(7, 8)), 200, time.Date(2026, 2, 15, 0, 0, 0, 0, time.UTC), 20))
	var clock atomic.Int64
	clock.Store(testNow.UnixNano()) // 2026-03-02T12:00:00Z
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	m := &Main{Now: now}
	ctx := context.Background()
	tdb, err := m.openDB(ctx, db, dbOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tdb.Close(ctx)
	var logs lockedBuffer
	results := make(prunes, 1)
	r := &retention{tracker: tdb.Tracker, retain: 5 * 24 * time.Hour, log: slog.New(slog.NewTextHandler(&logs, nil)), done: results.done}
	ticks := make(chan time.Time)
	rctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); r.run(rctx, ticks) }()

	day := func(s string) time.Time { d, _ := time.Parse(time.DateOnly, s); return d }
	// At start: before 2026-02-25T12:00, rounded down.
	res, err := results.next(t)
	if err != nil || !res.Before.Equal(day("2026-02-25")) || res.Deleted == 0 {
		t.Fatalf("prune at start: got %+v, %v; want before 2026-02-25, events deleted", res, err)
	}
	// A day later, at the tick.
	clock.Store(testNow.Add(24 * time.Hour).UnixNano())
	ticks <- testNow
	if res, err := results.next(t); err != nil || !res.Before.Equal(day("2026-02-26")) {
		t.Fatalf("prune at a tick a day later: got %+v, %v; want before 2026-02-26", res, err)
	}
	// A limit whose current window (March) began before the next horizon
	// (2026-03-03): refused and logged, and the loop goes on.
	l, _, err := tdb.SetLimit(ctx, budget.LimitSpec{Key: "k1", Window: "monthly", Max: ptr(int64(1000))})
	if err != nil {
		t.Fatal(err)
	}
	clock.Store(time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC).UnixNano())
	ticks <- testNow
	if _, err := results.next(t); err == nil {
		t.Fatalf("prune into a live window: no refusal")
	}
	if got := logs.String(); !strings.Contains(got, "prune refused") || !strings.Contains(got, l.ID) {
		t.Errorf("log after a refusal: got %q; want the refusal and the limit", got)
	}
	if err := tdb.DeleteLimit(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	ticks <- testNow
	if res, err := results.next(t); err != nil || !res.Before.Equal(day("2026-03-03")) {
		t.Fatalf("prune at the tick after a refusal: got %+v, %v; want before 2026-03-03", res, err)
	}
	cancel()
	<-stopped
	if h, err := tdb.PrunedBefore(ctx); err != nil || !h.Equal(day("2026-03-03")) {
		t.Errorf("horizon: got %v, %v; want 2026-03-03", h, err)
	}
	if !strings.Contains(logs.String(), "retention: pruned") {
		t.Errorf("log: got %q; want the prunes", logs.String())
	}
}

// TestProxyRetain: budget proxy --retain prunes when it starts and at each
// tick of its daily ticker, and stops with the proxy.
func TestProxyRetain(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustImport(t, db, randomHistory(rand.New(rand.NewPCG(9, 10)), 100, time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), 28))
	report := []string{"report", "--db", db, "--since", "2026-02-01", "--until", "2026-03-01", "--by", "key,day", "--format", "csv"}
	before := mustRun(t, 0, report...).stdout
	results := make(prunes, 1)
	ticks := make(chan time.Time)
	m := &Main{Now: func() time.Time { return testNow }, Getenv: func(string) string { return "" }}
	var logs lockedBuffer
	o := testProxyOptions(db, slog.New(slog.NewTextHandler(&logs, nil)))
	o.retain, o.retainTicks, o.pruned = 400*24*time.Hour, ticks, results.done
	p, err := m.startProxy(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	// 400 days back from 2026-03-02 is 2025: nothing to delete yet.
	if res, err := results.next(t); err != nil || res.Deleted != 0 {
		t.Errorf("prune at start: got %+v, %v; want nothing deleted", res, err)
	}
	ticks <- testNow
	if _, err := results.next(t); err != nil {
		t.Errorf("prune at a tick: %v", err)
	}
	if err := p.stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Ten days of retention: the start prunes everything before 2026-02-20.
	o.retain, o.retainTicks = 10*24*time.Hour, nil
	p, err = m.startProxy(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := results.next(t)
	if err := p.stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err != nil || res.Deleted == 0 || res.Before.Format(time.DateOnly) != "2026-02-20" {
		t.Errorf("prune at start with 10 days of retention: got %+v, %v; want events before 2026-02-20 deleted", res, err)
	}
	if after := mustRun(t, 0, report...).stdout; after != before {
		t.Errorf("report after the proxy pruned:\n%s\nbefore:\n%s", after, before)
	}
	mustRun(t, 0, "verify", "--db", db)
}
