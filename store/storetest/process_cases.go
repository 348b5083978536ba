package storetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// RunProcesses runs the multi-process cases against the backend p: four
// (or two) OS processes share one database, each through its own handle and
// Tracker. The test package's TestMain must call Main.
func RunProcesses(t *testing.T, p Processes) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Processes)
	}{
		{"RecordExactly", testProcRecord},
		{"ReserveExactly", testProcReserve},
		{"ReserveCommitExactly", testProcReserveCommit},
		{"LeasedReserveCommitExactly", testProcLeased},
		{"TeamReserveCommitExactly", testProcTeam},
		{"AlertsLoggedOnce", testProcAlerts},
		{"MixedWorkloadNoDrift", testProcMixed},
		{"LimitChangeSeen", testProcLimitChange},
		{"LimitsCreatedWhileRecording", testProcLimitsCreated},
		{"ProbeFailuresAdd", testProcProbeFailed},
		{"ProbeClaimRespected", testProcProbeClaim},
		{"RecoverAfterSIGKILL", testProcRecoverAfterKill},
		{"LeasesChargedExactlyAfterSIGKILL", testProcLeaseKill},
		{"LeasesChargedExactlyWhenKilledUnderLoad", testProcLeaseKillUnderLoad},
		{"IdleLeaseGivenBackToAnotherProcess", testProcLeaseIdle},
		{"NoLeaseReservationCommittedByAnotherProcess", testProcNoLeaseCommittedElsewhere},
		{"StalledLeaseFencedAfterSIGSTOP", testProcLeaseStop},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, p) })
	}
}

// The exactness cases: four children of 16 goroutines each (64 callers)
// try 192 reservations of estimate under limitTokens, so exactly
// limitTokens/estimate may be admitted.
const (
	limitTokens = 7000
	estimate    = 70
	attempts    = 3 // per goroutine
)

func testProcRecord(t *testing.T, p Processes) {
	dsn := p.NewDSN(t)
	tr := openParent(t, p, dsn, 0, nil)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1<<40)
	const per = 50 // events per goroutine, 4 tokens each
	if failed := runChildren(t, 4, "record", dsn, per); failed != 0 {
		t.Errorf("the children's writers failed %d batch attempts; want 0", failed)
	}
	if got, want := usedNow(t, tr, l.ID), int64(4*goroutinesPerChild*per*4); got != want {
		t.Fatalf("used after four processes recorded = %d; want exactly %d", got, want)
	}
	noDrift(t, tr)
}

func testProcReserve(t *testing.T, p Processes) { testProcReserveExact(t, p, false) }

// Commits racing reservations: a reservation deciding on a limit must never
// see a commit's usage without its freed hold, or the reverse.
func testProcReserveCommit(t *testing.T, p Processes) { testProcReserveExact(t, p, true) }

// testProcReserveExact has four children of 16 goroutines reserve (and
// commit each admitted reservation at its estimate, if commit) on one limit.
func testProcReserveExact(t *testing.T, p Processes, commit bool) {
	dsn := p.NewDSN(t)
	tr := openParent(t, p, dsn, 0, nil)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, limitTokens)
	role, wantUsed, wantReserved := "reserve", int64(0), int64(limitTokens/estimate*estimate)
	if commit {
		role, wantUsed, wantReserved = "reservecommit", wantReserved, 0
	}
	if got, want := runChildren(t, 4, role, dsn, attempts), int64(limitTokens/estimate); got != want {
		t.Fatalf("4 processes x %d goroutines admitted %d of %d tries (%s, estimate %d, limit %d); want exactly %d",
			goroutinesPerChild, got, 4*goroutinesPerChild*attempts, role, estimate, limitTokens, want)
	}
	if used, reserved := Used(t, tr, budget.Request{Key: "k"}, tr.Now(), l.ID); used != wantUsed || reserved != wantReserved {
		t.Fatalf("after the run used/reserved = %d/%d; want %d/%d", used, reserved, wantUsed, wantReserved)
	}
	noDrift(t, tr)
}

// Four processes of 16 goroutines, each with budget leases, reserve and
// commit until refused: exactly floor(limit/estimate) are admitted, the
// history holds exactly their usage, and once the children closed no room
// is held.
func testProcLeased(t *testing.T, p Processes) {
	dsn := p.NewDSN(t)
	t.Cleanup(func() { os.RemoveAll(journalDir(dsn)) })
	tr := openParent(t, p, dsn, 0, nil)
	const limit = 20 * limitTokens
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, limit)
	sums := runChildrenSums(t, 4, "leasereservecommit", dsn, 0)
	if len(sums) != 2 {
		t.Fatalf("the children printed %v; want admitted and leased counts", sums)
	}
	if got, want := sums[0], int64(limit/estimate); got != want {
		t.Fatalf("4 leasing processes x %d goroutines admitted %d (estimate %d, limit %d); want exactly %d",
			goroutinesPerChild, got, estimate, limit, want)
	}
	if sums[1] == 0 {
		t.Fatalf("none of the %d admissions came from a lease: the case proved only the store path", sums[0])
	}
	if used, reserved := Used(t, tr, budget.Request{Key: "k", Provider: "p", Model: "m"}, tr.Now(), l.ID); used != limit/estimate*estimate || reserved != 0 {
		t.Fatalf("after the leased run used/reserved = %d/%d; want %d/0", used, reserved, limit/estimate*estimate)
	}
	noDrift(t, tr)
}

