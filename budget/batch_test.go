package budget_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

// The batch decision, as table tests at fixed instants: each step puts its
// operations into one writer batch, in order (a gate holds the writer
// while they queue), then checks every answer and what the store holds.

var ctx = context.Background()

// runBugs runs the cases of known bugs instead of skipping them.
var runBugs = flag.Bool("bugs", false, "run the test cases of known bugs")

// bt0 is the instant every batch case starts at: its limits' 1h windows
// hold [09:00, 10:00).
var bt0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// clock is a settable Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// harness is a Tracker on a memstore at a stopped clock, with the ids of
// the reservations a case names.
type harness struct {
	t     *testing.T
	s     *memstore.Store
	tr    *budget.Tracker
	clock *clock
	ids   map[string]string // reservation name -> id
}

func newHarness(t *testing.T, flushFailures int) *harness {
	t.Helper()
	h := &harness{t: t, s: memstore.New(), clock: &clock{t: bt0}, ids: map[string]string{}}
	cfg := budget.DefaultConfig()
	cfg.Now = h.clock.Now
	cfg.SweepInterval = -1
	cfg.FlushFailures = flushFailures
	tr, err := budget.New(ctx, h.s, cfg)
	if err != nil {
		t.Fatalf("budget.New: %v", err)
	}
	h.tr = tr
	t.Cleanup(func() {
		if err := tr.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

// limit is limit id of key k: metric m, max, over 1h windows (none for a
// concurrent limit).
func (h *harness) limit(id string, m budget.Metric, max int64) {
	h.t.Helper()
	s := budget.LimitSpec{ID: id, Key: "k", Metric: string(m), Window: "1h", Max: &max}
	if m == budget.MetricConcurrent {
		s.Window = ""
	}
	if _, _, err := h.tr.SetLimit(ctx, s); err != nil {
		h.t.Fatalf("SetLimit(%s): %v", id, err)
	}
}

// op is one operation of a step and the answer it must get.
type op struct {
	kind   string          // reserve, commit, release, renew, record, recover
	name   string          // the reservation it makes (reserve) or settles
	est    budget.Estimate // reserve
	ttl    time.Duration   // reserve, renew
	charge bool            // reserve: ExpireCharge
	usage  budget.Usage    // record: the event (key "k"); commit: the actual usage
	at     time.Duration   // recover: the instant, from bt0

	want        error                // nil, or a sentinel / *ExceededError the answer matches
	settled     budget.Settlement    // commit: Expired and Charged; LateRequestID "" or ":late"
	recovered   budget.RecoverResult // recover
	dup         bool                 // record
	wantExpires time.Duration        // renew: the new expiry, from bt0
}

func reserve(name string, tokens int64, ttl time.Duration) op {
	return op{kind: "reserve", name: name, est: budget.Estimate{Tokens: tokens}, ttl: ttl}
}

func commit(name string, input, output int64) op {
	return op{kind: "commit", name: name, usage: budget.Usage{Input: input, Output: output}}
}

func record(id string, tokens int64) op {
	return op{kind: "record", usage: budget.Usage{RequestID: id, Key: "k", Input: tokens, At: bt0}}
}

func recoverAt(at time.Duration, want budget.RecoverResult) op {
	return op{kind: "recover", at: at, recovered: want}
}

func (o op) refused(err error) op { o.want = err; return o }

// errExceeded stands for any *budget.ExceededError in op.want.
var errExceeded = errors.New("exceeded")

// result is what an operation got.
type result struct {
	err     error
	id      string // reserve
	settled budget.Settlement
	rec     budget.RecoverResult
	dup     bool
	expires time.Time
}

func (h *harness) do(o op) result {
	var r result
	switch o.kind {
	case "reserve":
		opts := budget.ReserveOptions{TTL: o.ttl}
		if o.charge {
			opts.OnExpiry = budget.ExpireCharge
		}
		res, err := h.tr.ReserveWith(ctx, budget.Request{Key: "k", Estimate: o.est}, opts)
		r.err = err
		if err == nil {
			r.id = res.ID
		}
	case "commit":
		r.settled, r.err = h.tr.Commit(ctx, h.id(o.name), o.usage)
	case "release":
		r.err = h.tr.Release(ctx, h.id(o.name))
	case "renew":
		r.expires, r.err = h.tr.Renew(ctx, h.id(o.name), o.ttl)
	case "record":
		var dups []bool
		dups, r.err = h.tr.RecordSync(ctx, o.usage)
		r.dup = len(dups) == 1 && dups[0]
	case "recover":
		r.rec, r.err = h.tr.Recover(ctx, bt0.Add(o.at))
	default:
		panic("unknown op " + o.kind)
	}
	return r
}

// id is the id of reservation name, or a made-up one it never had.
func (h *harness) id(name string) string {
	if id, ok := h.ids[name]; ok {
		return id
	}
	return "rsv_unknown_" + name
}

// batch runs ops as one writer batch, in order: a gate holds the writer
// on a flush while each operation is queued behind it, then lets it go.
func (h *harness) batch(ops []op) []result {
	h.t.Helper()
	before := h.tr.Stats().Batches
	g := h.s.Gate()
	flushed := make(chan error, 1)
	go func() {
		_, err := h.tr.Flush(ctx)
		flushed <- err
	}()
	<-g.Reached()
	out := make([]result, len(ops))
	var wg sync.WaitGroup
	for i, o := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = h.do(o)
		}()
		h.waitQueued(i + 1)
	}
	g.Release()
	wg.Wait()
	if err := <-flushed; err != nil {
		h.t.Fatalf("Flush holding the gate: %v", err)
	}
	if got := h.tr.Stats().Batches - before; len(ops) > 0 && got != 2 {
		h.t.Fatalf("the step took %d batches; want 2 (the gated flush, then its operations)", got)
	}
	return out
}

// waitQueued returns once n operations wait in the tracker's queue. The
// writer is held at a gate, so the depth only grows.
func (h *harness) waitQueued(n int) {
	for h.tr.Stats().QueueDepth < int64(n) {
		runtime.Gosched()
	}
}

// check compares what o got with what it wants.
func (h *harness) check(i int, o op, r result) {
	h.t.Helper()
	what := fmt.Sprintf("op %d (%s %s)", i, o.kind, o.name)
	switch {
	case o.want == errExceeded:
		var ex *budget.ExceededError
		if !errors.As(r.err, &ex) {
			h.t.Errorf("%s: err = %v; want *ExceededError", what, r.err)
		}
	case o.want != nil:
		if !errors.Is(r.err, o.want) {
			h.t.Errorf("%s: err = %v; want %v", what, r.err, o.want)
		}
	case r.err != nil:
		h.t.Errorf("%s: err = %v; want nil", what, r.err)
	}
	if r.err != nil {
		return
	}
	switch o.kind {
	case "reserve":
		h.ids[o.name] = r.id
	case "commit":
		want := o.settled
		want.RequestID = h.id(o.name)
		if want.LateRequestID != "" {
			want.LateRequestID = want.RequestID + want.LateRequestID
		}
		if r.settled != want {
			h.t.Errorf("%s: settlement = %+v; want %+v", what, r.settled, want)
		}
	case "record":
		if r.dup != o.dup {
			h.t.Errorf("%s: duplicate = %t; want %t", what, r.dup, o.dup)
		}
	case "recover":
		if got := r.rec; got != o.recovered {
			h.t.Errorf("%s: recovered %+v; want %+v", what, got, o.recovered)
		}
	case "renew":
		if want := bt0.Add(o.wantExpires); !r.expires.Equal(want) {
			h.t.Errorf("%s: expires %v; want %v", what, r.expires, want)
		}
	}
}

// window is what the store holds for one limit's window at an instant:
// its usage, and the sum of its live holds (leases counted one each).
type window struct {
	limit          string
	used, reserved int64
}

// stored reads limit id's window at at through the store alone.
func (h *harness) stored(id string, at time.Time) window {
	h.t.Helper()
	w := window{limit: id}
	err := h.s.View(ctx, func(tx budget.Tx) error {
		l, err := tx.Limit(ctx, id)
		if err != nil {
			return err
		}
		ref := budget.WindowRef{Limit: &l}
		if l.Metric != budget.MetricConcurrent {
			ref.Start, ref.End = l.Window.Bounds(at)
		}
		ws, err := tx.Windows(ctx, []budget.WindowRef{ref}, at)
		if err != nil {
			return err
		}
		w.used = ws[0].Used
		for _, hd := range ws[0].Holds {
			w.reserved += hd.Amount
		}
		return nil
	})
	if err != nil {
		h.t.Fatalf("read window of %s: %v", id, err)
	}
	return w
}

// states reads the stored state of the named reservations ("" when the
// store has none) and counts every live reservation it holds.
func (h *harness) states(names []string) (map[string]budget.ReservationState, int) {
	h.t.Helper()
	out := make(map[string]budget.ReservationState, len(names))
	live := 0
	err := h.s.View(ctx, func(tx budget.Tx) error {
		ids := make([]string, 0, len(names))
		for _, n := range names {
			ids = append(ids, h.id(n))
			out[n] = ""
		}
		rows, err := tx.Reservations(ctx, ids)
		if err != nil {
			return err
		}
		for _, r := range rows {
			for _, n := range names {
				if h.id(n) == r.ID {
					out[n] = r.State
				}
			}
		}
		all, err := tx.ExpiredReservations(ctx, budget.Forever, 1<<20)
		live = len(all)
		return err
	})
	if err != nil {
		h.t.Fatalf("read reservations: %v", err)
	}
	return out, live
}

// step is one batch at one instant and what the store holds after it.
type step struct {
	at      time.Duration // the clock, from bt0
	ops     []op          // one batch, queued in this order (none: only check)
	windows []window      // read at the step's instant
	states  map[string]budget.ReservationState
	live    int // live reservations in the store (expired unrecovered ones included)
}

type limitDef struct {
	id  string
	m   budget.Metric
	max int64
}

var (
	tok100 = limitDef{"tok", budget.MetricTokens, 100}
	req10  = limitDef{"req", budget.MetricRequests, 10}
	conc1  = limitDef{"conc", budget.MetricConcurrent, 1}
)

const (
	live      = budget.ReservationLive
	committed = budget.ReservationCommitted
	released  = budget.ReservationReleased
	expired   = budget.ReservationExpired
)

func TestBatchDecision(t *testing.T) {
	charge := func(o op) op { o.charge = true; return o }
	for _, tc := range []struct {
		name   string
		bug    string // a known bug: the case is skipped, saying so
		limits []limitDef
		prior  []budget.Usage // recorded before the first step
		steps  []step
	}{
		{
			name:   "a reservation admitted earlier in the batch is seen by a later one",
			limits: []limitDef{tok100},
			steps: []step{{ops: []op{reserve("r1", 60, time.Minute), reserve("r2", 60, time.Minute).refused(errExceeded), reserve("r3", 40, time.Minute)},
				windows: []window{{"tok", 0, 100}}, states: map[string]budget.ReservationState{"r1": live, "r2": "", "r3": live}, live: 2}},
		},
		{
			name:   "a refusal writes nothing",
			limits: []limitDef{tok100, req10},
			steps: []step{{ops: []op{reserve("r1", 150, time.Minute).refused(errExceeded)},
				windows: []window{{"tok", 0, 0}, {"req", 0, 0}}, live: 0}},
		},
		{
			name:   "a refusal in the batch leaves the next operation its room",
			limits: []limitDef{tok100},
			steps: []step{{ops: []op{reserve("r1", 150, time.Minute).refused(errExceeded), reserve("r2", 100, time.Minute)},
				windows: []window{{"tok", 0, 100}}, states: map[string]budget.ReservationState{"r2": live}, live: 1}},
		},
		{
			name:   "duplicates add nothing, in the store or in the batch",
			limits: []limitDef{tok100, req10},
			prior:  []budget.Usage{{RequestID: "e1", Key: "k", Input: 10, At: bt0}},
			steps: []step{{ops: []op{withDup(record("e1", 10)), record("e2", 5), withDup(record("e2", 5))},
				windows: []window{{"tok", 15, 0}, {"req", 2, 0}}}},
		},
		{
			name:   "usage earlier in the batch counts for a later reservation",
			limits: []limitDef{tok100},
			steps: []step{{ops: []op{record("e1", 80), reserve("r1", 30, time.Minute).refused(errExceeded), reserve("r2", 20, time.Minute)},
				windows: []window{{"tok", 80, 20}}, live: 1}},
		},
		{
			name:   "a release earlier in the batch frees room for a later reservation",
			limits: []limitDef{tok100},
			steps: []step{
				{ops: []op{reserve("r1", 100, time.Minute)}, windows: []window{{"tok", 0, 100}}, live: 1},
				{ops: []op{{kind: "release", name: "r1"}, reserve("r2", 100, time.Minute)},
					windows: []window{{"tok", 0, 100}}, states: map[string]budget.ReservationState{"r1": released, "r2": live}, live: 1},
			},
		},
		{
			name:   "a release later in the batch frees nothing for an earlier reservation",
			limits: []limitDef{tok100},
			steps: []step{
				{ops: []op{reserve("r1", 100, time.Minute)}, live: 1},
				{ops: []op{reserve("r2", 100, time.Minute).refused(errExceeded), {kind: "release", name: "r1"}},
					windows: []window{{"tok", 0, 0}}, states: map[string]budget.ReservationState{"r1": released}, live: 0},
			},
		},
		{
			name:   "a commit earlier in the batch replaces its hold with its usage",
			limits: []limitDef{tok100, req10},
			steps: []step{
				{ops: []op{reserve("r1", 50, time.Minute)}, live: 1},
				{ops: []op{commit("r1", 70, 0), reserve("r2", 40, time.Minute).refused(errExceeded), reserve("r3", 30, time.Minute)},
					windows: []window{{"tok", 70, 30}, {"req", 1, 1}}, states: map[string]budget.ReservationState{"r1": committed, "r3": live}, live: 1},
			},
		},
		{
			name:   "a lease admitted earlier in the batch takes the slot",
			limits: []limitDef{conc1},
			steps: []step{
				{ops: []op{reserve("r1", 1, time.Minute), reserve("r2", 1, time.Minute).refused(errExceeded)},
					windows: []window{{"conc", 0, 1}}, live: 1},
				{ops: []op{{kind: "release", name: "r1"}, reserve("r3", 1, time.Minute)},
					windows: []window{{"conc", 0, 1}}, states: map[string]budget.ReservationState{"r1": released, "r3": live}, live: 1},
			},
		},
		{
			name:   "settled reservations answer ErrSettled, unknown ones ErrNotFound, in one batch",
			limits: []limitDef{tok100, req10},
			steps: []step{
				{ops: []op{reserve("r1", 50, time.Minute)}, live: 1},
				{ops: []op{commit("r1", 30, 0), commit("r1", 5, 0).refused(budget.ErrSettled), {kind: "release", name: "r1", want: budget.ErrSettled},
					{kind: "renew", name: "r1", ttl: time.Minute, want: budget.ErrLeaseLost}, commit("nope", 1, 0).refused(budget.ErrNotFound),
					{kind: "release", name: "nope", want: budget.ErrNotFound}},
					windows: []window{{"tok", 30, 0}, {"req", 1, 0}}, states: map[string]budget.ReservationState{"r1": committed}, live: 0},
			},
		},
		{
			name:   "a renewal keeps the hold past the first expiry; a lapsed one is lost",
			limits: []limitDef{tok100},
			steps: []step{
				{ops: []op{reserve("r1", 50, time.Minute)}, live: 1},
				{at: 30 * time.Second, ops: []op{{kind: "renew", name: "r1", ttl: time.Minute, wantExpires: 90 * time.Second}}, live: 1},
				{at: 80 * time.Second, ops: []op{reserve("r2", 60, time.Minute).refused(errExceeded)}, windows: []window{{"tok", 0, 50}}, live: 1},
				{at: 2 * time.Minute, ops: []op{{kind: "renew", name: "r1", ttl: time.Minute, want: budget.ErrLeaseLost}, reserve("r3", 100, time.Minute)},
					windows: []window{{"tok", 0, 100}}, states: map[string]budget.ReservationState{"r1": live, "r3": live}, live: 2},
			},
		},
		{
			name:   "a commit after expiry still records and reports Expired",
			limits: []limitDef{tok100, req10},
			steps: []step{
				{ops: []op{reserve("r1", 50, time.Minute)}, live: 1},
				{at: 2 * time.Minute, windows: []window{{"tok", 0, 0}}, live: 1},
				{at: 2 * time.Minute, ops: []op{withSettled(commit("r1", 30, 0), budget.Settlement{Expired: true})},
					windows: []window{{"tok", 30, 0}, {"req", 1, 0}}, states: map[string]budget.ReservationState{"r1": committed}, live: 0},
			},
		},
		{
			name:   "a commit after recovery released it in the same batch still records",
			limits: []limitDef{tok100, req10},
			steps: []step{
				{ops: []op{reserve("r1", 50, time.Minute)}, live: 1},
				{at: 2 * time.Minute, ops: []op{recoverAt(2*time.Minute, budget.RecoverResult{ReleasedReservations: 1}),
					withSettled(commit("r1", 30, 0), budget.Settlement{Expired: true})},
					windows: []window{{"tok", 30, 0}, {"req", 1, 0}}, states: map[string]budget.ReservationState{"r1": committed}, live: 0},
			},
		},
		{
			name:   "recovery charges an ExpireCharge reservation its estimate once",
			limits: []limitDef{tok100, req10},
			steps: []step{
				{ops: []op{charge(reserve("r1", 50, time.Minute))}, live: 1},
				// Past its expiry, unrecovered: the hold still counts.
				{at: 2 * time.Minute, windows: []window{{"tok", 0, 50}}, live: 1},
				{at: 2 * time.Minute, ops: []op{recoverAt(2*time.Minute, budget.RecoverResult{ReleasedReservations: 1, ChargedReservations: 1}),
					recoverAt(2*time.Minute, budget.RecoverResult{})},
					windows: []window{{"tok", 50, 0}, {"req", 1, 0}}, states: map[string]budget.ReservationState{"r1": expired}, live: 0},
				{at: 3 * time.Minute, ops: []op{recoverAt(3*time.Minute, budget.RecoverResult{})},
					windows: []window{{"tok", 50, 0}, {"req", 1, 0}}, states: map[string]budget.ReservationState{"r1": expired}, live: 0},
			},
		},
		{
			name:   "a late commit after the charge records only the excess as id:late",
			limits: []limitDef{tok100},
			steps: []step{
				{ops: []op{charge(reserve("r1", 50, time.Minute)), charge(reserve("r2", 30, time.Minute))}, live: 2},
				{at: 2 * time.Minute, ops: []op{recoverAt(2*time.Minute, budget.RecoverResult{ReleasedReservations: 2, ChargedReservations: 2}),
					withSettled(commit("r1", 60, 5), budget.Settlement{Expired: true, Charged: true, LateRequestID: ":late"}),
					withSettled(commit("r2", 10, 5), budget.Settlement{Expired: true, Charged: true})},
					windows: []window{{"tok", 50 + 30 + 15, 0}}, states: map[string]budget.ReservationState{"r1": committed, "r2": committed}, live: 0},
				{at: 3 * time.Minute, ops: []op{commit("r1", 100, 0).refused(budget.ErrSettled)}, windows: []window{{"tok", 95, 0}}},
			},
		},
		{
			// The charge counted the request; its late excess is more tokens
			// of the same request, not another one.
			name:   "a late excess counts no second request",
			limits: []limitDef{tok100, req10},
			steps: []step{
				{ops: []op{charge(reserve("r1", 50, time.Minute))}, live: 1},
				{at: 2 * time.Minute, ops: []op{recoverAt(2*time.Minute, budget.RecoverResult{ReleasedReservations: 1, ChargedReservations: 1}),
					withSettled(commit("r1", 60, 0), budget.Settlement{Expired: true, Charged: true, LateRequestID: ":late"})},
					windows: []window{{"tok", 60, 0}, {"req", 1, 0}}, states: map[string]budget.ReservationState{"r1": committed}, live: 0},
			},
		},
		{
			name:   "a commit before recovery in the batch settles it; nothing is charged",
			limits: []limitDef{tok100, req10},
			steps: []step{
				{ops: []op{charge(reserve("r1", 50, time.Minute))}, live: 1},
				{at: 2 * time.Minute, ops: []op{withSettled(commit("r1", 20, 0), budget.Settlement{Expired: true}),
					recoverAt(2*time.Minute, budget.RecoverResult{})},
					windows: []window{{"tok", 20, 0}, {"req", 1, 0}}, states: map[string]budget.ReservationState{"r1": committed}, live: 0},
			},
		},
		{
			name:   "recovery frees an expired reservation's lease",
			limits: []limitDef{tok100, conc1},
			steps: []step{
				{ops: []op{reserve("r1", 10, time.Minute)}, windows: []window{{"tok", 0, 10}, {"conc", 0, 1}}, live: 1},
				{at: 2 * time.Minute, ops: []op{recoverAt(2*time.Minute, budget.RecoverResult{ReleasedReservations: 1, ReleasedLeases: 1}),
					reserve("r2", 100, time.Minute)},
					windows: []window{{"tok", 0, 100}, {"conc", 0, 1}}, states: map[string]budget.ReservationState{"r1": expired, "r2": live}, live: 1},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.bug != "" && !*runBugs {
				t.Skip("BUG: " + tc.bug + " (run with -bugs)")
			}
			h := newHarness(t, 3)
			for _, l := range tc.limits {
				h.limit(l.id, l.m, l.max)
			}
			if len(tc.prior) > 0 {
				if _, err := h.tr.RecordSync(ctx, tc.prior...); err != nil {
					t.Fatalf("RecordSync(prior): %v", err)
				}
			}
			for si, st := range tc.steps {
				h.clock.Set(bt0.Add(st.at))
				var res []result
				if len(st.ops) > 0 {
					res = h.batch(st.ops)
				}
				for i, o := range st.ops {
					h.check(i, o, res[i])
				}
				for _, w := range st.windows {
					if got := h.stored(w.limit, bt0.Add(st.at)); got != w {
						t.Errorf("step %d: stored window %s = used %d reserved %d; want %d, %d", si, w.limit, got.used, got.reserved, w.used, w.reserved)
					}
				}
				names := make([]string, 0, len(st.states))
				for n := range st.states {
					names = append(names, n)
				}
				got, live := h.states(names)
				for n, want := range st.states {
					if got[n] != want {
						t.Errorf("step %d: reservation %s is %q in the store; want %q", si, n, got[n], want)
					}
				}
				if live != st.live {
					t.Errorf("step %d: %d live reservations in the store; want %d", si, live, st.live)
				}
				if t.Failed() {
					t.FailNow()
				}
			}
		})
	}
}

func withDup(o op) op { o.dup = true; return o }

func withSettled(o op, s budget.Settlement) op { o.settled = s; return o }
