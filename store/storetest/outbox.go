package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// The usage outbox (budget.OutboxTx): every event the history takes while
// a usage hook is registered is queued for it in the same transaction,
// whichever process and path wrote it, and claimed key by key in order.

func init() {
	extra = append(extra,
		suiteCase{"UsageOutboxQueuesEveryEvent", testOutboxEveryEvent},
		suiteCase{"UsageOutboxClaimsKeyByKey", testOutboxClaims},
		suiteCase{"UsageOutboxBacklogAndRemoval", testOutboxBacklog},
		suiteCase{"UsageOutboxQueuesLeaseCommits", testOutboxLeases},
		suiteCase{"UsageOutboxExactlyOnceAcrossProcesses", testOutboxProcesses},
	)
}

const hookA = "https://billing.example/a"

// claimAll claims every due row of dest for owner, failing the test on
// an error.
func claimAll(t *testing.T, tr *budget.Tracker, dest, owner string) []budget.OutboxItem {
	t.Helper()
	items, err := tr.ClaimUsage(ctx, dest, owner, time.Minute, 1000)
	if err != nil {
		t.Fatalf("ClaimUsage(%s): %v", owner, err)
	}
	return items
}

// ids are the request ids of items, in order.
func ids(items []budget.OutboxItem) []string {
	out := make([]string, len(items))
	for i := range items {
		out[i] = items[i].Event.RequestID
	}
	return out
}

func seqs(items []budget.OutboxItem) []int64 {
	out := make([]int64, len(items))
	for i := range items {
		out[i] = items[i].Seq
	}
	return out
}

