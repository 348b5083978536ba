package budget

import (
	"context"
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
		urgent := first.kind != opUsage
		if !urgent {
			timer.Reset(t.cfg.BatchInterval)
		}
	gather:
		for len(batch) < t.cfg.BatchSize {
			select {
			case o := <-t.queue:
				batch = append(batch, o)
				urgent = urgent || o.kind != opUsage
				continue
			default:
			}
			if urgent {
				break
			}
			select {
			case o := <-t.queue:
				batch = append(batch, o)
				urgent = urgent || o.kind != opUsage
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

// drainOnClose writes everything still queued, batch by batch.
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
		if len(batch) == 0 || !t.process(batch) {
			return
		}
	}
}

// closing returns Close's context once Close was called, else nil.
func (t *Tracker) closing() context.Context {
	if p := t.closeCx.Load(); p != nil {
		return *p
	}
	return nil
}

// process commits one batch, retrying with backoff until it lands. It gives
// up only when Close's context ends, and reports whether the batch landed.
func (t *Tracker) process(batch []*op) bool {
	events := make([]Usage, 0, len(batch))
	for _, o := range batch {
		if o.kind == opUsage {
			events = append(events, o.ev)
			for _, c := range o.contribs {
				c.c.BeginCommit()
			}
		}
	}
	var (
		inserted []bool
		deltas   []windowDelta
		failed   = make(map[*op]bool) // waiters already told of an error
	)
	backoff := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx := context.Background()
		err := t.store.Update(ctx, func(tx Tx) error {
			t.w.checked = false
			now := t.now()
			var err error
			if inserted, deltas, err = t.applyUsage(ctx, tx, events, now); err != nil {
				return err
			}
			for _, o := range batch {
				if o.kind == opTx && !failed[o] {
					if err := o.run(ctx, tx, now); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err == nil {
			break
		}
		t.stats.failures.Add(1)
		t.w.setErr(err)
		if t.cfg.OnError != nil {
			t.cfg.OnError(err)
		}
		if attempt >= t.cfg.FlushFailures {
			// Tell waiters; usage stays in the batch and is retried, but a
			// reservation whose caller saw an error must not happen later.
			for _, o := range batch {
				if failed[o] || o.kind == opUsage && o.done == nil {
					continue
				}
				failed[o] = true
				if o.kind == opTx {
					o.after(err)
				} else {
					o.done <- opResult{err: err}
				}
			}
		}
		if cx := t.closing(); cx != nil && cx.Err() != nil {
			t.giveUp(batch, len(events))
			return false
		}
		t.stats.retries.Add(1)
		if !t.sleep(backoff) {
			t.giveUp(batch, len(events))
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	t.settle(batch, inserted, deltas, failed)
	return true
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

func (t *Tracker) giveUp(batch []*op, events int) {
	t.w.unwritten.Add(int64(events))
	for _, o := range batch {
		for _, c := range o.contribs {
			c.c.EndCommit(c.delta, 0, false)
		}
	}
}

// settle moves a committed batch from pending to committed in the cache and
// answers the waiters.
func (t *Tracker) settle(batch []*op, inserted []bool, deltas []windowDelta, told map[*op]bool) {
	applied := make(map[cache.Key]int64, len(deltas))
	for _, d := range deltas {
		applied[d.key] = d.delta
	}
	seen := make(map[*cache.Counter]bool)
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
		}
		for _, c := range o.contribs {
			a := int64(0)
			if !seen[c.c] {
				seen[c.c] = true
				a = applied[c.key]
				delete(applied, c.key)
			}
			c.c.EndCommit(c.delta, a, true)
			t.counters.Unpin(c.key, c.c)
		}
		if o.done != nil && !told[o] {
			o.done <- opResult{duplicate: dup}
		}
	}
	// Windows this process had no pending delta for (a limit it had not
	// cached when recording): re-read them rather than guess.
	for k := range applied {
		if c := t.counters.Peek(k); c != nil && !seen[c] {
			c.Invalidate()
		}
	}
	t.stats.written.Add(written)
	t.stats.duplicates.Add(dups)
	t.stats.batches.Add(1)
	t.stats.sinceFlushWritten += asyncWritten
	t.stats.sinceFlushDup += asyncDups
	for _, o := range batch {
		switch {
		case told[o]:
		case o.kind == opFlush:
			o.done <- opResult{flush: FlushResult{Written: t.stats.sinceFlushWritten, Duplicates: t.stats.sinceFlushDup}}
			t.stats.sinceFlushWritten, t.stats.sinceFlushDup = 0, 0
		case o.kind == opTx:
			o.after(nil)
		}
	}
}
