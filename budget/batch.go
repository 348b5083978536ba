package budget

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/cache"
)

// The writer's memory and one batch's plan.
//
// A batch is one write transaction. It runs in three steps:
//
//  1. load: confirm (Tx.Mark) that the memory the writer kept from its
//     last commit is still the store's state, or forget it; then read what
//     the batch's operations need and the memory lacks (reservations by id,
//     limit definitions, counter windows, parked providers, prices), taking
//     the store's locks first, one statement per kind of row;
//  2. decide: run every operation in queue order against the memory alone,
//     each one's effects visible to the next, collecting one WriteSet (a
//     refused or failed operation adds nothing to it);
//  3. write: Tx.Apply(WriteSet), then COMMIT.
//
// On SQLite, where one writer holds the file's lock and Mark tells whether
// any other connection wrote since, a steady stream of reservations and
// commits loads nothing: a batch costs BEGIN, Mark, a few multi-row writes
// and COMMIT. On PostgreSQL every batch loads, under its locks, in a few
// round trips however many operations it holds.
//
// If any step fails the transaction rolls back, the memory is forgotten
// (decide changed it) and the batch is planned again from a fresh load.
//
// Each operation kind says what it locks and reads beside how it decides
// (the table above reservationsOf). The writer's path, by name: writeLoop gathers a
// batch, process retries it until it lands, try is one attempt (these
// three steps), publish moves what landed into the cache and answers the
// callers; planSettle is a commit's, release's or recovery's end of a
// reservation inside the plan.

// memWindow is one counter window as the writer knows it. It is kept
// small: the writer may know hundreds of thousands.
type memWindow struct {
	l          *Limit
	start, end int64 // Unix nanos; 0 for leases
	used       int64
	prev       int64 // only when !stored: the window before's usage when read
	holds      []memHold
	cw         int32 // this batch's index in WriteSet.Counters, or -1
	base       int64 // used when this batch first touched it (alerts compare)
	stored     bool
	// hot: a reservation decided on it, so it stays in memory between
	// batches; other windows are forgotten after their batch, their rows'
	// existence kept in memory.stored.
	hot bool
	// known: used (and holds) are known; a window found in memory.stored
	// only is known to have a row, not what it holds, and takes events only.
	known bool
	// ended: a backfill's window that ended before its batch, not read:
	// its row gains the batch's events if it exists, and none is created
	// (Config.Backfill).
	ended bool
}

// memHold is a hold as a window keeps it.
type memHold struct {
	id      string
	amount  int64
	expires int64 // Unix nanos; math.MaxInt64 for Forever
}

// newMemWindow is a known window as the store read it.
func newMemWindow(r WindowRef, ws WindowState) *memWindow {
	w := &memWindow{l: r.Limit, start: nsOf(r.Start), end: nsOf(r.End), used: ws.Used, prev: ws.PrevUsed,
		stored: ws.Stored, known: true, cw: -1}
	if len(ws.Holds) > 0 {
		w.holds = make([]memHold, len(ws.Holds))
		for i, h := range ws.Holds {
			w.holds[i] = memHold{id: h.ReservationID, amount: h.Amount, expires: h.ExpiresAt.UnixNano()}
		}
	}
	return w
}

func (w *memWindow) ref() WindowRef {
	r := WindowRef{Limit: w.l}
	if w.l.Metric == MetricConcurrent {
		return r
	}
	r.Start, r.End = time.Unix(0, w.start).UTC(), time.Unix(0, w.end).UTC()
	r.PrevStart, r.PrevEnd = prevBounds(w.l.Window, r.Start)
	return r
}

// memory is what the writer knows of the store, valid while valid is set
// and each transaction starts at expect.
type memory struct {
	valid   bool
	expect  Mark
	windows map[cache.Key]*memWindow
	res     map[string]*ReservationRow // reservations known live or expired unrecovered
	parked  map[string]*ProviderState  // every parked provider, when parkedOK
	parkOK  bool
	// latest is the newest window start (Unix nanos) each (limit,
	// subject) has a row for, as far as the windows loaded and created
	// tell, by a hash of the pair (a collision could only misplace a
	// rollover's log line, never a count). Only created windows read it,
	// and a window is created in the batch that loaded it unless hot: so
	// it holds the pairs of the windows in memory, and of hotPairs.
	latest   map[uint64]int64
	hotPairs map[uint64]struct{} // the pairs of hot windows
	// epoch marks the counters (cache.Counter.MarkRow) whose windows are
	// known to have a counter row and are not in windows; stored holds
	// a hash of those whose counter is not cached. A collision would make
	// a missing row look stored: Apply then fails with ErrConflict and the
	// batch is planned again from a fresh load, so it costs a retry, never
	// a wrong count. Both are bounded by the counter cache's size.
	epoch  uint32
	stored map[uint64]struct{}
}

var storedSeed = maphash.MakeSeed()

func storedHash(k cache.Key) uint64 { return maphash.Comparable(storedSeed, k) }

// noteLatest records that l's counter for its subject has a row starting
// at start.
func (m *memory) noteLatest(l *Limit, start int64) {
	k := latestHash(l)
	if cur, ok := m.latest[k]; !ok || start > cur {
		m.latest[k] = start
	}
}

func latestHash(l *Limit) uint64 {
	return maphash.Comparable(storedSeed, [2]string{l.ID, l.Subject})
}

// maxMemWindows bounds the writer's window memory: past it, it is forgotten
// and reloaded as batches need it.
const maxMemWindows = 200_000

func (m *memory) forget() {
	m.valid = false
	if m.windows == nil || len(m.windows) > maxMemWindows {
		m.windows = make(map[cache.Key]*memWindow)
	} else {
		clear(m.windows)
	}
	if m.res == nil {
		m.res = make(map[string]*ReservationRow)
	} else {
		clear(m.res)
	}
	m.parked, m.parkOK = nil, false
	m.latest = make(map[uint64]int64)
	m.hotPairs = make(map[uint64]struct{})
	m.stored = make(map[uint64]struct{})
	if m.epoch++; m.epoch == 0 {
		m.epoch = 1
	}
}

