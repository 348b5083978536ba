package budget

import (
	"context"
	"time"
)

// The settlements in two steps: queued, then waited for. A caller that
// must answer someone between the two (the proxy, which sends a response
// before its commit is written) queues first: everything this Tracker is
// asked after the queueing, a Reserve, a Check or a Flush, is decided
// after the settlement, so a client's next request is admitted against
// its last one's actual usage, not its held estimate. The wait gives the
// answer the one-step method gives; calling it is optional (the operation
// is written either way, and never given up once queued).

// CommitQueued is Commit up to the queueing: it returns once the commit is
// queued (a carved reservation's is settled in memory and journaled), and
// wait waits for its write and returns what Commit returns.
func (t *Tracker) CommitQueued(ctx context.Context, id string, actual Usage) (wait func(context.Context) (Settlement, error), err error) {
	o, mem, s, err := t.commitQueued(ctx, id, actual)
	switch {
	case mem:
		return func(context.Context) (Settlement, error) { return s, err }, nil
	case err != nil:
		return nil, err
	}
	return func(ctx context.Context) (Settlement, error) {
		r := t.wait(ctx, o)
		return r.settlement, r.err
	}, nil
}

// commitQueued is CommitQueued without the closure, which the one-step
// Commit does not need (a leased pair allocates nothing it can avoid): mem
// says the commit was settled in memory, s and err its answer; otherwise
// err is a failure to queue, or o the queued operation.
func (t *Tracker) commitQueued(ctx context.Context, id string, actual Usage) (o *op, mem bool, s Settlement, err error) {
	actual.Key = "commit" // validated below; the reservation's key is used
	actual.RequestID = id
	if _, err := actual.Normalize(time.Unix(0, 0)); err != nil {
		return nil, false, Settlement{}, err
	}
	if s, ok, err := t.commitLeased(ctx, id, actual); ok {
		return nil, true, s, err
	}
	o = newOp(opCommit, &opArgs{id: id})
	o.ev = actual
	if err := t.enqueue(ctx, o); err != nil {
		return nil, false, Settlement{}, err
	}
	return o, false, Settlement{}, nil
}

// ReleaseQueued is Release up to the queueing (a carved reservation's room
// goes back to its lease at once); wait returns what Release returns.
func (t *Tracker) ReleaseQueued(ctx context.Context, id string) (wait func(context.Context) error, err error) {
	o, mem, err := t.releaseQueued(ctx, id)
	switch {
	case mem && err == nil:
		return noWait, nil
	case mem:
		return func(context.Context) error { return err }, nil
	case err != nil:
		return nil, err
	}
	return func(ctx context.Context) error { return t.wait(ctx, o).err }, nil
}

// releaseQueued is ReleaseQueued without the closure, as commitQueued.
func (t *Tracker) releaseQueued(ctx context.Context, id string) (o *op, mem bool, err error) {
	if ok, err := t.releaseLeased(id); ok {
		return nil, true, err
	}
	o = newOp(opRelease, &opArgs{id: id})
	if err := t.enqueue(ctx, o); err != nil {
		return nil, false, err
	}
	return o, false, nil
}

// RecordQueued is Record up to the queueing: the event counts in this
// process's checks from its return; wait returns what Record returns
// (at once, but in Durable mode, where it waits for the commit holding
// the event).
func (t *Tracker) RecordQueued(ctx context.Context, u Usage) (wait func(context.Context) error, err error) {
	var now time.Time
	var clock int64 // read only for an event without its instant
	if u.At.IsZero() {
		now = t.now() // the clock costs as much as the rest of Record
		clock = now.UnixNano()
	}
	if u, err = u.Normalize(now); err != nil {
		return nil, err
	}
	if err := t.checkHorizon(&u); err != nil {
		return nil, err
	}
	o := &op{kind: opUsage, ev: u}
	if t.cfg.Durable {
		o.done = make(chan opResult, 1)
	}
	if err := t.enqueueAt(ctx, o, clock); err != nil {
		return nil, err
	}
	if o.done == nil {
		return noWait, nil
	}
	return func(ctx context.Context) error { return t.wait(ctx, o).err }, nil
}

func noWait(context.Context) error { return nil }
