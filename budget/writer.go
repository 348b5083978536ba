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
					t.abandon([]*op{o}, nil, nil, errAbandoned)
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
func (t *Tracker) process(batch []*op) bool {
	events := make([]Usage, 0, len(batch))
	sums := make(map[*cache.Counter]*pendingSum)
	told := make(map[*op]bool) // waiters already answered (or who gave up)
	for _, o := range batch {
		switch o.kind {
		case opUsage:
			events = append(events, o.ev)
			for _, c := range o.contribs {
				ps := sums[c.c]
				if ps == nil {
					ps = &pendingSum{key: c.key}
					sums[c.c] = ps
				}
				ps.queued += c.delta
			}
		case opTx:
			// A caller whose context ended before the writer got here has
			// been told so: its operation must never happen.
			if !o.state.CompareAndSwap(opQueued, opClaimed) {
				told[o] = true
			}
		}
	}
	// One BeginCommit per counter, so seq is odd for the whole commit.
	for c := range sums {
		c.BeginCommit()
	}
	var (
		inserted []bool
		deltas   []windowDelta
	)
	backoff := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx := context.Background()
		err := t.store.Update(ctx, func(tx Tx) error {
			t.w.checked, t.w.pricesChecked, t.w.unpriced = false, false, 0
			now := t.now()
			var err error
			if inserted, deltas, err = t.applyUsage(ctx, tx, events, now); err != nil {
				return err
			}
			for _, o := range batch {
				if o.kind == opTx && (!told[o] || o.keep) {
					if err := o.run(ctx, tx, now); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err == nil {
			t.w.streak.Store(0)
			t.stats.unpriced.Add(t.w.unpriced)
			break
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
			for _, o := range batch {
				if told[o] || o.kind == opUsage && o.done == nil {
					continue
				}
				told[o] = true
				answer(o, err)
			}
		}
		if cx := t.closing(); cx != nil && cx.Err() != nil {
			t.abandon(batch, sums, told, err)
			return false
		}
		t.stats.retries.Add(1)
		if !t.sleep(backoff) {
			t.abandon(batch, sums, told, err)
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	t.settle(batch, inserted, deltas, sums, told)
	return true
}

// answer tells o's waiter that it failed with err.
func answer(o *op, err error) {
	switch {
	case o.kind == opTx:
		o.after(err)
	case o.done != nil:
		o.done <- opResult{err: err}
	}
}

// abandon gives up on a batch when Close's context ended: the cache
// forgets its pending deltas, every waiter is answered, and the events are
// counted as unwritten.
func (t *Tracker) abandon(batch []*op, sums map[*cache.Counter]*pendingSum, told map[*op]bool, err error) {
	for c, ps := range sums {
		c.EndCommit(ps.queued, 0, false)
	}
	for _, o := range batch {
		if o.kind == opUsage || o.keep {
			t.w.unwritten.Add(1)
		}
		if o.kind == opUsage {
			if sums == nil {
				for _, c := range o.contribs {
					c.c.AddPending(-c.delta)
				}
			}
		}
		if told[o] || o.kind == opTx && !o.state.CompareAndSwap(opQueued, opClaimed) && sums == nil {
			continue // answered already, or its caller gave up
		}
		answer(o, fmt.Errorf("%w: %v", errAbandoned, err))
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

// settle moves a committed batch from pending to committed in the cache and
// answers the waiters.
func (t *Tracker) settle(batch []*op, inserted []bool, deltas []windowDelta, sums map[*cache.Counter]*pendingSum, told map[*op]bool) {
	applied := make(map[cache.Key]int64, len(deltas))
	for _, d := range deltas {
		applied[d.key] = d.delta
	}
	for c, ps := range sums {
		c.EndCommit(ps.queued, applied[ps.key], true)
		delete(applied, ps.key)
		t.counters.Unpin(ps.key, c)
	}
	// Windows this process had no pending delta for (a limit it had not
	// cached when recording): re-read them rather than guess.
	for k := range applied {
		if c := t.counters.Peek(k); c != nil {
			c.Invalidate()
		}
	}
	var written, dups, asyncWritten, asyncDups int64
	ev := 0
	for _, o := range batch {
		if o.kind != opUsage {
			continue
		}
		dup := !inserted[ev]
		ev++
		if dup {
			dups++
		} else {
			written++
		}
		if o.done == nil {
			if dup {
				asyncDups++
			} else {
				asyncWritten++
			}
		} else if !told[o] {
			o.done <- opResult{duplicate: dup}
		}
	}
	t.stats.written.Add(written)
	t.stats.duplicates.Add(dups)
	t.stats.batches.Add(1)
	t.stats.sinceFlushWritten += asyncWritten
	t.stats.sinceFlushDup += asyncDups
	for _, o := range batch {
		switch {
		case o.kind == opTx:
			if !told[o] || o.keep {
				o.after(nil)
			}
		case told[o]:
		case o.kind == opFlush:
			o.done <- opResult{flush: FlushResult{Written: t.stats.sinceFlushWritten, Duplicates: t.stats.sinceFlushDup}}
			t.stats.sinceFlushWritten, t.stats.sinceFlushDup = 0, 0
		}
	}
}