// Four processes of 16 goroutines reserve and commit for two keys of one
// team, half the goroutines on each: the team limit admits exactly
// floor(limit/estimate), and key ka's own, smaller limit holds too.
func testProcTeam(t *testing.T, p Processes) {
	dsn := p.NewDSN(t)
	tr := openParent(t, p, dsn, 0, nil)
	setTeam(t, tr, "eng", "acme", "ka", "kb")
	team := SetLimit(t, tr, budget.LimitSpec{Team: "eng", Window: "daily"}, limitTokens)
	const kaMax = 30 * estimate
	own := SetLimit(t, tr, budget.LimitSpec{Key: "ka", Window: "daily"}, kaMax)
	// 96 tries per key: kb alone could take 96, so the team's 100 fill up.
	if got, want := runChildren(t, 4, "teamreserve", dsn, attempts), int64(limitTokens/estimate); got != want {
		t.Fatalf("4 processes x %d goroutines over 2 keys of a team admitted %d of %d tries; want exactly %d",
			goroutinesPerChild, got, 4*goroutinesPerChild*attempts, want)
	}
	teamUsed, _ := Used(t, tr, budget.Request{Key: "kb"}, tr.Now(), team.ID)
	kaUsed, kaRes := Used(t, tr, budget.Request{Key: "ka"}, tr.Now(), own.ID)
	if teamUsed != limitTokens || kaUsed > kaMax || kaRes != 0 {
		t.Fatalf("team used %d (want %d); ka's own limit used %d reserved %d (want at most %d, 0)", teamUsed, limitTokens, kaUsed, kaRes, kaMax)
	}
	noDrift(t, tr)
}

// Four processes record past every threshold of a limit at once: each
// alert is logged exactly once.
func testProcAlerts(t *testing.T, p Processes) {
	dsn := p.NewDSN(t)
	tr := openParent(t, p, dsn, 0, nil)
	ps := []int{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 500}
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily", Alerts: &ps}, 2000)
	const per = 50 // events per goroutine, 4 tokens each: 12,800 in all
	runChildren(t, 4, "record", dsn, per)
	got := thresholds(t, tr, l.ID)
	for _, p := range ps {
		if got[p] != 1 {
			t.Fatalf("alerts by threshold after 4 processes recorded 12,800 of 2,000: %v; want each of %v once", got, ps)
		}
	}
}

// Four processes mix reservations, commits, releases and records on
// overlapping limits: the batches' lock orders cross, so a server may
// detect deadlocks; the store retries them and nothing drifts or leaks.
func testProcMixed(t *testing.T, p Processes) {
	dsn := p.NewDSN(t)
	tr := openParent(t, p, dsn, 0, nil)
	for _, s := range []budget.LimitSpec{
		{Key: "k", Window: "daily"},
		{Key: "k", Scope: "provider", ScopeValue: "p0", Window: "1h"},
		{Key: "k", Scope: "provider", ScopeValue: "p1", Window: "1h", Metric: "output"},
		{Key: "k", Scope: "model", ScopeValue: "m1", Window: "1m", Metric: "input"},
		{Key: "k", Scope: "model", ScopeValue: "m2", Metric: "concurrent"},
		{Key: "k", Metric: "requests", Window: "daily"},
	} {
		SetLimit(t, tr, s, 1<<40)
	}
	start := time.Now()
	retries := runChildren(t, 4, "mixed", dsn, 20)
	t.Logf("4 processes done in %v with %d store retries", time.Since(start).Round(time.Millisecond), retries)
	noDrift(t, tr)
	d, err := tr.Check(ctx, budget.Request{Key: "k", Provider: "p0", Model: "m2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range d.Limits {
		if st.Reserved != 0 || st.Limit.Metric == budget.MetricConcurrent && st.Used != 0 {
			t.Errorf("limit %s: reserved %d, used %d after every reservation was settled", st.Limit.ID, st.Reserved, st.Used)
		}
	}
}

// A limit lowered by another process is enforced here: at once by Reserve
// (it resolves limits inside its transaction) and by Check once its cached
// definition is older than the refresh interval.
func testProcLimitChange(t *testing.T, p Processes) {
	dsn := p.NewDSN(t)
	const refresh = time.Minute
	c := NewClock(time.Now())
	tr := openParent(t, p, dsn, refresh, c)
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1000)
	req := budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Tokens: 500}}
	if d, err := tr.Check(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("Check before the change = %+v, %v; want allowed", d, err)
	}
	runChildren(t, 1, "setlimit", dsn, 100)
	var ex *budget.ExceededError
	if _, err := tr.Reserve(ctx, req, time.Minute); !errors.As(err, &ex) {
		t.Fatalf("Reserve right after another process lowered the limit = %v; want refused", err)
	}
	c.Advance(refresh)
	d, err := tr.Check(ctx, req)
	if err != nil || d.Allowed || d.Breach == nil || d.Breach.Limit.Max != 100 {
		t.Fatalf("Check one refresh interval after the change = %+v, %v; want refused by the new limit of 100", d, err)
	}
}