func windowKey(l *Limit, start time.Time) cache.Key {
	return cache.Key{LimitID: l.ID, Subject: l.Subject, Start: nsOf(start)}
}

// windowKey is the window h holds on.
func (h *Hold) windowKey() cache.Key {
	return cache.Key{LimitID: h.LimitID, Subject: h.Subject, Start: nsOf(h.WindowStart)}
}

// ref is limit l's window holding at (its leases for a concurrent limit).
func refAt(l *Limit, at time.Time) WindowRef {
	if l.Metric == MetricConcurrent {
		return WindowRef{Limit: l}
	}
	start, end := l.Window.Bounds(at)
	ps, pe := prevBounds(l.Window, start)
	return WindowRef{Limit: l, Start: start, End: end, PrevStart: ps, PrevEnd: pe}
}

// boundsMemo is one window's bounds, and the window's before it, as a
// batch last computed them: a batch's events mostly fall in the same few
// windows of the same few definitions, whose bounds cost calendar
// arithmetic (and a zone's rules) each time.
type boundsMemo struct {
	w                              Window
	start, end, prevStart, prevEnd time.Time
}

// maxBoundsMemo bounds a batch's memo: more definitions than this each
// compute their bounds as refAt does.
const maxBoundsMemo = 8

// refAt is refAt(l, at) through the batch's memo.
func (b *batch) refAt(l *Limit, at time.Time) WindowRef {
	if l.Metric == MetricConcurrent {
		return WindowRef{Limit: l}
	}
	for i := range b.bounds {
		if m := &b.bounds[i]; m.w == l.Window && !at.Before(m.start) && at.Before(m.end) {
			return WindowRef{Limit: l, Start: m.start, End: m.end, PrevStart: m.prevStart, PrevEnd: m.prevEnd}
		}
	}
	r := refAt(l, at)
	m := boundsMemo{l.Window, r.Start, r.End, r.PrevStart, r.PrevEnd}
	if len(b.bounds) < maxBoundsMemo {
		b.bounds = append(b.bounds, m)
	} else {
		b.bounds[b.nextBound] = m
		b.nextBound = (b.nextBound + 1) % maxBoundsMemo
	}
	return r
}

// prevBounds is the window before the one starting at start; none (zero)
// for a Once window, whose creation is no rollover.
func prevBounds(w Window, start time.Time) (time.Time, time.Time) {
	if !w.Resets() {
		return time.Time{}, time.Time{}
	}
	return w.Bounds(start.Add(-1))
}

// who is whom r is charged to.
func (r *ReservationRow) who() Who {
	return Who{Key: r.Key, Team: r.Team, Org: r.Org, User: r.User, Tags: r.Tags}
}

func (w *memWindow) dropHold(id string) {
	w.holds = slices.DeleteFunc(w.holds, func(h memHold) bool { return h.id == id })
}

// batch is one transaction's plan.
type batch struct {
	t *Tracker
	// plain plans every event's windows, skipping none that an earlier
	// event of its key added (needWindow): set after a try found a window
	// unloaded at decide (an internal error, typically a wrong skip), so
	// that such a bug costs one failed try, not a writer that retries the
	// same plan forever while every event after it waits.
	plain   bool
	ops     []*op
	now     time.Time
	ws      WriteSet
	missing map[string]bool // reservation ids the store does not have
	prices  *Prices         // loaded when an event or a usd limit needs it
	// windows touched, in WriteSet.Counters order
	touched []*memWindow
	// expired reservations found by recovery ops, by op
	expired map[*op][]string
	evOps   []*op // the operation of each WriteSet event

	// dups are the commit and charge events an earlier try of this batch
	// found already in the history (key, NUL, request id): planned again
	// without them. The writer keeps the map across tries.
	dups map[string]bool
	// windows loaded or recalled into memory for this batch: those not hot
	// leave it once the batch lands (by their keys: a window read over an
	// unknown one of this batch replaces it)
	visited []*memWindow
	// filled by write
	inserted []bool
	// again marks events the store had from prev, this batch's own try
	// whose outcome was unknown (see prevEvents)
	again []bool

	// prev is the writer's last try of these operations when it failed
	// after its writes were sent (its COMMIT's outcome unknown); ran: this
	// try's writes were all sent; probed: prev was found not to have landed;
	// prevLanded: it was found to have landed (see landedIn).
	prev                    *batch
	ran, probed, prevLanded bool

	// leases: what this try does to each lease it touches (lease_batch.go),
	// in the order first touched; newLeases are those it creates, by route;
	// looked: it looks after every lease (closing: to give them all back).
	leases          map[*lease]*leasePlan
	leaseOrder      []*lease
	newLeases       map[routeKey]*lease
	looked, closing bool
	// journals are the events of the lease rows recovery settles, read
	// from their journals; recoveredLeases those rows, whose journals go
	// once the batch lands.
	journals map[string][]Usage
	jfiles   []*journalFile // generations read, parsed once
	reserves int8           // contended's answer: 0 not known, -1 no, 1 yes
	// stale are the lease names a Recover found in the journal directory
	// (journal_stale.go), staleLate the late events their journals add.
	stale           map[*op][]string
	staleLate       map[string][]Usage
	recoveredLeases []string
	// noJournal are the lease rows whose journal is not in this process's
	// directory, unjournaled those of them this try charged whole.
	noJournal   map[string]bool
	unjournaled []string
	// linked are the journal names of the leases this try creates, made
	// before its writes (linkLease).
	linked []string
	maint  []*lease // the leases this look attends to

	// bounds memoises the windows' bounds (refAt), nextBound the entry
	// replaced next once it is full.
	bounds    []boundsMemo
	nextBound int

	// keys are this try's plans by key (keyplan.go); adds backs the
	// events' WriteSet adds, so an event's few adds cost no allocation.
	keys map[string]*keyPlan
	adds []CounterAdd
	// needEach is, for the plans with a limit with a counter per user or
	// tag value (Each), whose counter their needSpan is (noteEach).
	needEach map[*keyPlan][]string
	// counters is how many counters load found the events count in (see
	// needs.windows).
	counters int
}

