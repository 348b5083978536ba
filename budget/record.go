package budget

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tokenbudget/tokenbudget/cache"
)

type opKind uint8

const (
	opUsage opKind = iota
	opFlush
	opReserve
	opCommit
	opRelease
	opRenew
	opRecover
	opLeaseCommit // a carved reservation's commit: its event and its lease's shrink
	opLeaseTick   // look after the leases (idle give-back, renewal, expiry)
	opLeaseClose  // give every lease back: the tracker is closing
)

// op is one unit of work for the writer: a typed request the batch decides
// (see batch.go), and the answer its caller waits for.
type op struct {
	ev       Usage      // opUsage from Record: the event; opCommit: the actual usage
	evs      []Usage    // opUsage from RecordSync: the events, in order (ev unused)
	contribs []contrib  // opUsage: the pending deltas enqueue added for its events
	leased   *leasedRes // opLeaseCommit: the carved reservation (nil: its room was settled by expiry)

	*opArgs // nil for usage and flushes, which queue by the thousand

	done  chan opResult // nil for fire-and-forget usage
	state atomic.Int32  // withdrawable ops: opQueued, then opClaimed by the writer or opWithdrawn by the caller
	// kind sits in state's word with the flags below: a Record's op is
	// 320 bytes, not 352, with up to QueueSize of them queued.
	kind opKind

	// Writer-owned.
	skip     bool      // not planned: withdrawn, or told of a failure and not a settlement
	told     bool      // its waiter was answered with a failure
	answered bool      // done has its answer
	out      *opResult // the planned answer, sent once the batch commits (nil for Record's)
}

// opArgs are what a reservation operation asks.
type opArgs struct {
	req    Request       // opReserve
	at     time.Time     // opReserve: the reservation's instant; opRecover: the recovery's
	ttl    time.Duration // opReserve, opRenew
	policy ExpiryPolicy  // opReserve
	minOut int64         // opReserve
	id     string        // opCommit, opRelease, opRenew
	// resID is opReserve's id, drawn on the first try that grants it and
	// kept by every retry: a retry after a commit whose outcome is unknown
	// finds by it whether that try landed.
	resID string
	lease bool // opReserve: may be served by a lease on its route
}

const (
	opQueued int32 = iota
	opClaimed
	opWithdrawn
)

type opResult struct {
	err        error
	duplicate  bool   // Record
	dups       []bool // RecordSync: per event
	flush      FlushResult
	res        *Reservation
	settlement Settlement
	holds      []Hold // the holds a commit, release or renewal changed
	expires    time.Time
	recovered  RecoverResult
	more       bool              // opRecover: it hit maxRecover; run it again
	dropped    map[string][]Hold // opRecover: the holds it freed, by reservation
	exhausted  []Alert           // opReserve: refused; logged with the batch
	leased     *leasedRes        // opReserve: carved from a lease
}

// contrib is a pending delta an event added to a counter (whose key is
// c.Key(): a queued event holds no copy of it).
type contrib struct {
	c     *cache.Counter
	delta int64
}

// FlushResult counts the events queued by Record (fire-and-forget; the
// synchronous paths report their own) that the writer committed since the
// previous Flush, by any caller, up to this one.
type FlushResult struct {
	Written    int64 // new events appended to the history
	Duplicates int64 // events whose (key, request_id) was already stored
}

// Stats are the tracker's counters since New.
type Stats struct {
	Queued     int64 // events accepted by Record
	Written    int64 // events committed to the history
	Duplicates int64 // events ignored as duplicates
	Batches    int64 // write transactions committed
	Retries    int64 // failed batch attempts retried by the writer
	Failures   int64 // failed batch attempts (each is retried)
	QueueDepth int64 // operations waiting for the writer now
	// Unpriced counts events written with no price for their model while a
	// usd limit applied to them: stored with cost 0, counted, never dropped.
	Unpriced int64
	// LeasesLost counts leases this tracker found recovered by another
	// process (it stalled past their TTL): never settled against again.
	LeasesLost int64
	// Leased counts reservations answered from a lease in memory.
	Leased int64
	// LeaseLate counts commits of reservations whose lease another process
	// had recovered (this one stalled) that recorded an excess over the
	// charged estimate as <id>:late.
	LeaseLate int64
	// LeasesUnjournaled counts leases this tracker's recovery charged
	// whole (the rest of the lease) because their journal was not in
	// Config.LeaseJournal; each is also reported to Config.OnError
	// (ErrLeaseUnjournaled).
	LeasesUnjournaled int64
	Store             StoreStats
}