// Limits created while four processes record: every counter row still
// equals the history. A writer that resolved its limits just before a new
// one committed must not leave its events out of the new limit's counter,
// which another writer seeded without them.
func testProcLimitsCreated(t *testing.T, p Processes) {
	dsn := p.NewDSN(t)
	tr := openParent(t, p, dsn, 0, nil)
	daily := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1<<40)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runChildren(t, 4, "record", dsn, 60)
	}()
	var windows []string
	windows = append(windows, "weekly", "monthly")
	for i := range 30 {
		windows = append(windows, fmt.Sprintf("%dm", i+1))
	}
	// Each limit is created after the children wrote more than when the
	// previous one was, so creations and their batches interleave.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	created, seen := 0, int64(0)
create:
	for _, w := range windows {
		for {
			if u := usedNow(t, tr, daily.ID); u > seen {
				seen = u
				break
			}
			select {
			case <-done:
				break create
			case <-tick.C:
			}
		}
		SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: w}, 1<<40)
		created++
	}
	<-done
	if created == 0 {
		t.Fatal("the children finished before any limit was created: the case proves nothing")
	}
	t.Logf("%d limits created while the children recorded", created)
	noDrift(t, tr)
}

func testProcProbeFailed(t *testing.T, p Processes) {
	dsn := p.NewDSN(t)
	tr := openParent(t, p, dsn, 0, nil)
	if _, err := tr.Park(ctx, "p", budget.RateLimited, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	runChildren(t, 2, "probefail", dsn, 100)
	st, err := tr.ProviderState(ctx, "p")
	if err != nil || st.ProbeFailures != 200 {
		t.Fatalf("probe failures = %d, %v; want 200 from two processes", st.ProbeFailures, err)
	}
}

// A provider another process is probing is not probed here until that
// process's claim expires.
func testProcProbeClaim(t *testing.T, p Processes) {
	dsn := p.NewDSN(t)
	c := NewClock(time.Now().Add(time.Hour)) // past the park's resume-at
	tr := openParent(t, p, dsn, 0, c)
	if _, err := tr.ParkAt(ctx, "p", budget.RateLimited, time.Second, nil, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	startChild(t, "claim", dsn, 0, "probing")
	pr := &budget.Prober{Tracker: tr, Probe: func(context.Context, string) error {
		t.Error("probed a provider another process holds the claim of")
		return nil
	}}
	rep, err := pr.RunOnce(ctx)
	if err != nil || rep.Probed != 0 {
		t.Fatalf("RunOnce while another process probes = %+v, %v; want nothing probed", rep, err)
	}
	c.Advance(2 * time.Hour) // the claim expires
	pr.Probe = func(context.Context, string) error { return nil }
	if rep, err := pr.RunOnce(ctx); err != nil || rep.Recovered != 1 {
		t.Fatalf("RunOnce after the claim expired = %+v, %v; want recovered", rep, err)
	}
}

// A process killed while holding reservations and leases leaves them in the
// store until Recover, which releases exactly those.
func testProcRecoverAfterKill(t *testing.T, p Processes) {
	dsn := p.NewDSN(t)
	c := NewClock(time.Now())
	tr := openParent(t, p, dsn, 0, c)
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1000)
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Metric: "concurrent"}, 1000)
	cmd := startChild(t, "hold", dsn, 5, "ready")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // killed: the error says so
	byMetric := func() map[budget.Metric]budget.Status {
		d, err := tr.Check(ctx, budget.Request{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		m := map[budget.Metric]budget.Status{}
		for _, s := range d.Limits {
			m[s.Limit.Metric] = s
		}
		return m
	}
	st := byMetric()
	if st[budget.MetricTokens].Reserved != 50 || st[budget.MetricConcurrent].Used != 5 {
		t.Fatalf("before recovery reserved=%d leases=%d; want 50 and 5", st[budget.MetricTokens].Reserved, st[budget.MetricConcurrent].Used)
	}
	c.Advance(2 * time.Minute)
	res, err := tr.Recover(ctx, c.Now())
	if err != nil || res.ReleasedReservations != 5 || res.ReleasedLeases != 5 {
		t.Fatalf("Recover = %+v, %v; want 5 reservations and 5 leases", res, err)
	}
	// Read at the child's instant again to prove the rows themselves are
	// gone, not merely expired.
	c.Advance(-2 * time.Minute)
	st = byMetric()
	if st[budget.MetricTokens].Reserved != 0 || st[budget.MetricConcurrent].Used != 0 {
		t.Fatalf("after recovery reserved=%d leases=%d; want 0", st[budget.MetricTokens].Reserved, st[budget.MetricConcurrent].Used)
	}
}

// usedNow is the used amount of key k's limit id at tr's clock.
func usedNow(t *testing.T, tr *budget.Tracker, id string) int64 {
	t.Helper()
	u, _ := Used(t, tr, budget.Request{Key: "k"}, tr.Now(), id)
	return u
}
