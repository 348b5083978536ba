package budget_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

// The writer under failing stores: memstore's FailNext makes attempts fail,
// its gates say when the writer reached the attempt that will succeed.

var errBoom = errors.New("disk on fire")

// heal lets the attempt held at g run and returns once it has committed:
// the batch after it reaches a second gate.
func (h *harness) heal(g *memstore.Gate) {
	h.t.Helper()
	<-g.Reached()
	next := h.s.Gate()
	g.Release()
	// Its flush is queued behind the held batch (it may return at once,
	// the writer being unhealthy until that batch lands), so the batch
	// after the held one is the flush's.
	go func() { _, _ = h.tr.Flush(ctx) }()
	<-next.Reached()
	next.Release()
	if _, err := h.tr.Flush(ctx); err != nil {
		h.t.Fatalf("Flush after the store healed: %v", err)
	}
}

// Waiters hear of a failing store once a batch failed Config.FlushFailures
// times, not before; the writer keeps retrying until it lands.
func TestWriterTellsWaitersAfterFlushFailures(t *testing.T) {
	const flushFailures = 3
	for _, n := range []int{1, flushFailures - 1, flushFailures, flushFailures + 2} {
		t.Run(fmt.Sprintf("%d failures", n), func(t *testing.T) {
			h := newHarness(t, flushFailures)
			h.limit("req", budget.MetricRequests, 10)
			h.s.FailNext(n, errBoom)
			g := h.s.Gate()
			errc := make(chan error, 1)
			go func() {
				_, err := h.tr.RecordSync(ctx, budget.Usage{RequestID: "e1", Key: "k", Input: 1, At: bt0})
				errc <- err
			}()
			<-g.Reached() // n attempts failed; the next one is held
			var err error
			if n >= flushFailures {
				err = <-errc
			}
			if n >= flushFailures != errors.Is(err, errBoom) {
				t.Fatalf("%d failures: RecordSync = %v; want %v only from %d failures on", n, err, errBoom, flushFailures)
			}
			h.heal(g)
			if n < flushFailures {
				if err := <-errc; err != nil {
					t.Fatalf("%d failures: RecordSync = %v; want nil once the store healed", n, err)
				}
			}
			if got := h.stored("req", bt0); got.used != 1 {
				t.Errorf("%d failures: requests used %d after healing; want 1", n, got.used)
			}
			if st := h.tr.Stats(); st.Failures != int64(n) || st.Retries != int64(n) {
				t.Errorf("%d failures: Stats failures %d, retries %d; want %d each", n, st.Failures, st.Retries, n)
			}
			if err := h.tr.Health(); err != nil {
				t.Errorf("Health after healing: %v", err)
			}
		})
	}
}

// A settlement whose caller was told of the failure is still applied once
// the store heals (a charge is never given up); a reservation or renewal
// whose caller was told never happens later.
func TestWriterKeepsSettlementsDropsToldReservations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		op      op
		tok     window                  // after healing
		state   budget.ReservationState // r0's, after healing
		live    int
		expires time.Duration // r0's expiry after healing, from bt0
	}{
		{"commit is applied", commit("r0", 30, 0), window{"tok", 30, 0}, committed, 0, time.Minute},
		{"release is applied", op{kind: "release", name: "r0"}, window{"tok", 0, 0}, released, 0, time.Minute},
		{"reserve never lands", reserve("r1", 20, time.Minute), window{"tok", 0, 50}, live, 1, time.Minute},
		{"renew never lands", op{kind: "renew", name: "r0", ttl: time.Hour}, window{"tok", 0, 50}, live, 1, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 3)
			h.limit("tok", budget.MetricTokens, 100)
			h.check(0, reserve("r0", 50, time.Minute), h.do(reserve("r0", 50, time.Minute)))
			h.s.FailNext(3, errBoom)
			g := h.s.Gate()
			if r := h.do(tc.op); !errors.Is(r.err, errBoom) {
				t.Fatalf("%s on a failing store = %v; want %v", tc.op.kind, r.err, errBoom)
			}
			h.heal(g)
			h.expectR0(tc.tok, tc.state, tc.live, tc.expires)
		})
	}
}