type trackerStats struct {
	queued, written, duplicates, batches, retries, failures, unpriced atomic.Int64
	sinceFlushWritten, sinceFlushDup                                  int64 // writer-owned
}

// Stats reports the tracker's counters.
func (t *Tracker) Stats() Stats {
	return Stats{
		Queued: t.stats.queued.Load(), Written: t.stats.written.Load(), Duplicates: t.stats.duplicates.Load(),
		Batches: t.stats.batches.Load(), Retries: t.stats.retries.Load(), Failures: t.stats.failures.Load(),
		QueueDepth: int64(len(t.queue)), Store: t.store.Stats(), Unpriced: t.stats.unpriced.Load(),
		LeasesLost: t.leases.lost.Load(), Leased: t.leases.carved.Load(), LeaseLate: t.leases.late.Load(),
		LeasesUnjournaled: t.leases.unjournaled.Load(),
	}
}

// Record validates u and queues it for the writer. It never touches the
// store on the caller's goroutine and blocks only while the queue is full,
// until there is room or ctx ends. Once Record returns nil the event is
// never dropped while the process lives (in Durable mode it is already
// committed). A missing request id is generated; a zero At means now.
//
// When the key's limits are cached, the event shows in this process's
// checks at once, before it is written.
func (t *Tracker) Record(ctx context.Context, u Usage) error {
	wait, err := t.RecordQueued(ctx, u)
	if err != nil {
		return err
	}
	return wait(ctx)
}

// checkHorizon refuses an event before the prune horizon: the history no
// longer holds the ids it would be deduplicated against.
func (t *Tracker) checkHorizon(u *Usage) error {
	if h := t.horizon.Load(); h != 0 && u.At.UnixNano() < h {
		return horizonError(u, h)
	}
	return nil
}

func horizonError(u *Usage, h int64) error {
	return invalid("at", u.At.UTC().Format(time.RFC3339Nano), "is before the prune horizon "+
		time.Unix(0, h).UTC().Format(time.RFC3339)+": its request id could no longer be deduplicated")
}

// RecordSync records events and waits until they are committed, reporting
// for each whether it was a duplicate. It is the synchronous path of the CLI
// and of imports.
func (t *Tracker) RecordSync(ctx context.Context, events ...Usage) ([]bool, error) {
	if len(events) == 0 {
		return nil, nil
	}
	now := t.now()
	evs := make([]Usage, len(events))
	for i := range events {
		u, err := events[i].Normalize(now)
		if err != nil {
			return nil, err
		}
		if err := t.checkHorizon(&u); err != nil {
			return nil, err
		}
		evs[i] = u
	}
	// One operation for the whole call: one transaction, however many events.
	o := &op{kind: opUsage, evs: evs, done: make(chan opResult, 1), out: new(opResult)}
	if err := t.enqueueAt(ctx, o, now.UnixNano()); err != nil {
		return nil, err
	}
	r := t.wait(ctx, o)
	return r.dups, r.err
}

// Flush waits until everything queued before it is committed. It returns
// the writer's error once a batch has failed Config.FlushFailures times (the
// writer keeps retrying), or ctx's error.
func (t *Tracker) Flush(ctx context.Context) (FlushResult, error) {
	o := &op{kind: opFlush, done: make(chan opResult, 1), out: new(opResult)}
	if err := t.enqueue(ctx, o); err != nil {
		return FlushResult{}, err
	}
	r := t.wait(ctx, o)
	return r.flush, r.err
}

// enqueue hands o to the writer, adding an event's pending deltas first so
// that a check on another goroutine never misses it.
func (t *Tracker) enqueue(ctx context.Context, o *op) error { return t.enqueueAt(ctx, o, 0) }

// enqueueAt is enqueue by a caller that read the tracker's clock (Unix
// nanos; 0 when it did not): an event's window that holds it is memoised
// for the checks (limDef.newWindow).
func (t *Tracker) enqueueAt(ctx context.Context, o *op, clock int64) error {
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	if t.closed {
		return ErrClosed
	}
	if o.kind == opUsage {
		t.addPending(o, clock)
	}
	select {
	case t.queue <- o:
	default:
		select {
		case t.queue <- o:
		case <-ctx.Done():
			t.unqueue(o)
			return ctx.Err()
		case <-t.closingCh:
			// Close is waiting for this read lock: give way.
			t.unqueue(o)
			return ErrClosed
		}
	}
	if o.kind == opUsage {
		t.stats.queued.Add(int64(max(len(o.evs), 1)))
	}
	return nil
}