// numEvents is how many events o records (Record's one, RecordSync's
// several), event(i) its i-th, in place: no slice is built for a Record.
func (o *op) numEvents() int {
	if o.evs != nil {
		return len(o.evs)
	}
	return 1
}

func (o *op) event(i int) *Usage {
	if o.evs != nil {
		return &o.evs[i]
	}
	return &o.ev
}

// active reports whether the batch plans o: not when its caller withdrew
// it, or was already told it failed (unless it is a kept settlement), and
// not a flush, which plans nothing.
func (o *op) active() bool { return !o.skip && o.kind != opFlush }

// load is step 1: the memory checked against the store, then what the
// active operations must lock and read, each kind saying its own (see
// need), read in a few statements: the reservations locked and read, then
// the limits locked and their windows read, with providers and prices when
// a kind needs them.
func (b *batch) load(ctx context.Context, tx Tx) error {
	b.keys, b.needEach = nil, nil // a try's plans are its own: the memory may have been forgotten
	if err := b.recall(ctx, tx); err != nil {
		return err
	}
	b.looked = b.maintained()
	if err := b.loadReservations(ctx, tx); err != nil {
		return err
	}
	n := needs{refs: make(map[cache.Key]want), limits: make(map[string]bool)}
	for _, o := range b.ops {
		if !o.active() {
			continue
		}
		if err := b.need(ctx, tx, o, &n); err != nil {
			return err
		}
	}
	if b.looked {
		if err := b.needMaintain(ctx, tx, &n); err != nil {
			return err
		}
	}
	b.counters = n.windows
	return b.loadNeeds(ctx, tx, &n)
}

// recall keeps the memory the writer kept from its last commit if the
// store's state is still the one it knew (Tx.Mark), or forgets it, with
// the limits and prices if their versions moved.
func (b *batch) recall(ctx context.Context, tx Tx) error {
	t, m := b.t, &b.t.w.mem
	mark, err := tx.Mark(ctx)
	if err != nil {
		return err
	}
	if !m.valid || mark != m.expect || len(m.windows) > maxMemWindows {
		m.forget()
		// Both versions in one read: what limits and prices the writer
		// holds stays valid only if they did not move.
		// (Otherwise nothing else wrote since this writer's last commit:
		// the limits and prices it read then are current.)
		lv, pv, err := tx.Versions(ctx)
		if err != nil {
			return err
		}
		if lv != t.w.version {
			if t.w.version >= 0 {
				t.retireLeases() // decided on limits that may have changed
			}
			t.w.forgetLimits()
			t.w.version = lv
			// A prune moves the limits version too.
			h, err := prunedBefore(ctx, tx)
			if err != nil {
				return err
			}
			t.horizon.Store(nsOf(h))
		}
		if t.w.prices != nil && t.w.prices.version != pv {
			t.w.prices = nil
		}
	}
	if len(t.w.byWho) > maxWriterKeys || len(t.w.placement) > maxWriterKeys {
		t.w.forgetLimits()
	}
	m.valid, m.expect = true, mark
	return nil
}

