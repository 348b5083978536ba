package budget

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/cache"
)

// run is the writer goroutine: it gathers operations into batches and
// commits each batch in one transaction.
func (t *Tracker) run() {
	defer close(t.done)
	batch := make([]*op, 0, t.cfg.BatchSize)
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
		urgent := first.waited()
		if !urgent {
			timer.Reset(t.cfg.BatchInterval)
		}
	gather:
		for len(batch) < t.cfg.BatchSize {
			select {
			case o := <-t.queue:
				batch = append(batch, o)
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
				urgent = urgent || o.waited()
			case <-timer.C:
				break gather
			case <-t.stop:
				break gather
			}
		}
		timer.Stop()
		t.process(batch)
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
			return
		}
		if !t.process(batch) {
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
func (o *op) waited() bool { return o.kind != opUsage || o.done != nil }

// pendingSum is what one batch queued on one cached counter.
type pendingSum struct {
	key    cache.Key
	queued int64
}

// process commits one batch, retrying with backoff until it lands. It gives
// up only when Close's context ends, and reports whether the batch landed.
func (t *Tracker) process(ops []*op) bool {
	sums := make(map[*cache.Counter]*pendingSum)
	for _, o := range ops {
		o.skip, o.told = false, false
		switch {
		case o.kind == opUsage:
			for _, c := range o.contribs {
				ps := sums[c.c]
				if ps == nil {
					ps = &pendingSum{key: c.key}
					sums[c.c] = ps
				}
				ps.queued += c.delta
			}
		case o.withdrawable():
			// A caller whose context ended before the writer got here has
			// been told so: its operation must never happen.
			if !o.state.CompareAndSwap(opQueued, opClaimed) {
				o.skip, o.told = true, true
			}
		}
	}
	// One BeginCommit per counter, so seq is odd for the whole commit.
	for c := range sums {
		c.BeginCommit()
	}
	m := &t.w.mem
	var b *batch
	dups := make(map[string]bool)
	backoff := 10 * time.Millisecond
	conflicts := 0
	for attempt := 1; ; attempt++ {
		ctx := context.Background()
		b = &batch{t: t, ops: ops, dups: dups}
		tries := 0
		err := t.store.Update(ctx, func(tx Tx) error {
			if tries++; tries > 1 {
				m.forget() // the last try's decisions changed it
			}
			b.reset(t.now())
			return b.run(ctx, tx)
		})
		if err == nil {
			m.expect = m.expect.Next()
			b.landed()
			t.w.streak.Store(0)
			break
		}
		m.forget()
		if errors.Is(err, ErrConflict) && conflicts < maxConflicts {
			// Another process changed what the batch was planned on (or
			// the plan met an event already stored): plan again at once,
			// from a fresh read. Not a failure of the store.
			conflicts++
			attempt--
			continue
		}
		t.stats.failures.Add(1)
		t.w.fail(err)
		if t.cfg.OnError != nil {
			t.cfg.OnError(err)
		}
		if attempt >= t.cfg.FlushFailures {
			// Tell the waiters in this batch. Usage and settlements stay and
			// are retried (a charge is never given up), but a reservation or
			// renewal whose caller saw an error must not happen later.
			for _, o := range ops {
				if o.told || o.kind == opUsage && o.done == nil {
					continue
				}
				o.told = true
				if o.withdrawable() {
					o.skip = true
				}
				o.answer(opResult{err: err})
			}
		}
		if cx := t.closing(); cx != nil && cx.Err() != nil {
			t.abandon(ops, sums, err)
			return false
		}
		t.stats.retries.Add(1)
		if !t.sleep(backoff) {
			t.abandon(ops, sums, err)
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	t.settle(b, sums)
	return true
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
	for _, w := range b.touched { // a failed try's (a fresh batch has none)
		w.cw = -1
	}
	b.now = now
	b.ws = WriteSet{}
	b.missing, b.prices, b.touched, b.expired, b.evOps, b.inserted, b.visited = nil, nil, nil, nil, nil, nil, nil
}

// run is one try of the batch inside tx: load, decide, write.
func (b *batch) run(ctx context.Context, tx Tx) error {
	if err := b.load(ctx, tx); err != nil {
		return err
	}
	if err := b.decide(ctx, tx); err != nil {
		return err
	}
	b.sortCounters()
	// Exhausted windows are logged in the transaction that refused, even
	// one that writes nothing else.
	exhausted := b.exhausted()
	if b.ws.size() == 0 && b.ws.DeleteSettledBefore.IsZero() {
		if len(exhausted) > 0 {
			return tx.LogAlerts(ctx, exhausted)
		}
		return nil
	}
	inserted, deleted, err := tx.Apply(ctx, &b.ws)
	if err != nil {
		return err
	}
	b.inserted = inserted
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
	// Thresholds crossed by what landed (duplicates added nothing), logged
	// in this transaction.
	if as, err := b.alerts(ctx, tx); err != nil {
		return err
	} else if as = append(as, exhausted...); len(as) > 0 {
		if err := tx.LogAlerts(ctx, as); err != nil {
			return err
		}
	}
	for _, o := range b.ops {
		if o.kind == opRecover && o.active() && o.out.err == nil {
			o.out.recovered.Deleted = deleted
		}
	}
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
	for _, w := range b.touched {
		w.cw = -1
	}
	// Windows no reservation decides on leave memory; that their rows
	// exist is all later events need.
	if len(m.stored) > maxStored {
		clear(m.stored)
	}
	for _, k := range b.visited {
		w := m.windows[k]
		if w == nil || w.hot {
			continue
		}
		if w.stored {
			m.stored[storedHash(k)] = struct{}{}
		}
		delete(m.windows, k)
	}
}

// abandon gives up on a batch when Close's context ended: the cache
// forgets its pending deltas, every waiter is answered, and the events are
// counted as unwritten.
func (t *Tracker) abandon(ops []*op, sums map[*cache.Counter]*pendingSum, err error) {
	for c, ps := range sums {
		c.EndCommit(ps.queued, 0, false)
	}
	for _, o := range ops {
		switch o.kind {
		case opUsage:
			t.w.unwritten.Add(int64(max(len(o.evs), 1)))
		case opCommit, opRelease:
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

// settle moves a committed batch into the cache (pending deltas become
// committed totals, holds come and go in place, so a check right after a
// commit needs no store read) and answers the waiters.
func (t *Tracker) settle(b *batch, sums map[*cache.Counter]*pendingSum) {
	applied := make(map[cache.Key]int64, len(b.ws.Counters))
	for i, d := range b.ws.CounterDeltas(b.inserted) {
		if d != 0 {
			r := &b.ws.Counters[i].Ref
			applied[windowKey(r.Limit, r.Start)] = d
		}
	}
	for c, ps := range sums {
		c.EndCommit(ps.queued, applied[ps.key], true)
		delete(applied, ps.key)
		t.counters.Unpin(ps.key, c)
	}
	for k, d := range applied {
		if c := t.counters.Peek(k); c != nil && c.LoadedAt() != 0 {
			c.BeginCommit()
			c.EndCommit(0, d, true)
		}
	}
	var written, dups, asyncWritten, asyncDups, unpriced int64
	for i, o := range b.evOps {
		ins := b.inserted[i]
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
				t.cacheHolds(o.out.res.ID, o.out.res.Holds, true)
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