// unqueue takes back the pending deltas of an event that was not queued.
func (t *Tracker) unqueue(o *op) {
	for _, c := range o.contribs {
		c.c.AddPending(-c.delta)
	}
}

// addPending overlays o's events on the cached counters of their keys'
// limits. Without cached limits nothing is overlaid: an event shows once
// written.
func (t *Tracker) addPending(o *op, clock int64) {
	if o.evs == nil {
		t.addPendingEvent(o, &o.ev, clock)
		return
	}
	for i := range o.evs {
		t.addPendingEvent(o, &o.evs[i], clock)
	}
}

func (t *Tracker) addPendingEvent(o *op, ev *Usage, clock int64) {
	e, ok := t.limits.Peek(ev.Key)
	if !ok {
		return
	}
	kl := e.Value
	who := ev.Who()
	if who.Team == "" && who.Org == "" {
		who.Team, who.Org = kl.team(), kl.org()
	} else if who.Team != kl.team() || who.Org != kl.org() {
		return // charged elsewhere than the cached placement: the writer counts it
	}
	if o.contribs == nil {
		o.contribs = make([]contrib, 0, len(kl.lims))
	}
	model := NormalizeModel(ev.Model)
	if kl.hasUSD() && !ev.CostKnown {
		// The overlay's cost comes from the cached table (no I/O here); the
		// writer prices the event again when it stores it.
		if s := t.prices.Load(); s != nil {
			if p := s.table.For(ev.Provider, model, ev.ServiceTier, ev.Input, ev.At); p != nil {
				ev.Cost = p.Cost(ev)
			}
		}
	}
	var l Limit
	for i := range kl.lims {
		kl.limitInto(i, &l)
		if !l.countsEvent(&who, ev.Provider, model, ev.At) {
			continue
		}
		w := kl.window(i, ev.At, clock)
		k := cache.Key{LimitID: l.ID, Subject: l.subjectFor(&who), Start: w.start}
		d := ev.Amount(l.Metric)
		c := w.c
		if l.Each() {
			c = nil // the slot's counter is no user's
		}
		if c == nil || !c.AddPending(d) {
			c = t.counters.Acquire(k)
			for !c.AddPending(d) {
				c = t.counters.Acquire(k)
			}
		}
		o.contribs = append(o.contribs, contrib{c: c, delta: d})
	}
}

// wait waits for o's answer. It stops early when ctx ends or once the
// writer has failed Config.FlushFailures times in a row (the database stays
// unwritable), returning that error; the last of those failures must come
// after o was queued, so an operation queued just as the writer recovers
// is not refused for failures already over. A reservation operation the
// writer has already taken cannot be withdrawn: then it waits for the
// outcome, which the writer gives within FlushFailures attempts.
func (t *Tracker) wait(ctx context.Context, o *op) opResult {
	cdone := ctx.Done()
	failed := t.stats.failures.Load()
	for {
		sig := t.w.failSignal()
		if t.w.streak.Load() >= int64(t.cfg.FlushFailures) && t.stats.failures.Load() > failed && t.withdraw(o) {
			return opResult{err: fmt.Errorf("budget: database unwritable: %w", t.w.lastErr())}
		}
		select {
		case r := <-o.done:
			return r
		case <-cdone:
			if t.withdraw(o) {
				return opResult{err: ctx.Err()}
			}
			cdone = nil // taken by the writer: its answer is coming
		case <-sig:
		}
	}
}

// withdraw reports whether the caller may stop waiting for o: always for
// usage, flushes and settlements (they may still be written later), and for
// another reservation operation only if the writer has not taken it (it
// then never runs).
func (t *Tracker) withdraw(o *op) bool {
	if !o.withdrawable() {
		return true
	}
	return o.state.CompareAndSwap(opQueued, opWithdrawn)
}

// Close flushes what is queued and stops the writer and the sweep. If ctx
// ends first, or the store stays unwritable until it does, Close returns an
// error counting the events that were not written.
func (t *Tracker) Close(ctx context.Context) error {
	t.closeCx.CompareAndSwap(nil, &ctx)
	t.closeOnce.Do(func() { close(t.closingCh) })
	t.closeMu.Lock()
	if t.closed {
		t.closeMu.Unlock()
		<-t.done
		return nil
	}
	t.closed = true
	close(t.stop)
	t.closeMu.Unlock()
	<-t.done
	t.sweepWG.Wait()
	if n := len(t.queue) + int(t.w.unwritten.Load()); n > 0 {
		return fmt.Errorf("budget: close: %d operations not written: %w", n, errors.Join(ctx.Err(), t.w.lastErr()))
	}
	return nil
}