// Once a hook is registered, every event any process writes by any path
// (RecordSync, Record, Commit, an expired reservation's charge, a late
// commit's :late excess) is queued once, with its stored payload; events
// written before it, and duplicates, are not. A second process's writer,
// running since before the registration, queues too.
func testOutboxEveryEvent(t *testing.T, newDB NewDB) {
	tr, c, open := setup(t, newDB)
	other := NewTracker(t, open(), c, time.Second)
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1<<40)
	RecordSync(t, tr, ev("before", "k", "p", "m", 1, 0, c.Now()))
	RecordSync(t, other, ev("before-other", "k2", "p", "m", 1, 0, c.Now()))
	if added, err := tr.AddUsageHook(ctx, hookA); err != nil || !added {
		t.Fatalf("AddUsageHook = %v, %v; want added", added, err)
	}
	if added, err := other.AddUsageHook(ctx, hookA); err != nil || added {
		t.Fatalf("AddUsageHook again = %v, %v; want not added, no error", added, err)
	}
	if hs, err := other.UsageHooks(ctx); err != nil || !slices.Equal(hs, []string{hookA}) {
		t.Fatalf("UsageHooks = %v, %v; want [%s]", hs, err, hookA)
	}
	RecordSync(t, tr, ev("e1", "k", "p", "m", 10, 5, c.Now()))
	RecordSync(t, other, ev("o1", "k2", "p", "m", 7, 0, c.Now()))
	RecordSync(t, tr, ev("e1", "k", "p", "m", 10, 5, c.Now())) // a duplicate: nothing new
	if err := tr.Record(ctx, ev("e2", "k", "p", "m", 3, 0, c.Now())); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	req := budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: 100, Output: 50}}
	r, err := tr.Reserve(ctx, req, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 40, Output: 20}); err != nil {
		t.Fatal(err)
	}
	late, err := tr.ReserveWith(ctx, req, charge(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Minute)
	if res, err := other.Recover(ctx, c.Now()); err != nil || res.ChargedReservations != 1 {
		t.Fatalf("Recover = %+v, %v; want 1 charged", res, err)
	}
	if s, err := tr.Commit(ctx, late.ID, budget.Usage{Input: 130, Output: 50}); err != nil || s.LateRequestID != late.ID+budget.LateSuffix {
		t.Fatalf("late commit = %+v, %v; want its excess as %s:late", s, err, late.ID)
	}

	items := claimAll(t, tr, hookA, "A")
	want := []string{"e1", "o1", "e2", r.ID, late.ID, late.ID + budget.LateSuffix}
	if got := ids(items); !slices.Equal(got, want) {
		t.Fatalf("queued %v; want %v (in the order written, once each, none from before the hook)", got, want)
	}
	var history []budget.Usage
	if _, err := tr.Export(ctx, T0.Add(-time.Hour), c.Now().Add(time.Hour), "", func(u budget.Usage) error {
		history = append(history, u)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range items {
		it := &items[i]
		j := slices.IndexFunc(history, func(u budget.Usage) bool { return u.Key == it.Event.Key && u.RequestID == it.Event.RequestID })
		if !it.Found || j < 0 {
			t.Fatalf("item %s: found %v, in the history at %d; want both", it.Event.RequestID, it.Found, j)
		}
		if h := history[j]; h.Input != it.Event.Input || h.Output != it.Event.Output || h.Cost != it.Event.Cost || !h.At.Equal(it.Event.At) ||
			h.Team != it.Event.Team || h.Provider != it.Event.Provider || it.Attempts != 0 || it.Dest != hookA {
			t.Fatalf("item %+v; want the stored event %+v, no attempts, dest %s", it, h, hookA)
		}
		if i > 0 && items[i-1].Seq >= it.Seq {
			t.Fatalf("seqs %v; want ascending", seqs(items))
		}
	}
	if len(history) != len(want)+2 {
		t.Fatalf("history holds %d events; want the %d queued and the 2 from before the hook", len(history), len(want))
	}
	if err := tr.UsageDelivered(ctx, hookA, "A", seqs(items)); err != nil {
		t.Fatal(err)
	}
	if again := claimAll(t, other, hookA, "B"); len(again) != 0 {
		t.Fatalf("after delivery: %v claimable; want none, ever again", ids(again))
	}
}

// Claims go key by key in queued order: a key held by one deliverer's
// live claim, or waiting to retry, lends none of its later rows to
// another; other keys go on. A claim that expired is taken over, and the
// late report of its first owner is refused, changing nothing.
func testOutboxClaims(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	if _, err := tr.AddUsageHook(ctx, hookA); err != nil {
		t.Fatal(err)
	}
	RecordSync(t, tr, ev("a1", "a", "p", "m", 1, 0, c.Now()), ev("b1", "b", "p", "m", 1, 0, c.Now()),
		ev("a2", "a", "p", "m", 1, 0, c.Now()), ev("c1", "c", "p", "m", 1, 0, c.Now()))
	first, err := tr.ClaimUsage(ctx, hookA, "A", time.Minute, 2)
	if err != nil || !slices.Equal(ids(first), []string{"a1", "b1"}) {
		t.Fatalf("A's claim of 2 = %v, %v; want [a1 b1]", ids(first), err)
	}
	if got := ids(claimAll(t, tr, hookA, "B")); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("B's claim while A holds a1 = %v; want [c1] (a2 waits behind a1)", got)
	}
	if err := tr.UsageFailed(ctx, hookA, "A", seqs(first), 1, errors.New("503 Service Unavailable")); err != nil {
		t.Fatal(err)
	}
	RecordSync(t, tr, ev("b2", "b", "p", "m", 1, 0, c.Now()), ev("d1", "d", "p", "m", 1, 0, c.Now()))
	if got := ids(claimAll(t, tr, hookA, "A")); !slices.Equal(got, []string{"d1"}) {
		t.Fatalf("claim during the retry delay = %v; want [d1] (a and b wait for their failed rows)", got)
	}
	c.Advance(budget.UsageRetryDelay(1))
	retry := claimAll(t, tr, hookA, "B")
	if got := ids(retry); !slices.Equal(got, []string{"a1", "b1", "a2", "c1", "b2"}) {
		t.Fatalf("B's claim after the delay = %v; want [a1 b1 a2 c1 b2] (c1 its own still, d1 A's)", got)
	}
	if retry[0].Attempts != 1 || retry[2].Attempts != 0 {
		t.Fatalf("attempts %d, %d; want 1 for a1, 0 for a2", retry[0].Attempts, retry[2].Attempts)
	}
	// B's claim expires unreported: A takes it over; B's report is lost.
	c.Advance(time.Minute)
	took := claimAll(t, tr, hookA, "A")
	if got := ids(took); !slices.Equal(got, []string{"a1", "b1", "a2", "c1", "b2", "d1"}) {
		t.Fatalf("A's claim after B's expired = %v; want B's rows and its own d1", got)
	}
	if err := tr.UsageDelivered(ctx, hookA, "B", seqs(retry)); !errors.Is(err, budget.ErrClaimLost) {
		t.Fatalf("B's late report = %v; want ErrClaimLost", err)
	}
	if err := tr.UsageDelivered(ctx, hookA, "A", seqs(took)); err != nil {
		t.Fatalf("A's report after B's refused one = %v; want its rows all still A's", err)
	}
	if got := ids(claimAll(t, tr, hookA, "B")); len(got) != 0 {
		t.Fatalf("what is left = %v; want nothing", got)
	}
}

// The backlog says, per destination, what is pending, since when, the
// most attempts and the last error; alerts undelivered show as a kind of
// their own. Prune refuses to drop events still queued. Removing a hook
// drops its rows and stops the queueing.
func testOutboxBacklog(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	if _, err := tr.AddUsageHook(ctx, hookA); err != nil {
		t.Fatal(err)
	}
	const hookB = "library:ledger"
	if _, err := tr.AddUsageHook(ctx, hookB); err != nil {
		t.Fatal(err)
	}
	queued := c.Now()
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "monthly", Alerts: &[]int{50}}, 100)
	RecordSync(t, tr, ev("e1", "k", "p", "m", 60, 0, queued))
	c.Advance(time.Second)
	RecordSync(t, tr, ev("e2", "k", "p", "m", 1, 0, c.Now()))
	items := claimAll(t, tr, hookA, "A")
	if err := tr.UsageFailed(ctx, hookA, "A", seqs(items[:1]), 3, errors.New("webhook answered 500 Internal Server Error")); err != nil {
		t.Fatal(err)
	}
	bl, err := tr.OutboxBacklog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bl) != 3 {
		t.Fatalf("backlog %+v; want both hooks and the alerts", bl)
	}
	a, b, al := bl[0], bl[1], bl[2]
	if a.Kind != budget.OutboxUsage || a.Dest != hookA || a.Pending != 2 || !a.Oldest.Equal(queued) || a.Attempts != 1 ||
		!strings.Contains(a.LastError, "500") || !a.NextAttempt.Equal(c.Now().Add(budget.UsageRetryDelay(3))) {
		t.Fatalf("backlog of %s = %+v; want 2 pending since %v, 1 attempt, the 500, next in %v", hookA, a, queued, budget.UsageRetryDelay(3))
	}
	if b.Dest != hookB || b.Pending != 2 || b.Attempts != 0 || b.LastError != "" || !b.NextAttempt.IsZero() {
		t.Fatalf("backlog of %s = %+v; want 2 pending, never tried", hookB, b)
	}
	if al.Kind != budget.OutboxAlert || al.Pending != 1 || !al.Oldest.Equal(queued) {
		t.Fatalf("alerts backlog = %+v; want the one 50%% alert", al)
	}
	// Prune would drop e1 and e2 from the history they are read from.
	c.Set(T0.Add(72 * time.Hour))
	if _, err := tr.Prune(ctx, T0.Add(48*time.Hour)); !errors.Is(err, budget.ErrInvalid) || !strings.Contains(err.Error(), "outbox") {
		t.Fatalf("Prune over queued events = %v; want ErrInvalid naming the outbox", err)
	}
	if n, err := tr.RemoveUsageHook(ctx, hookA); err != nil || n != 2 {
		t.Fatalf("RemoveUsageHook = %d, %v; want 2 rows dropped", n, err)
	}
	if _, err := tr.RemoveUsageHook(ctx, hookA); !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("RemoveUsageHook again = %v; want ErrNotFound", err)
	}
	RecordSync(t, tr, ev("e3", "k", "p", "m", 1, 0, c.Now()))
	if got := ids(claimAll(t, tr, hookA, "A")); len(got) != 0 {
		t.Fatalf("claim of a removed hook = %v; want nothing queued after removal", got)
	}
	if got := ids(claimAll(t, tr, hookB, "A")); !slices.Equal(got, []string{"e1", "e2", "e3"}) {
		t.Fatalf("claim of %s = %v; want [e1 e2 e3]", hookB, got)
	}
}

