package budget

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tokenbudget/tokenbudget/cache"
)

// writeLoop is the writer goroutine: it gathers operations into batches
// and hands each to process, which commits it in one transaction.
func (t *Tracker) writeLoop() {
	defer close(t.done)
	batch := make([]*op, 0, t.cfg.BatchSize)
	keys := make(map[string]struct{})
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var first *op
		select {
		case first = <-t.queue:
		case <-t.stop:
			t.drainOnClose(batch)
			return
		}
		batch = append(batch[:0], first)
		clear(keys)
		first.addKeys(keys)
		urgent := first.waited()
		if !urgent {
			timer.Reset(t.cfg.BatchInterval)
		}
	gather:
		for len(batch) < t.cfg.BatchSize && len(keys) < maxBatchKeys {
			select {
			case o := <-t.queue:
				batch = append(batch, o)
				o.addKeys(keys)
				urgent = urgent || o.waited()
				continue
			default:
			}
			if urgent {
				break
			}
			select {
			case o := <-t.queue:
				batch = append(batch, o)
				o.addKeys(keys)
				urgent = urgent || o.waited()
			case <-timer.C:
				break gather
			case <-t.stop:
				break gather
			}
		}
		timer.Stop()
		t.process(batch)
		// The array outlives the batch: pointers left in it would keep
		// up to BatchSize written operations, their events and their
		// contributions alive until the slots are reused.
		clear(batch)
	}
}

// maxBatchKeys bounds the distinct keys of a batch's events: the writer
// closes a batch that reaches it, however few events it holds. What a
// batch holds while it is planned and written grows with its keys more
// than with its events (each key's limits written out, its windows looked
// up, loaded and created, their rows and rollups): in Memory100kKeys,
// batches of 16,384 events over as many keys were most of what was live
// when the heap peaked, on top of the queue. A load over up to this many
// keys gets batches of BatchSize as before, which is where larger
// batches pay: many events per leaf page written (at 4,096, a load over
// 5,000 keys took 25% more CPU an event, its batches closing at ~4,000
// events, one a key, instead of ~14,000). Past ~30,000 keys a full batch
// has about one event a key either way.
const maxBatchKeys = 8192

// addKeys adds the keys of o's events to keys (a usage operation's: the
// others, a few per batch, add nothing).
func (o *op) addKeys(keys map[string]struct{}) {
	if o.kind != opUsage {
		return
	}
	if o.evs == nil {
		keys[o.ev.Key] = struct{}{}
		return
	}
	for i := 0; i < len(o.evs) && len(keys) < maxBatchKeys; i++ {
		keys[o.evs[i].Key] = struct{}{}
	}
}