// expectR0 checks the tok window at bt0, and reservation r0's state and
// expiry, and the live count.
func (h *harness) expectR0(tok window, state budget.ReservationState, live int, expires time.Duration) {
	h.t.Helper()
	if got := h.stored("tok", bt0); got != tok {
		h.t.Errorf("stored tok = used %d reserved %d; want %d, %d", got.used, got.reserved, tok.used, tok.reserved)
	}
	states, n := h.states([]string{"r0"})
	if states["r0"] != state || n != live {
		h.t.Errorf("r0 is %q with %d live reservations; want %q with %d", states["r0"], n, state, live)
	}
	var exp time.Time
	if err := h.s.View(ctx, func(tx budget.Tx) error {
		rs, err := tx.Reservations(ctx, []string{h.id("r0")})
		if len(rs) == 1 {
			exp = rs[0].ExpiresAt
		}
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
	if want := bt0.Add(expires); !exp.Equal(want) {
		h.t.Errorf("r0 expires %v; want %v", exp, want)
	}
}

// In one failing batch, the commit is kept and the reservation dropped.
func TestWriterFailingBatchKeepsCommitDropsReserve(t *testing.T) {
	h := newHarness(t, 3)
	h.limit("tok", budget.MetricTokens, 100)
	h.check(0, reserve("r0", 50, time.Minute), h.do(reserve("r0", 50, time.Minute)))
	held := h.s.Gate()
	go func() { _, _ = h.tr.Flush(ctx) }()
	<-held.Reached()
	errs := make(chan error, 2)
	for i, o := range []op{commit("r0", 30, 0), reserve("r1", 20, time.Minute)} {
		go func() { errs <- h.do(o).err }()
		h.waitQueued(i + 1)
	}
	h.s.FailNext(3, errBoom) // the held flush is past its failure check
	g := h.s.Gate()
	held.Release()
	for range 2 {
		if err := <-errs; !errors.Is(err, errBoom) {
			t.Fatalf("an operation of the failing batch got %v; want %v", err, errBoom)
		}
	}
	h.heal(g)
	h.expectR0(window{"tok", 30, 0}, committed, 0, time.Minute)
}

// A try whose commit fails, or that the store rolls back and runs again,
// leaves nothing in the writer's memory: the batch is planned again from
// the store, so a reservation holds once and a charge is made once.
func TestWriterPlansAgainAfterARolledBackTry(t *testing.T) {
	for _, tc := range []struct {
		name string
		arm  func(*memstore.Store)
	}{
		{"commit failed", func(s *memstore.Store) { s.FailCommit(1, errBoom) }},
		{"transient conflict", func(s *memstore.Store) { s.RetryNext(1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 3)
			h.limit("tok", budget.MetricTokens, 100)
			tc.arm(h.s)
			h.check(0, reserve("r0", 60, time.Minute), h.do(reserve("r0", 60, time.Minute)))
			h.check(1, reserve("r1", 50, time.Minute).refused(errExceeded), h.do(reserve("r1", 50, time.Minute)))
			if got := h.stored("tok", bt0); got != (window{"tok", 0, 60}) {
				t.Fatalf("stored tok = used %d reserved %d; want 0, 60", got.used, got.reserved)
			}
			r := h.do(op{kind: "reserve", name: "c", est: budget.Estimate{Tokens: 40}, ttl: time.Minute, charge: true})
			h.check(2, op{kind: "reserve", name: "c"}, r)
			h.clock.Set(bt0.Add(2 * time.Minute))
			tc.arm(h.s)
			rec := h.do(recoverAt(2*time.Minute, budget.RecoverResult{}))
			want := budget.RecoverResult{ReleasedReservations: 2, ChargedReservations: 1}
			if rec.err != nil || rec.rec != want {
				t.Fatalf("Recover = %+v, %v; want %+v", rec.rec, rec.err, want)
			}
			if got := h.stored("tok", bt0); got != (window{"tok", 40, 0}) {
				t.Errorf("stored tok after recovery = used %d reserved %d; want 40 (one charge), 0", got.used, got.reserved)
			}
			if fail, failCommit, retry := h.s.Pending(); fail+failCommit+retry != 0 {
				t.Errorf("hooks left armed: %d, %d, %d; want every one used", fail, failCommit, retry)
			}
		})
	}
}

// A reservation whose caller's context ended while it was queued is
// withdrawn: the writer never plans it.
func TestWriterSkipsWithdrawnReservation(t *testing.T) {
	h := newHarness(t, 3)
	h.limit("tok", budget.MetricTokens, 100)
	g := h.s.Gate()
	go func() { _, _ = h.tr.Flush(ctx) }()
	<-g.Reached()
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := h.tr.Reserve(cctx, budget.Request{Key: "k", Estimate: budget.Estimate{Tokens: 10}}, time.Minute)
		errc <- err
	}()
	h.waitQueued(1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve with its context cancelled while queued = %v; want context.Canceled", err)
	}
	g.Release()
	if _, err := h.tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, n := h.stored("tok", bt0), 0; got.reserved != 0 {
		t.Errorf("stored tok reserved %d; want %d", got.reserved, n)
	}
	if _, live := h.states(nil); live != 0 {
		t.Errorf("%d live reservations; want 0", live)
	}
}

// Close whose context has ended while the store fails answers every
// waiter and reports how many operations were not written, with the
// context's and the store's errors.
func TestWriterCloseReportsUnwritten(t *testing.T) {
	h := newHarness(t, 2)
	h.limit("tok", budget.MetricTokens, 100)
	h.check(0, reserve("r0", 50, time.Minute), h.do(reserve("r0", 50, time.Minute)))
	h.s.FailNext(1<<30, errBoom)
	for _, id := range []string{"e1", "e2"} {
		if err := h.tr.Record(ctx, budget.Usage{RequestID: id, Key: "k", Input: 5, At: bt0}); err != nil {
			t.Fatalf("Record: %v", err)
		}
	}
	// The commit's caller hears of the failure; the commit stays queued.
	if r := h.do(commit("r0", 30, 0)); !errors.Is(r.err, errBoom) {
		t.Fatalf("Commit on a failing store = %v; want %v", r.err, errBoom)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err := h.tr.Close(cctx)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errBoom) || !strings.Contains(err.Error(), "3 operations not written") {
		t.Fatalf("Close = %v; want 3 operations not written, with context.Canceled and %v", err, errBoom)
	}
	h.s.FailNext(0, nil)
	h.expectR0(window{"tok", 0, 50}, live, 1, time.Minute)
}