// Commits decided in memory from budget leases, written by the lease
// batches, are queued as every other event is: each once, in order.
func testOutboxLeases(t *testing.T, newDB NewDB) {
	open := newDB(t)
	c := NewClock(T0)
	tr := NewLeaseTracker(t, open(), c, time.Second, t.TempDir(), true)
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1<<30)
	if _, err := tr.AddUsageHook(ctx, hookA); err != nil {
		t.Fatal(err)
	}
	var want []string
	for range 20 {
		r, err := tr.Reserve(ctx, leaseReq(50), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 10, Output: 20}); err != nil {
			t.Fatal(err)
		}
		want = append(want, r.ID)
	}
	if _, err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	items := claimAll(t, tr, hookA, "A")
	if got := ids(items); !slices.Equal(got, want) {
		t.Fatalf("queued %v; want the 20 leased commits in order %v", got, want)
	}
	for _, it := range items {
		if !it.Found || it.Event.Input != 10 || it.Event.Output != 20 {
			t.Fatalf("item %+v; want the committed usage 10/20", it)
		}
	}
}

// Four processes record one key's events at once, each waiting for its
// last commit before the next, while two deliverers claim small batches
// and report them delivered: every event is delivered exactly once, and
// each process's events in the order it recorded them (of two events, the
// one committed before the other began comes first).
func testOutboxProcesses(t *testing.T, newDB NewDB) {
	open := newDB(t)
	c := NewClock(T0)
	const procs, each = 4, 15
	trs := make([]*budget.Tracker, procs)
	for i := range trs {
		trs[i] = NewTracker(t, open(), c, time.Second)
	}
	if _, err := trs[0].AddUsageHook(ctx, hookA); err != nil {
		t.Fatal(err)
	}
	var got []string
	deliver := func(tr *budget.Tracker, owner string) (int, error) {
		items, err := tr.ClaimUsage(context.Background(), hookA, owner, time.Minute, 7)
		if err != nil || len(items) == 0 {
			return 0, err
		}
		got = append(got, ids(items)...) // one deliverer at a time here: the claims are what is tested
		return len(items), tr.UsageDelivered(context.Background(), hookA, owner, seqs(items))
	}
	done := make(chan error, 1)
	go func() {
		done <- concurrently(procs, func(g int) error {
			for i := range each {
				if _, err := trs[g].RecordSync(context.Background(), ev(fmt.Sprintf("p%d-%02d", g, i), "k", "p", "m", 1, 0, c.Now())); err != nil {
					return err
				}
			}
			return nil
		})
	}()
	for recording := true; recording; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			recording = false
		default:
		}
		for _, owner := range []string{"A", "B"} {
			if _, err := deliver(trs[len(got)%procs], owner); err != nil {
				t.Fatal(err)
			}
		}
	}
	for {
		n, err := deliver(trs[0], "A")
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if len(got) != procs*each {
		t.Fatalf("delivered %d events; want %d, each once: %v", len(got), procs*each, got)
	}
	next := make([]int, procs)
	for _, id := range got {
		var g, i int
		if _, err := fmt.Sscanf(id, "p%d-%d", &g, &i); err != nil || i != next[g] {
			t.Fatalf("delivered %s where process %d's event %d was due: %v", id, g, next[g], got)
		}
		next[g]++
	}
}