// loadReservations locks the reservations the operations settle or renew
// (see reservationsOf), then reads those the memory lacks; the ids
// the store does not have go to b.missing.
func (b *batch) loadReservations(ctx context.Context, tx Tx) error {
	m := &b.t.w.mem
	var ids []string
	for _, o := range b.ops {
		if !o.active() {
			continue
		}
		var err error
		if ids, err = b.reservationsOf(ctx, tx, o, ids); err != nil {
			return err
		}
	}
	if b.looked {
		ids = b.maintainIDs(ids)
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if err := tx.LockReservations(ctx, ids); err != nil {
		return err
	}
	var need []string
	for _, id := range ids {
		if _, ok := m.res[id]; !ok {
			need = append(need, id)
		}
	}
	if len(need) == 0 {
		return nil
	}
	rows, err := tx.Reservations(ctx, need)
	if err != nil {
		return err
	}
	for i := range rows {
		r := rows[i]
		m.res[r.ID] = &r
	}
	for _, id := range need {
		if _, ok := m.res[id]; !ok {
			if b.missing == nil {
				b.missing = make(map[string]bool)
			}
			b.missing[id] = true
		}
	}
	return nil
}

// needs is what the operations of a batch must lock and read once their
// reservations are known.
type needs struct {
	refs   map[cache.Key]want // the windows to read or to decide on, each once
	limits map[string]bool    // the limits to lock
	prices bool
	// windows counts the windows events were found to count in (one a
	// limit and key, as a rule): as many as the counters decide writes or
	// more, by which it sizes them (appended one by one, they were copied
	// five times over as the slice grew).
	windows int
}

// want is one window a batch reads.
type want struct {
	ref     WindowRef
	reserve bool // a reservation decides on it: it must be known
}

// needEvent adds the windows an event of who's (placed, see eventWho)
// counts in, and their limits.
func (b *batch) needEvent(ctx context.Context, tx Tx, n *needs, who *Who, provider, model string, at time.Time) error {
	p, err := b.keyPlan(ctx, tx, who, true)
	if err != nil {
		return err
	}
	return b.needEventOf(ctx, tx, n, p, who, provider, model, at)
}

// needEventOf is needEvent through who's key's plan p (nil: none).
func (b *batch) needEventOf(ctx context.Context, tx Tx, n *needs, p *keyPlan, who *Who, provider, model string, at time.Time) error {
	ls, err := b.limits(ctx, tx, p, who)
	if err != nil {
		return err
	}
	n.prices = true
	model = NormalizeModel(model)
	for j := range ls {
		if l := &ls[j]; l.countsEvent(who, provider, model, at) {
			b.needWindow(n, p, j, l, who, at)
		}
	}
	return nil
}

// needHolds adds the limits r holds on: settling or renewing r changes
// their holds.
func (n *needs) needHolds(r *ReservationRow) {
	for _, h := range r.Holds {
		n.limits[h.LimitID] = true
	}
}

// loadNeeds locks n's limits, in one order, then reads the windows the
// memory lacks, and the prices if an operation needs them.
func (b *batch) loadNeeds(ctx context.Context, tx Tx, n *needs) error {
	t, m := b.t, &b.t.w.mem
	if len(n.limits) > 0 {
		ids := make([]string, 0, len(n.limits))
		for id := range n.limits {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		if err := tx.LockLimits(ctx, ids); err != nil {
			return err
		}
	}
	var need []WindowRef
	var keys []cache.Key
	for k, r := range n.refs {
		// A window that only takes events is here only if recallWindow
		// found it unrecallable when it was added, and nothing marks a
		// row stored between then and now: no second look.
		if w := m.windows[k]; w != nil && (w.known || !r.reserve) {
			w.hot = w.hot || r.reserve
			continue
		}
		ref := r.ref
		ref.NoSeed = !r.reserve // events only add to the row: its total is not needed
		need = append(need, ref)
		keys = append(keys, k)
	}
	if len(need) > 0 {
		// Every hold, expired or not: a window stays in memory across
		// batches, and each decision counts the holds live at its own
		// instant (an expired one lasts only until recovery settles it).
		got, err := tx.Windows(ctx, need, time.Unix(0, 0))
		if err != nil {
			return err
		}
		for i, ws := range got {
			r := need[i]
			w := newMemWindow(r, ws)
			w.hot = n.refs[keys[i]].reserve
			w.known = !r.NoSeed || ws.Stored
			m.windows[keys[i]] = w
			b.visit(w)
			if r.Limit.Metric == MetricConcurrent {
				continue
			}
			if ws.Stored {
				m.noteLatest(r.Limit, nsOf(r.Start))
			} else if !ws.Latest.IsZero() {
				m.noteLatest(r.Limit, nsOf(ws.Latest))
			}
		}
	}
	if n.prices {
		var err error
		if b.prices, err = t.writerPrices(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

// visit notes that window w was put in memory for this batch. The slice
// starts at the size the last batch's grew to: appended one by one from
// nothing, a batch of 8,192 keys' windows copied them five times over. It
// holds the windows, not their keys (8 bytes each, not 40).
func (b *batch) visit(w *memWindow) {
	if b.visited == nil {
		b.visited = make([]*memWindow, 0, max(b.t.w.visited, 16))
	}
	b.visited = append(b.visited, w)
}

// key is w's key in memory.windows (windowKey of its limit and start; a
// lease's window starts at 0).
func (w *memWindow) key() cache.Key {
	return cache.Key{LimitID: w.l.ID, Subject: w.l.Subject, Start: w.start}
}

// recallWindow reports whether window k (of ref r), which only takes
// events, needs no read: the memory holds it, or knows its row exists, or
// the window ended and gets no row if it has none (backfilled). Events only
// add to such a window: it is put in memory, unknown, if it was not.
func (b *batch) recallWindow(k cache.Key, r WindowRef) bool {
	m := &b.t.w.mem
	if m.windows[k] != nil {
		return true
	}
	stored := b.t.rowStored(k)
	if !stored && !b.backfilled(r) {
		return false
	}
	w := newMemWindow(r, WindowState{Stored: stored})
	w.known, w.ended = false, !stored
	m.windows[k] = w
	b.visit(w)
	return true
}

// backfilled reports whether a backfill (Config.Backfill) leaves the row of
// window r uncreated: the window ended before this batch, so no decision
// will be made on it and its total is the history's. Section 8 logs a
// rollover when a write creates a window's row: such a window logs none.
// A window that never ends (Once) is no such window.
func (b *batch) backfilled(r WindowRef) bool {
	return b.t.cfg.Backfill && r.Limit.Window.Resets() && !r.End.After(b.now)
}

// size counts what w writes, to tell whether an operation planned anything.
func (w *WriteSet) size() int {
	return len(w.Events) + len(w.NewReservations) + len(w.Settles) + len(w.Renewals)
}

// maxRecover bounds the reservations one recovery operation settles.
const maxRecover = 2000

// window is the loaded window of l at at.
func (b *batch) window(l *Limit, at time.Time) *memWindow {
	if l.Metric == MetricConcurrent {
		return b.t.w.mem.windows[windowKey(l, time.Time{})]
	}
	return b.t.w.mem.windows[windowKey(l, b.refAt(l, at).Start)]
}

// decide is step 2: every active operation, in queue order, against the
// memory alone, by its kind (see decideOp).
func (b *batch) decide(ctx context.Context, tx Tx) error {
	b.sizeEvents()
	for _, o := range b.ops {
		if !o.active() {
			continue
		}
		if o.out != nil {
			*o.out = opResult{}
		}
		mark := b.ws.size()
		if err := b.decideOp(ctx, tx, o); err != nil {
			// A refusal or a bad request is the caller's answer, and what
			// the operation planned before it is dropped with it; usage is
			// never refused, so its errors fail the batch.
			if isDomainError(err) && o.kind != opUsage && b.ws.size() == mark {
				o.out.err = err
				continue
			}
			// Anything else, or a refusal after the operation planned a
			// write (memory cannot take it back), fails the batch.
			return err
		}
	}
	if b.looked {
		if err := b.decideMaintain(ctx, tx); err != nil {
			return err
		}
	}
	b.writeLeases()
	b.ws.Retry = b.prev != nil
	return nil
}

// sizeEvents allocates the write set's events, their operations and their
// adds for about the events the batch holds, once, where appending them
// one by one copied every event's write a few times over.
func (b *batch) sizeEvents() {
	n := 0
	for _, o := range b.ops {
		switch {
		case !o.active():
		case o.kind == opUsage:
			n += o.numEvents()
		case o.kind == opCommit || o.kind == opLeaseCommit:
			n++ // a recovery's charges, rarer, are appended
		}
	}
	b.ws.Events = make([]EventWrite, 0, n)
	b.evOps = make([]*op, 0, n)
	b.adds = make([]CounterAdd, 0, 3*n)
	b.ws.Counters = make([]CounterWrite, 0, b.counters)
	b.touched = make([]*memWindow, 0, b.counters)
}

// Each kind of operation, its steps side by side: what it locks and reads
// (step 1) beside how it decides (step 2). Below, each kind's functions
// follow one another in this order:
//
//	kind     reservations (locked, then read)  need (limits locked, windows read)  decide
//	usage    -                                 needUsage                           decideUsage
//	reserve  -                                 needReserve                         decideReserve
//	commit   its id                            needCommit                          decideCommit
//	release  its id                            needSettled                         decideRelease
//	renew    its id                            needSettled                         decideRenew
//	recover  expiredOf                         needRecover                         decideRecover
//
// A flush plans nothing (it is never active). The dispatch is a switch,
// not a table of funcs, so that what step 1 gathers stays on the stack.

// reservationsOf appends to ids the reservations o settles or renews; the
// batch locks them all, then reads those the memory lacks.
func (b *batch) reservationsOf(ctx context.Context, tx Tx, o *op, ids []string) ([]string, error) {
	switch o.kind {
	case opCommit, opRelease, opRenew:
		return append(ids, o.id), nil
	case opRecover:
		return b.expiredOf(ctx, tx, o, ids)
	case opReserve:
		return leaseIDs(ids, b.leaseFor(o)), nil
	case opLeaseCommit:
		if o.leased != nil {
			return leaseIDs(ids, o.leased.lease), nil
		}
	}
	return ids, nil
}

// need adds to n the limits o locks and the windows it reads, its
// reservations known.
func (b *batch) need(ctx context.Context, tx Tx, o *op, n *needs) error {
	switch o.kind {
	case opUsage:
		return b.needUsage(ctx, tx, o, n)
	case opReserve:
		needLease(b.leaseFor(o), n)
		return b.needReserve(ctx, tx, o, n)
	case opCommit:
		return b.needCommit(ctx, tx, o, n)
	case opLeaseCommit:
		return b.needLeaseCommit(ctx, tx, o, n)
	case opRelease, opRenew:
		return b.needSettled(o, n)
	case opRecover:
		return b.needRecover(ctx, tx, o, n)
	}
	return nil
}

// decideOp plans o against the memory alone: its writes go to b.ws, its
// answer to o.out; an error it returns is the caller's answer if it is a
// refusal and o planned nothing, else it fails the batch (see decide).
func (b *batch) decideOp(ctx context.Context, tx Tx, o *op) error {
	switch o.kind {
	case opUsage:
		return b.decideUsage(ctx, tx, o)
	case opReserve:
		return b.decideReserve(ctx, tx, o)
	case opCommit:
		return b.decideCommit(ctx, tx, o)
	case opRelease:
		return b.decideRelease(o)
	case opRenew:
		return b.decideRenew(o)
	case opRecover:
		return b.decideRecover(ctx, tx, o)
	case opLeaseCommit:
		return b.decideLeaseCommit(ctx, tx, o)
	}
	return nil
}

// The limit filters every path shares (the writer's load and decisions,
// Record's cache overlay, Check).

// countsEvent reports whether an event of who's on provider and model
// (normalised) at at counts in l: every limit that applies and covers at
// but a concurrent one, enabled or not (a disabled limit's counters keep
// counting; only enforcement stops).
func (l *Limit) countsEvent(who *Who, provider, model string, at time.Time) bool {
	return l.Metric != MetricConcurrent && l.Applies(who, provider, model) && l.Covers(at)
}

// decidesRequest reports whether a request of who's on provider and model
// (normalised) at at is decided on l: an enabled limit that applies and
// covers at.
func (l *Limit) decidesRequest(who *Who, provider, model string, at time.Time) bool {
	return l.Enabled && l.Applies(who, provider, model) && l.Covers(at)
}

// Usage (Record, RecordSync).

// needUsage places each event, then needs the windows it counts in.
func (b *batch) needUsage(ctx context.Context, tx Tx, o *op, n *needs) error {
	for i := range o.numEvents() {
		ev := o.event(i)
		who := ev.Who()
		p, err := b.keyPlan(ctx, tx, &who, ev.Placed)
		if err != nil {
			return err
		}
		if err := b.needEventOf(ctx, tx, n, p, &who, ev.Provider, ev.Model, ev.At); err != nil {
			return err
		}
	}
	return nil
}

// decideUsage plans o's events; usage is never refused, but a
// RecordSync's caller hears of a prune that raced it.
func (b *batch) decideUsage(ctx context.Context, tx Tx, o *op) error {
	if o.evs != nil {
		if h := b.t.horizon.Load(); h != 0 {
			for i := range o.evs {
				if o.evs[i].At.UnixNano() < h {
					o.out.err = horizonError(&o.evs[i], h)
					return nil
				}
			}
		}
	}
	for i := range o.numEvents() {
		ev := *o.event(i)
		who := ev.Who()
		p, err := b.keyPlan(ctx, tx, &who, ev.Placed)
		if err != nil {
			return err
		}
		ev.Team, ev.Org = who.Team, who.Org
		if err := b.eventOf(ctx, tx, ev, o, p); err != nil {
			return err
		}
	}
	return nil
}

// event plans one event: priced, appended, and added to every limit
// window it counts in. Its team and organisation are final (placed, or
// the reservation's). Usage, commits and charges all record through it.
func (b *batch) event(ctx context.Context, tx Tx, ev Usage, o *op) error {
	who := ev.Who()
	p, err := b.keyPlan(ctx, tx, &who, true)
	if err != nil {
		return err
	}
	return b.eventOf(ctx, tx, ev, o, p)
}

// eventOf is event through ev's key's plan p (nil: none).
func (b *batch) eventOf(ctx context.Context, tx Tx, ev Usage, o *op, p *keyPlan) error {
	who := ev.Who()
	ls, err := b.limits(ctx, tx, p, &who)
	if err != nil {
		return err
	}
	model := NormalizeModel(ev.Model)
	noPrice := false
	switch p := b.prices.For(ev.Provider, model, ev.ServiceTier, ev.Input, ev.At); {
	case ev.CostKnown: // priced, or found unpriceable, when it was first written
		noPrice = ev.NoPrice
	case p != nil:
		ev.Cost = p.Cost(&ev)
	default:
		noPrice, ev.Cost = true, 0
	}
	ev.Unpriced = false
	if noPrice {
		for j := range ls {
			if ls[j].Metric == MetricUSD && ls[j].countsEvent(&who, ev.Provider, model, ev.At) {
				ev.Unpriced = true
				break
			}
		}
	}
	first := len(b.adds)
	for j := range ls {
		l := &ls[j]
		if !l.countsEvent(&who, ev.Provider, model, ev.At) {
			continue
		}
		l, w := b.countedWindow(p, j, l, &who, ev.At)
		if w == nil {
			return errNotLoaded(l, ev.At)
		}
		if w.cw < 0 {
			w.base = w.used
			w.cw = int32(len(b.ws.Counters))
			create := !w.stored && !w.ended
			b.ws.Counters = append(b.ws.Counters, CounterWrite{Ref: w.ref(), Create: create, IfStored: w.ended})
			b.touched = append(b.touched, w)
			if create {
				b.created(w)
			}
		}
		amt := ev.Amount(l.Metric)
		// Counters saturate at MaxTokens, past any limit, rather than
		// overflow (contract section 1: sums are checked).
		w.used = min(w.used+amt, MaxTokens)
		b.adds = append(b.adds, CounterAdd{Counter: int(w.cw), Amount: amt})
	}
	var adds []CounterAdd
	if len(b.adds) > first {
		adds = b.adds[first:len(b.adds):len(b.adds)] // its own: a later append reallocates, never overwrites
	}
	b.ws.Events = append(b.ws.Events, EventWrite{Usage: ev, Adds: adds, NoPrice: noPrice})
	b.evOps = append(b.evOps, o)
	return nil
}

// created plans w's new row and, when it is later than every row its limit
// has for the subject and the window before had usage, logs the rollover
// (contract section 8).
func (b *batch) created(w *memWindow) {
	m, l, r := &b.t.w.mem, w.l, w.ref()
	latest, has := m.latest[latestHash(l)]
	prev := w.prev
	// The window before may have changed since w was read, in this batch
	// even: known, its total; otherwise what this batch added to it (an
	// unknown window's used counts only that) on top of what w read.
	if pw := m.windows[windowKey(l, r.PrevStart)]; pw != nil && pw.known {
		prev = pw.used
	} else if pw != nil {
		prev = min(prev+pw.used, MaxTokens)
	}
	if (!has || w.start > latest) && prev > 0 {
		b.ws.Rollovers = append(b.ws.Rollovers, Rollover{LimitID: l.ID, Subject: l.Subject,
			PrevWindowStart: r.PrevStart, PrevUsed: prev, WindowStart: r.Start, LoggedAt: b.now})
	}
	m.noteLatest(l, w.start)
	w.stored = true
}

// stored reports whether an earlier try found ev in the history.
func (b *batch) stored(ev Usage) bool { return b.dups[ev.Key+"\x00"+ev.RequestID] }

func errNotLoaded(l *Limit, at time.Time) error {
	return &internalError{"window of limit " + l.ID + " at " + at.Format(time.RFC3339Nano) + " was not loaded"}
}

type internalError struct{ s string }

func (e *internalError) Error() string { return "budget: internal: " + e.s }

// Reserve.

// needReserve places the request, then needs every window it is decided
// on (known: a reservation decides on their totals), the prices if one is
// a usd limit's, and the parked providers if it names one.
func (b *batch) needReserve(ctx context.Context, tx Tx, o *op, n *needs) error {
	m := &b.t.w.mem
	who := Who{Key: o.req.Key, User: o.req.User, Tags: o.req.Tags}
	p, err := b.keyPlan(ctx, tx, &who, false)
	if err != nil {
		return err
	}
	ls, err := b.limits(ctx, tx, p, &who)
	if err != nil {
		return err
	}
	model := NormalizeModel(o.req.Model)
	for i := range ls {
		l := &ls[i]
		if !l.decidesRequest(&who, o.req.Provider, model, o.at) {
			continue
		}
		l = l.forWho(&who)
		n.limits[l.ID] = true
		r := b.refAt(l, o.at)
		n.refs[windowKey(l, r.Start)] = want{ref: r, reserve: true}
		n.prices = n.prices || l.Metric == MetricUSD
	}
	if o.req.Provider != "" && !m.parkOK {
		ps, err := parkedProviders(ctx, tx)
		if err != nil {
			return err
		}
		m.parked = make(map[string]*ProviderState, len(ps))
		for i := range ps {
			m.parked[ps[i].Provider] = &ps[i]
		}
		m.parkOK = true
	}
	return nil
}

// decideReserve plans one reservation: refused, or held on every limit it
// is decided on.
func (b *batch) decideReserve(ctx context.Context, tx Tx, o *op) error {
	m := &b.t.w.mem
	req, at := o.req, o.at
	if req.Provider != "" {
		if p := m.parked[req.Provider]; p != nil && p.Refusing(at) {
			o.out.err = &ParkedError{Provider: *p, RetryAfter: p.ResumeAt.Sub(at)}
			return nil
		}
	}
	// A lease on its route serves it from room this batch added, or gives
	// its free room back before the decision, so the decision sees it.
	lease := b.leaseFor(o)
	if lease != nil && b.carveInBatch(o, lease, at) {
		return nil
	}
	if lease != nil && b.leaseLive(lease) {
		b.takeFree(lease, b.plan(lease))
	} else {
		lease = nil
	}
	who := Who{Key: req.Key, User: req.User, Tags: req.Tags}
	p, err := b.keyPlan(ctx, tx, &who, false)
	if err != nil {
		return err
	}
	ls, err := b.limits(ctx, tx, p, &who)
	if err != nil {
		return err
	}
	model := NormalizeModel(req.Model)
	var wins []*memWindow
	var statuses []Status
	for i := range ls {
		l := &ls[i]
		if !l.decidesRequest(&who, req.Provider, model, at) {
			continue
		}
		l = l.forWho(&who)
		w := b.window(l, at)
		if w == nil || !w.known {
			return errNotLoaded(l, at)
		}
		wins = append(wins, w)
		statuses = append(statuses, w.status(at))
	}
	// The statuses and their windows in the contract's order.
	idx := make([]int, len(statuses))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, c int) int { return statuses[a].Limit.Compare(&statuses[c].Limit) })
	sorted := make([]Status, len(statuses))
	sw := make([]*memWindow, len(statuses))
	for i, j := range idx {
		sorted[i], sw[i] = statuses[j], wins[j]
	}
	statuses = sorted
	var price *Price
	if hasUSD(ls) {
		var ok bool
		if price, ok = priceEstimate(b.prices, statuses, &req, model, at); !ok {
			d := Decide(statuses, req.Estimate, at)
			d.Allowed, d.Unpriced = false, &Unpriced{Provider: req.Provider, Model: req.Model}
			o.out.err = &UnpricedError{Provider: req.Provider, Model: req.Model, Decision: d}
			return nil
		}
	}
	if d := Decide(statuses, req.Estimate, at); !d.Allowed {
		fit, ok := FitOutput(statuses, req.Estimate, o.minOut, price)
		if !ok {
			d.Price = price
			o.out.err = &ExceededError{Decision: d}
			o.out.exhausted = exhaustedOf(&d, req.Estimate, o.minOut, at)
			return nil
		}
		req.Estimate = fit
	} else if o.lease && leaseable(statuses) && b.grantLease(o, lease, statuses, &who, at) {
		return nil
	}
	if o.resID == "" {
		o.resID = newReservationID(at)
	}
	r := &Reservation{ID: o.resID, Key: req.Key, Team: who.Team, Org: who.Org, User: who.User, Tags: who.Tags, Provider: req.Provider, Model: req.Model,
		Estimate: req.Estimate, At: at, ExpiresAt: at.Add(o.ttl), OnExpiry: o.policy}
	for i := range statuses {
		l := &statuses[i].Limit
		exp := r.ExpiresAt
		if o.policy == ExpireCharge && l.Metric != MetricConcurrent {
			exp = Forever
		}
		h := Hold{ReservationID: r.ID, LimitID: l.ID, Subject: l.Subject, WindowStart: statuses[i].WindowStart,
			Amount: req.Estimate.Amount(l.Metric), ExpiresAt: exp}
		r.Holds = append(r.Holds, h)
		sw[i].holds = append(sw[i].holds, memHold{id: r.ID, amount: h.Amount, expires: h.ExpiresAt.UnixNano()})
	}
	// The row the writer keeps (and renews in place) has its own copy of
	// the holds: the caller's Reservation is the caller's.
	row := ReservationRow{ID: r.ID, Key: r.Key, Team: r.Team, Org: r.Org, User: r.User, Tags: r.Tags, Provider: r.Provider, Model: r.Model, Estimate: r.Estimate,
		At: r.At, ExpiresAt: r.ExpiresAt, State: ReservationLive, OnExpiry: o.policy, Holds: slices.Clone(r.Holds)}
	b.ws.NewReservations = append(b.ws.NewReservations, row)
	m.res[r.ID] = &row
	o.out.res = r
	return nil
}

// Commit, release and renew: one reservation each, by id
// (reservationsOf).

// reservation is the live (or expired unrecovered) reservation id, or the
// error its caller gets.
func (b *batch) reservation(id string) (*ReservationRow, error) {
	r := b.t.w.mem.res[id]
	if r == nil || b.missing[id] {
		return nil, fmt.Errorf("reservation %q: %w", id, ErrNotFound)
	}
	if r.State == ReservationCommitted || r.State == ReservationReleased {
		return nil, settledError(id, r.State)
	}
	return r, nil
}

// planSettle plans the end of r in this batch: state set, holds dropped
// from memory. (Tracker.publish later drops them from the cache.)
func (b *batch) planSettle(r *ReservationRow, state ReservationState) {
	b.ws.Settles = append(b.ws.Settles, Settle{ID: r.ID, State: state, At: b.now, Holds: r.Holds})
	for _, h := range r.Holds {
		if w := b.t.w.mem.windows[h.windowKey()]; w != nil {
			w.dropHold(r.ID)
		}
	}
	r.State = state
	r.SettledAt = b.now
}

// needCommit needs the limits the reservation holds on and the windows
// its event counts in, charged to whom it held for.
func (b *batch) needCommit(ctx context.Context, tx Tx, o *op, n *needs) error {
	r := b.t.w.mem.res[o.id]
	if r == nil {
		return nil
	}
	n.needHolds(r)
	who := r.who()
	return b.needEvent(ctx, tx, n, &who, r.Provider, r.Model, r.At)
}

// decideCommit records the actual usage as the reservation's event and
// settles it.
func (b *batch) decideCommit(ctx context.Context, tx Tx, o *op) error {
	r, err := b.reservation(o.id)
	if err != nil {
		return err
	}
	out := Settlement{RequestID: o.id, Expired: r.State == ReservationExpired || !b.now.Before(r.ExpiresAt)}
	ev := o.ev
	ev.Key, ev.Provider, ev.Model, ev.At = r.Key, r.Provider, r.Model, r.At
	ev.Team, ev.Org, ev.User, ev.Tags = r.Team, r.Org, r.User, r.Tags // the levels and tags it held
	if r.State == ReservationExpired && r.OnExpiry == ExpireCharge {
		out.Charged = true
		ev = lateUsage(ev, r.Estimate)
	}
	// A commit records its event even with no tokens (it is a request);
	// after a charge only an excess is recorded; an event whose id the
	// history already holds (found by an earlier try) is not recorded twice.
	if (!out.Charged || ev.Billable() > 0) && !b.stored(ev) {
		if out.Charged {
			out.LateRequestID = ev.RequestID
		}
		if err := b.event(ctx, tx, ev, o); err != nil {
			return err
		}
	}
	o.out.holds = r.Holds
	b.planSettle(r, ReservationCommitted)
	o.out.settlement = out
	return nil
}

// needSettled needs the limits the reservation holds on (a release or a
// renewal reads no window: it only drops or moves holds).
func (b *batch) needSettled(o *op, n *needs) error {
	if r := b.t.w.mem.res[o.id]; r != nil {
		n.needHolds(r)
	}
	return nil
}

func (b *batch) decideRelease(o *op) error {
	r, err := b.reservation(o.id)
	if err != nil {
		return err
	}
	o.out.holds = r.Holds
	b.planSettle(r, ReservationReleased)
	return nil
}

func (b *batch) decideRenew(o *op) error {
	r, err := b.reservation(o.id)
	if errors.Is(err, ErrSettled) {
		return ErrLeaseLost
	}
	if err != nil {
		return err
	}
	if r.State != ReservationLive || !b.now.Before(r.ExpiresAt) {
		return ErrLeaseLost
	}
	exp := b.now.Add(o.ttl)
	b.ws.Renewals = append(b.ws.Renewals, Renewal{ID: r.ID, ExpiresAt: exp, Holds: r.Holds})
	r.ExpiresAt = exp
	for i := range r.Holds {
		if !r.Holds[i].ExpiresAt.Equal(Forever) {
			r.Holds[i].ExpiresAt = exp
		}
	}
	for _, h := range r.Holds {
		if w := b.t.w.mem.windows[h.windowKey()]; w != nil {
			for i := range w.holds {
				if w.holds[i].id == r.ID {
					w.holds[i].expires = h.ExpiresAt.UnixNano()
				}
			}
		}
	}
	o.out.holds = slices.Clone(r.Holds)
	o.out.expires = exp
	return nil
}

// Recover.

// expiredOf appends the live reservations expired at o's instant (at most
// maxRecover), and keeps them as o's.
func (b *batch) expiredOf(ctx context.Context, tx Tx, o *op, ids []string) ([]string, error) {
	rows, err := tx.ExpiredReservations(ctx, o.at, maxRecover)
	if err != nil {
		return ids, err
	}
	if b.expired == nil {
		b.expired = make(map[*op][]string)
	}
	for i := range rows {
		ids = append(ids, rows[i].ID)
		b.expired[o] = append(b.expired[o], rows[i].ID)
	}
	return b.staleOf(o, ids), nil
}

// needRecover needs the limits each expired reservation holds on, and the
// windows the charge of an ExpireCharge one counts in.
func (b *batch) needRecover(ctx context.Context, tx Tx, o *op, n *needs) error {
	for _, id := range b.expired[o] {
		r := b.t.w.mem.res[id]
		if r == nil {
			continue
		}
		n.needHolds(r)
		if r.OnExpiry == ExpireCharge || isLease(r.ID) {
			who := r.who()
			if err := b.needEvent(ctx, tx, n, &who, r.Provider, r.Model, r.At); err != nil {
				return err
			}
		}
		if err := b.needJournal(ctx, tx, r, n); err != nil {
			return err
		}
	}
	return b.needStale(ctx, tx, o, n)
}

// decideRecover settles o's expired reservations (charging the
// ExpireCharge ones) and plans the deletion of old settled ones.
func (b *batch) decideRecover(ctx context.Context, tx Tx, o *op) error {
	res := &o.out.recovered
	ids := b.expired[o]
	o.out.more = len(ids) >= maxRecover
	o.out.dropped = make(map[string][]Hold)
	for _, id := range ids {
		r := b.t.w.mem.res[id]
		// Another operation of this batch may have settled it, or another
		// process did before our lock.
		if r == nil || r.State != ReservationLive || r.ExpiresAt.After(o.at) {
			continue
		}
		// A lease's reservations are charged from its journal, before its
		// holds go.
		if err := b.chargeJournal(ctx, tx, r, o); err != nil {
			return err
		}
		// Charged before the holds go, so the limits never show room the
		// charge is about to take.
		if r.OnExpiry == ExpireCharge && !b.stored(chargedUsage(*r)) {
			if err := b.event(ctx, tx, chargedUsage(*r), o); err != nil {
				return err
			}
			res.ChargedReservations++
		}
		o.out.dropped[id] = r.Holds
		b.planSettle(r, ReservationExpired)
		res.ReleasedReservations++
		for _, h := range r.Holds {
			if h.WindowStart.IsZero() {
				res.ReleasedLeases++
			}
		}
	}
	b.ws.DeleteSettledBefore = o.at.Add(-b.t.cfg.SettledRetention)
	b.ws.DeleteExpiredBefore = b.t.expiredCut(o.at)
	return b.decideStale(ctx, tx, o)
}

// sortCounters orders the write set's counters so row-locking stores
// update them in one global order; the adds follow their counters. The
// counters and their windows move in place: sorted copies were ~3 MB live
// beside the write in a batch of 8,192 keys (issue 29).
func (b *batch) sortCounters() {
	n := len(b.ws.Counters)
	if n < 2 {
		return
	}
	cs := b.ws.Counters
	less := func(a, c int) int {
		x, y := &cs[a].Ref, &cs[c].Ref
		return cmp.Or(strings.Compare(x.Limit.ID, y.Limit.ID), strings.Compare(x.Limit.Subject, y.Limit.Subject),
			x.Start.Compare(y.Start))
	}
	sorted := true
	for i := 1; i < n && sorted; i++ {
		sorted = less(i-1, i) <= 0
	}
	if sorted {
		return
	}
	idx := make([]int32, n) // new index -> old
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, c int32) int { return less(int(a), int(c)) })
	pos := make([]int32, n) // old index -> new
	for newI, oldI := range idx {
		pos[oldI] = int32(newI)
	}
	for i := range b.ws.Events {
		for j := range b.ws.Events[i].Adds {
			a := &b.ws.Events[i].Adds[j]
			a.Counter = int(pos[a.Counter])
		}
	}
	// Each element to its place, cycle by cycle: the one at i swaps to
	// pos[i] until the one at i belongs there.
	for i := range pos {
		for p := pos[i]; p != int32(i); p = pos[i] {
			cs[i], cs[p] = cs[p], cs[i]
			b.touched[i], b.touched[p] = b.touched[p], b.touched[i]
			pos[i], pos[p] = pos[p], pos[i]
		}
	}
	for i, w := range b.touched {
		w.cw = int32(i)
	}
}