// drainOnClose writes everything still queued, batch by batch. If Close's
// context ends first, what is left is answered with an error and counted.
func (t *Tracker) drainOnClose(batch []*op) {
	for {
		batch = batch[:0]
	fill:
		for len(batch) < t.cfg.BatchSize {
			select {
			case o := <-t.queue:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		if len(batch) == 0 {
			if len(t.leases.all()) > 0 {
				// Every lease given back before the writer stops.
				closing := &op{kind: opLeaseClose, out: new(opResult)}
				t.process([]*op{closing})
			}
			return
		}
		ok := t.process(batch)
		clear(batch)
		if !ok {
			for {
				select {
				case o := <-t.queue:
					t.abandon([]*op{o}, nil, errAbandoned)
				default:
					return
				}
			}
		}
	}
}

var errAbandoned = errors.New("budget: tracker closed before this was written")

// closing returns Close's context once Close was called, else nil.
func (t *Tracker) closing() context.Context {
	if p := t.closeCx.Load(); p != nil {
		return *p
	}
	return nil
}

// waited reports whether a caller waits for o (a flush, a reservation, a
// synchronous or durable record): its batch is written as soon as the queue
// is drained, without waiting out BatchInterval.
func (o *op) waited() bool {
	return o.kind != opUsage && o.kind != opLeaseCommit && o.kind != opLeaseTick || o.done != nil
}

// process commits one batch, retrying with backoff until it lands. It gives
// up only when Close's context ends, and reports whether the batch landed.
func (t *Tracker) process(ops []*op) bool {
	sums := claim(ops)
	m := &t.w.mem
	var b *batch
	dups := make(map[string]bool)
	backoff := min(10*time.Millisecond, t.cfg.MaxRetryBackoff)
	conflicts := 0
	// prev is the last try that failed after sending all its writes: the
	// server may have committed it (a connection cut after COMMIT), so the
	// next try first asks the store whether it landed, by the ids it wrote.
	var prev *batch
	plain := false
	for attempt := 1; ; attempt++ {
		ctx := context.Background()
		b = &batch{t: t, ops: ops, dups: dups, prev: prev, plain: plain}
		tries := 0
		err := t.store.Update(ctx, func(tx Tx) error {
			if tries++; tries > 1 {
				m.forget() // the last try's decisions changed it
			}
			b.ran, b.probed = false, false
			b.reset(t.now())
			return b.try(ctx, tx)
		})
		if b.prevLanded {
			// Learned by a read, so it holds even if this try then failed:
			// the try before is what the store has, its answers the right
			// ones. Running the operations again would reserve twice.
			m.forget()
			b = prev
			b.landedLeases()
			t.w.streak.Store(0)
			break
		}
		if err == nil {
			m.expect = m.expect.Next()
			b.landed()
			t.w.streak.Store(0)
			break
		}
		m.forget()
		if !b.ran {
			b.unlinkLeases() // it did not land
		}
		switch {
		case b.ran:
			prev = b
		case b.probed:
			prev = nil // it did not land, and this try wrote nothing
		}
		if errors.Is(err, ErrConflict) && conflicts < maxConflicts {
			// Another process changed what the batch was planned on (or
			// the plan met an event already stored): plan again at once,
			// from a fresh read. Not a failure of the store.
			conflicts++
			attempt--
			continue
		}
		if errors.As(err, new(*internalError)) {
			plain = true
		}
		t.failed(ops, err, attempt)
		if cx := t.closing(); cx != nil && cx.Err() != nil {
			t.abandon(ops, sums, err)
			return false
		}
		t.stats.retries.Add(1)
		if !t.sleep(backoff) {
			t.abandon(ops, sums, err)
			return false
		}
		backoff = min(2*backoff, t.cfg.MaxRetryBackoff)
	}
	t.shrinkMemory()
	t.publish(b, sums)
	if b == prev {
		t.releaseTold(b)
	}
	return true
}

// hookBatch calls the test's batch hook (SetBatchHook), if one is set.
func (t *Tracker) hookBatch() {
	if h := t.batchHook.Load(); h != nil {
		(*h)()
	}
}

// claim takes ops for one commit: the withdrawable ones whose callers
// gave up are skipped, and the pending deltas the events queued are summed
// per cached counter (what the batch queued on it), each counter begun
// once (so its seq is odd for the whole commit). The map is sized once
// and holds sums, not pointers to them: it is live while the batch is
// written, and for a batch of 8,192 keys grown entry by entry it held
// 1.7 MB and allocated twice that. It is sized to the counters, not the
// contributions: an event counting in the same counters as the event
// before it (a key's events in a row, as a rule) adds none, so a batch
// of 16,384 events on one key does not allocate room for 49,152 sums to
// hold 3.
func claim(ops []*op) (sums map[*cache.Counter]int64) {
	n := 0
	var last *cache.Counter
	for _, o := range ops {
		if o.kind == opUsage && len(o.contribs) > 0 && o.contribs[0].c != last {
			n += len(o.contribs)
			last = o.contribs[0].c
		}
	}
	sums = make(map[*cache.Counter]int64, n)
	for _, o := range ops {
		o.skip, o.told = false, false
		switch {
		case o.kind == opUsage:
			for _, c := range o.contribs {
				sums[c.c] += c.delta
			}
		case o.withdrawable():
			// A caller whose context ended before the writer got here has
			// been told so: its operation must never happen.
			if !o.state.CompareAndSwap(opQueued, opClaimed) {
				o.skip, o.told = true, true
			}
		}
	}
	for c := range sums {
		c.BeginCommit()
	}
	return sums
}

// failed counts a failed attempt at ops and reports err; from
// FlushFailures attempts on it tells the waiters. Usage and settlements
// stay and are retried (a charge is never given up), but a reservation or
// renewal whose caller saw an error must not happen later.
func (t *Tracker) failed(ops []*op, err error, attempt int) {
	t.stats.failures.Add(1)
	t.w.fail(err)
	if t.cfg.OnError != nil {
		t.cfg.OnError(err)
	}
	if attempt < t.cfg.FlushFailures {
		return
	}
	for _, o := range ops {
		if o.told || o.done == nil {
			continue
		}
		o.told = true
		if o.withdrawable() {
			o.skip = true
		}
		o.answer(opResult{err: err})
	}
}

// releaseTold releases the reservations of b, a try found to have landed
// after its failure, whose callers were told of that failure (past
// FlushFailures): they must not stay live, holding their estimate and
// charged at expiry with no request behind them.
func (t *Tracker) releaseTold(b *batch) {
	var rel []*op
	for _, o := range b.ops {
		if o.kind != opReserve || !o.told || o.out == nil || o.out.res == nil {
			continue
		}
		id := o.out.res.ID
		if slices.ContainsFunc(b.ws.NewReservations, func(r ReservationRow) bool { return r.ID == id }) {
			rel = append(rel, &op{kind: opRelease, opArgs: &opArgs{id: id}, out: &opResult{}})
		}
	}
	if len(rel) > 0 {
		t.process(rel)
	}
}

// errLanded ends a try that found the try before it landed: it writes
// nothing.
var errLanded = errors.New("budget: the previous try of this batch landed")

// landedIn reports whether b, a try whose COMMIT failed, was committed
// after all. Its ids tell (a try writes all of them or none): its first new
// reservation exists, or else its first settlement is in the store with
// b's state and instant. A try with neither (usage only, renewals) is run
// again: its events are idempotent by request id, a renewal by its nature.
// It is asked after the retry took its locks, so an old transaction still
// committing on the server has finished.
func (b *batch) landedIn(ctx context.Context, tx Tx) (bool, error) {
	var id string
	var s *Settle
	switch {
	case len(b.ws.NewReservations) > 0:
		id = b.ws.NewReservations[0].ID
	case len(b.ws.Settles) > 0:
		s = &b.ws.Settles[0]
		id = s.ID
	default:
		return false, nil
	}
	rows, err := tx.Reservations(ctx, []string{id})
	if err != nil || len(rows) == 0 {
		return false, err
	}
	return s == nil || rows[0].State == s.State && rows[0].SettledAt.Equal(s.At), nil
}

// prevEvents marks the events of b that the store already had because the
// try before (its COMMIT's outcome unknown) wrote them: they are this
// batch's own, landed after all, so the cache and the callers count them as
// written, not as duplicates. Nil when there was no such try.
func (b *batch) prevEvents(inserted []bool) []bool {
	if b.prev == nil || len(b.prev.ws.Events) == 0 {
		return nil
	}
	mine := make(map[string]bool, len(b.prev.ws.Events))
	for i := range b.prev.ws.Events {
		ev := &b.prev.ws.Events[i].Usage
		mine[ev.Key+"\x00"+ev.RequestID] = true
	}
	var again []bool
	for i := range b.ws.Events {
		ev := &b.ws.Events[i].Usage
		if !inserted[i] && b.evOps[i].kind == opUsage && mine[ev.Key+"\x00"+ev.RequestID] {
			if again == nil {
				again = make([]bool, len(b.ws.Events))
			}
			again[i] = true
		}
	}
	return again
}

// maxConflicts bounds the immediate re-plans of one batch after
// ErrConflict; past it, conflicts are retried with backoff like failures.
const maxConflicts = 3

// withdrawable reports whether o's caller may take it back while it is
// queued: a reservation, renewal or recovery (never usage, a flush or a
// settlement).
func (o *op) withdrawable() bool {
	return o.kind == opReserve || o.kind == opRenew || o.kind == opRecover
}

// answer tells o's waiter r, once.
func (o *op) answer(r opResult) {
	if o.done != nil && !o.answered {
		o.answered = true
		o.done <- r
	}
}

// reset empties the plan for a (re)try at now.
func (b *batch) reset(now time.Time) {
	b.unlinkLeases()
	for _, w := range b.touched { // a failed try's (a fresh batch has none)
		w.cw = -1
	}
	b.now = now
	b.ws = WriteSet{}
	b.missing, b.prices, b.touched, b.expired, b.evOps, b.inserted, b.again, b.visited = nil, nil, nil, nil, nil, nil, nil, nil
	b.leases, b.leaseOrder, b.newLeases, b.looked, b.recoveredLeases, b.unjournaled = nil, nil, nil, false, nil, nil
}

// try is one attempt at the batch inside tx (process makes as many as it
// takes): load, decide, write.
func (b *batch) try(ctx context.Context, tx Tx) error {
	if err := b.load(ctx, tx); err != nil {
		return err
	}
	if b.prev != nil {
		landed, err := b.prev.landedIn(ctx, tx)
		if err != nil {
			return err
		}
		if landed {
			b.prevLanded = true
			return errLanded
		}
		b.probed = true
		b.prev.unlinkLeases() // it did not land
	}
	if err := b.decide(ctx, tx); err != nil {
		return err
	}
	// The plans served load and decide only: dropped here, they are not
	// live beside the write's arguments and rollups, nor beside the next
	// batch while it queues (issue 29's peak RSS).
	b.keys, b.needEach = nil, nil
	b.sortCounters()
	// Exhausted windows are logged in the transaction that refused, even
	// one that writes nothing else.
	exhausted := b.exhausted()
	if b.ws.size() == 0 && b.ws.DeleteSettledBefore.IsZero() {
		if len(exhausted) > 0 {
			return logAlerts(ctx, tx, exhausted)
		}
		return nil
	}
	b.t.hookBatch()
	inserted, deleted, err := tx.Apply(ctx, &b.ws)
	if err != nil {
		return err
	}
	b.t.hookBatch()
	b.inserted = inserted
	b.again = b.prevEvents(inserted)
	conflict := false
	for i, o := range b.evOps {
		if !inserted[i] && o.kind != opUsage {
			// A commit's or a charge's event already stored: another
			// process charged this reservation between our read and our
			// write, or the history holds an event with its id. Plan again
			// from what the store says now, without that event.
			ev := &b.ws.Events[i].Usage
			b.dups[ev.Key+"\x00"+ev.RequestID] = true
			conflict = true
		}
	}
	if conflict {
		return fmt.Errorf("%w: a reservation's event was already recorded", ErrConflict)
	}
	// Every event the history took is queued for the usage hooks, in
	// this transaction (outbox.go).
	if err := b.t.enqueueUsage(ctx, tx, &b.ws, inserted, b.now); err != nil {
		return err
	}
	// Thresholds crossed by what landed (duplicates added nothing), logged
	// in this transaction.
	if as, err := b.alerts(ctx, tx); err != nil {
		return err
	} else if as = append(as, exhausted...); len(as) > 0 {
		if err := logAlerts(ctx, tx, as); err != nil {
			return err
		}
	}
	for _, o := range b.ops {
		if o.kind == opRecover && o.active() && o.out.err == nil {
			o.out.recovered.Deleted = deleted
		}
	}
	b.ran = true
	return nil
}

// landed brings the memory in line with what was committed: duplicates
// added nothing, settled reservations are forgotten.
func (b *batch) landed() {
	m := &b.t.w.mem
	for i := range b.ws.Events {
		if b.inserted[i] {
			continue
		}
		for _, a := range b.ws.Events[i].Adds {
			w := b.touched[a.Counter]
			w.used = max(w.used-a.Amount, 0)
		}
	}
	for _, s := range b.ws.Settles {
		delete(m.res, s.ID)
	}
	b.landedLeases()
	for _, w := range b.touched {
		w.cw = -1
	}
	// Windows no reservation decides on leave memory; that their rows
	// exist is all later events need.
	b.t.w.burst = max(b.t.w.burst, len(m.windows))
	b.t.w.visited = len(b.visited)
	for _, v := range b.visited {
		if w := m.windows[v.key()]; w != nil && w.hot {
			m.hotPairs[latestHash(w.l)] = struct{}{}
		}
	}
	for _, v := range b.visited {
		k := v.key() // v, or a window read over it in this batch
		w := m.windows[k]
		if w == nil || w.hot {
			continue
		}
		if w.stored {
			b.t.markStored(k)
		}
		if h := latestHash(w.l); w.l.Metric != MetricConcurrent {
			if _, hot := m.hotPairs[h]; !hot {
				delete(m.latest, h)
			}
		}
		delete(m.windows, k)
	}
}

// shrinkMemory gives back what a burst grew the writer's window maps to.
// A batch fills them with the windows its events touch, and landed
// deletes all but the hot ones, but Go's maps keep their largest table:
// after a burst of full batches, megabytes of empty slots stay (6 MB after
// batches of 16,384 events over 100,000 keys, more than the keys' windows
// themselves). Once the queue is empty after a batch that large, the maps
// are built again holding what is left; under a sustained load the queue
// is never empty and they are reused as they are. It runs before the
// batch's answers, so a Flush's caller sees the writer's memory shrunk.
func (t *Tracker) shrinkMemory() {
	w := &t.w
	m := &w.mem
	// Only when the maps hold a small part of what they grew to: a load
	// whose windows stay (leases, reservations: the hot ones) would
	// otherwise copy thousands of entries after every batch, which took
	// the 1-goroutine leased pairs from 14,000 a second to 600.
	if w.burst < shrinkAfter || len(m.windows) > w.burst/4 || len(t.queue) > 0 {
		return
	}
	w.burst = 0
	m.windows = maps.Collect(maps.All(m.windows))
	m.latest = maps.Collect(maps.All(m.latest))
	m.hotPairs = maps.Collect(maps.All(m.hotPairs))
}

// shrinkAfter is how many windows the writer's memory must have held
// since it was last rebuilt for shrinkMemory to rebuild it once idle:
// below it the slack is a few hundred kilobytes at most.
const shrinkAfter = 1024

// rowStored reports whether the writer knows that window k has a counter
// row.
func (t *Tracker) rowStored(k cache.Key) bool {
	m := &t.w.mem
	if c := t.counters.Peek(k); c != nil && c.Row(m.epoch) {
		return true
	}
	_, ok := m.stored[storedHash(k)]
	return ok
}

// markStored records that window k has a counter row: on its counter when
// cached, else in memory.stored, which holds at most as many as the
// counter cache.
func (t *Tracker) markStored(k cache.Key) {
	m := &t.w.mem
	if c := t.counters.Peek(k); c != nil {
		c.MarkRow(m.epoch)
		return
	}
	if len(m.stored) >= t.cfg.CounterCacheSize {
		clear(m.stored)
	}
	m.stored[storedHash(k)] = struct{}{}
}

// abandon gives up on a batch when Close's context ended: the cache
// forgets its pending deltas, every waiter is answered, and the events are
// counted as unwritten.
func (t *Tracker) abandon(ops []*op, sums map[*cache.Counter]int64, err error) {
	for c, queued := range sums {
		c.EndCommit(queued, 0, false)
	}
	for _, o := range ops {
		switch o.kind {
		case opUsage:
			t.w.unwritten.Add(int64(max(len(o.evs), 1)))
		case opCommit, opRelease, opLeaseCommit:
			t.w.unwritten.Add(1)
		}
		if o.kind == opUsage && sums == nil {
			for _, c := range o.contribs {
				c.c.AddPending(-c.delta)
			}
		}
		if o.told || o.withdrawable() && sums == nil && !o.state.CompareAndSwap(opQueued, opClaimed) {
			continue // answered already, or its caller gave up
		}
		o.answer(opResult{err: fmt.Errorf("%w: %v", errAbandoned, err)})
	}
}

// sleep waits d, or less if Close's context ends; it reports whether the
// writer should go on.
func (t *Tracker) sleep(d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	var closed <-chan struct{}
	if cx := t.closing(); cx != nil {
		closed = cx.Done()
	}
	select {
	case <-tm.C:
		return true
	case <-closed:
		return false
	case <-t.stop:
		// Close was called while we slept: wait on its context from now.
		if cx := t.closing(); cx != nil {
			select {
			case <-tm.C:
				return true
			case <-cx.Done():
				return false
			}
		}
		<-tm.C
		return true
	}
}

// publish moves a committed batch into the cache (pending deltas become
// committed totals, holds come and go in place, so a check right after a
// commit needs no store read) and answers the waiters.
func (t *Tracker) publish(b *batch, sums map[*cache.Counter]int64) {
	applied := make(map[cache.Key]int64, len(b.ws.Counters))
	counted := b.inserted
	if b.again != nil {
		counted = slices.Clone(b.inserted)
		for i, a := range b.again {
			counted[i] = counted[i] || a
		}
	}
	for i, d := range b.ws.CounterDeltas(counted) {
		if d != 0 {
			r := &b.ws.Counters[i].Ref
			applied[windowKey(r.Limit, r.Start)] = d
		}
	}
	for c, queued := range sums {
		k := c.Key() // a counter's key never changes: it is its cache node's
		c.EndCommit(queued, applied[k], true)
		delete(applied, k)
		t.counters.Unpin(k, c)
	}
	for k, d := range applied {
		if c := t.counters.Peek(k); c != nil && c.LoadedAt() != 0 {
			c.BeginCommit()
			c.EndCommit(0, d, true)
		}
	}
	var written, dups, asyncWritten, asyncDups, unpriced int64
	for i, o := range b.evOps {
		ins := counted[i]
		if ins && b.ws.Events[i].Usage.Unpriced {
			unpriced++
		}
		if o.kind != opUsage {
			continue
		}
		if ins {
			written++
		} else {
			dups++
		}
		switch {
		case o.done == nil:
			if ins {
				asyncWritten++
			} else {
				asyncDups++
			}
		case o.evs != nil:
			o.out.dups = append(o.out.dups, !ins)
		case !o.told:
			o.answer(opResult{duplicate: !ins})
		}
	}
	t.cacheLeases(b)
	t.stats.written.Add(written)
	t.stats.duplicates.Add(dups)
	t.stats.unpriced.Add(unpriced)
	t.stats.batches.Add(1)
	t.stats.sinceFlushWritten += asyncWritten
	t.stats.sinceFlushDup += asyncDups
	for _, o := range b.ops {
		if o.skip {
			continue
		}
		if o.out == nil {
			continue // a Record: answered above, if anyone waits
		}
		if o.out.err == nil {
			switch o.kind {
			case opReserve:
				if o.out.leased == nil { // a lease's holds are its lease's (cacheLeases)
					t.cacheHolds(o.out.res.ID, o.out.res.Holds, true)
				}
			case opRenew:
				t.cacheHolds(o.id, o.out.holds, true)
			case opCommit, opRelease:
				t.cacheHolds(o.id, o.out.holds, false)
			case opRecover:
				for id, hs := range o.out.dropped {
					t.cacheHolds(id, hs, false)
				}
			}
		}
		if o.told {
			continue // a kept settlement whose waiter heard of a failure
		}
		if o.kind == opFlush {
			o.out.flush = FlushResult{Written: t.stats.sinceFlushWritten, Duplicates: t.stats.sinceFlushDup}
			t.stats.sinceFlushWritten, t.stats.sinceFlushDup = 0, 0
		}
		o.answer(*o.out)
	}
}
