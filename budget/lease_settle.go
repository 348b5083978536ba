package budget

import (
	"context"
	"fmt"
	"time"
)

// Settling carved reservations: Commit, Release and Renew of a
// reservation carved from a lease, answered in memory (its journal record
// written first), and the writer's side of a leased commit: its event and
// its lease's shrink, in one transaction, or only its excess when another
// process recovered the lease meanwhile.

// commitLeased settles a carved reservation in memory and queues its event
// (and the lease's shrink) for the writer. ok is false when id is not one
// of this process's carved reservations.
func (t *Tracker) commitLeased(ctx context.Context, id string, actual Usage) (Settlement, bool, error) {
	lr, settled := t.leases.take(id, ReservationCommitted)
	if lr == nil {
		if settled != "" {
			return Settlement{}, true, settledError(id, settled)
		}
		return Settlement{}, false, nil
	}
	r := &lr.r
	now := t.now()
	out := Settlement{RequestID: id, Expired: lr.expired || now.UnixNano() >= lr.exp}
	ev := actual
	ev.Key, ev.Provider, ev.Model, ev.At = r.Key, r.Provider, r.Model, r.At
	ev.Team, ev.Org, ev.User, ev.Placed = r.Team, r.Org, r.User, true
	o := &op{kind: opLeaseCommit, ev: ev, opArgs: &opArgs{id: id}, out: new(opResult), leased: lr}
	switch {
	case lr.expired && r.OnExpiry == ExpireCharge:
		// Its room was settled by expiry and charged its estimate: only the
		// excess is written.
		out.Charged = true
		o.ev = lateUsage(ev, r.Estimate)
		if o.ev.Billable() == 0 {
			return out, true, nil
		}
		out.LateRequestID = o.ev.RequestID
		o.leased = nil
	case lr.expired:
		// Released by expiry: its room went back to its lease's free part,
		// and the event is written whole, unless the lease was charged
		// whole meanwhile (its owner stalled past its TTL) with that room
		// still in its hold: o.leased stays for decideLeaseCommit to tell.
	default:
		// Journaled before it is answered: a crash from here on still
		// charges the actual usage. If its generation is sealed (this
		// write or an earlier one failed), the store makes it durable
		// instead: the event is written before Commit returns, and
		// recovery, finding it in the history, charges it no more.
		if err := journalCommit(lr.lease.j, id, &actual); err != nil {
			t.reportErr(err)
			o.done = make(chan opResult, 1)
		}
		l := lr.lease
		l.mu.Lock()
		l.inflight--
		l.mu.Unlock()
	}
	if err := t.enqueue(ctx, o); err != nil {
		return Settlement{}, true, err
	}
	if o.done != nil {
		if r := t.wait(ctx, o); r.err != nil {
			return Settlement{}, true, r.err
		}
	}
	return out, true, nil
}

// releaseLeased gives a carved reservation's room back to its lease.
func (t *Tracker) releaseLeased(id string) (bool, error) {
	lr, settled := t.leases.take(id, ReservationReleased)
	if lr == nil {
		if settled != "" {
			return true, settledError(id, settled)
		}
		return false, nil
	}
	if lr.expired {
		return true, nil
	}
	if err := journalRelease(lr.lease.j, id); err != nil {
		t.reportErr(err)
		if lr.r.OnExpiry == ExpireCharge {
			// Not journaled: a crash would charge its estimate. The caller
			// is told; unless committed, it is settled by its expiry
			// (charged). An ExpireRelease one needs no record: recovery
			// charges such a reservation nothing, released or not.
			t.leases.put(id, lr)
			return true, fmt.Errorf("%w: %w", ErrReleaseNotRecorded, err)
		}
	}
	// A dead lease's free room is the writer's to give back.
	l := lr.lease
	l.mu.Lock()
	l.inflight--
	for i := range l.limits {
		l.free[i] += lr.amounts[i]
	}
	l.mu.Unlock()
	return true, nil
}

// renewLeased moves a carved reservation's expiry; its lease is renewed by
// the writer while it has live reservations.
func (t *Tracker) renewLeased(id string, ttl time.Duration) (time.Time, bool, error) {
	s := t.leases.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	lr := s.m[id]
	if lr == nil {
		if s.done[id] != "" {
			return time.Time{}, true, ErrLeaseLost
		}
		return time.Time{}, false, nil
	}
	now := t.now()
	if lr.expired || now.UnixNano() >= lr.exp {
		return time.Time{}, true, ErrLeaseLost
	}
	exp := now.Add(ttl)
	lr.exp = exp.UnixNano()
	return exp, true, nil
}

// needLeaseCommit needs the windows the event counts in and the lease's
// limits.
func (b *batch) needLeaseCommit(ctx context.Context, tx Tx, o *op, n *needs) error {
	if o.leased != nil {
		needLease(o.leased.lease, n)
	}
	who := o.ev.Who()
	return b.needEvent(ctx, tx, n, &who, o.ev.Provider, o.ev.Model, o.ev.At)
}

// decideLeaseCommit writes the event and takes the reservation's room off
// its lease's hold, in this transaction.
func (b *batch) decideLeaseCommit(ctx context.Context, tx Tx, o *op) error {
	if o.leased != nil && b.leaseLive(o.leased.lease) {
		if !b.stored(o.ev) {
			if err := b.event(ctx, tx, o.ev, o); err != nil {
				return err
			}
		}
		if !o.leased.expired { // an expired one's room is back in the lease's free part
			b.shrink(o.leased)
		}
		return nil
	}
	if o.leased != nil && !b.stored(o.ev) {
		// Recovered by a process that could not read the journal: the
		// whole lease was charged, this reservation within it at its
		// estimate; only the excess is this commit's.
		whole, err := b.chargedWhole(ctx, tx, o.leased.lease)
		if err != nil {
			return err
		}
		if whole && b.coveredByCharge(o.leased) {
			late := lateUsage(o.ev, o.leased.r.Estimate)
			if late.Billable() == 0 || b.stored(late) {
				return nil
			}
			return b.event(ctx, tx, late, o)
		}
	}
	if !b.stored(o.ev) {
		return b.event(ctx, tx, o.ev, o)
	}
	if o.leased == nil {
		return nil
	}
	// Its lease was recovered by another process while this one stalled,
	// and the reservation charged from the journal: its estimate if it was
	// unsettled then, its actual usage if this commit was journaled first.
	// Only what the actual exceeds that charge by is recorded, as
	// <id>:late (contract section 5).
	charged, err := storedEvent(ctx, tx, &o.ev)
	if err != nil || charged == nil {
		return err
	}
	late := lateUsage(o.ev, Estimate{Input: charged.Input, Output: charged.Output + charged.Reasoning})
	if late.Billable() == 0 || b.stored(late) {
		return nil
	}
	return b.event(ctx, tx, late, o)
}

// chargedWhole reports whether lost lease l was recovered without its
// journal (unjournaledEvents): its first charge event is in the history.
// Only a whole charge is remembered: a lease this process found past its
// TTL may not be recovered yet, and a later commit must find the charge
// once it is.
func (b *batch) chargedWhole(ctx context.Context, tx Tx, l *lease) (bool, error) {
	if !l.whole {
		ev, err := storedEvent(ctx, tx, &Usage{Key: l.route.key, RequestID: l.id + ":0", At: l.at})
		if err != nil || ev == nil {
			return false, err
		}
		l.whole = true
	}
	return true, nil
}

// coveredByCharge reports whether lr's estimate was within the hold its
// lost lease was charged whole for. A live carve's was: its room was in
// the hold as last written. One released by expiry gave its room back to
// the lease's free part, which stays in the hold until a give-back lands
// and may be carved again: it is covered only by free room no other
// commit took, taken here once (free first, then room taken back but
// never written), so that one charge covers no two estimates. Decided
// once per carve: a retried batch finds the same answer.
func (b *batch) coveredByCharge(lr *leasedRes) bool {
	if !lr.expired {
		return true
	}
	if lr.cover == 0 {
		lr.cover = 2
		l := lr.lease
		l.mu.Lock()
		ok := true
		for i := range l.limits {
			ok = ok && l.free[i]+l.giving[i] >= lr.amounts[i]
		}
		if ok {
			for i := range l.limits {
				f := min(l.free[i], lr.amounts[i])
				l.free[i] -= f
				l.giving[i] -= lr.amounts[i] - f
			}
			lr.cover = 1
		}
		l.mu.Unlock()
	}
	return lr.cover == 1
}

// storedEvent is the history's event with ev's key and request id at
// ev's instant, or nil.
func storedEvent(ctx context.Context, tx Tx, ev *Usage) (*Usage, error) {
	h, err := historyTx(tx)
	if err != nil {
		return nil, err
	}
	var found *Usage
	err = h.Events(ctx, ev.At, ev.At.Add(1), ev.Key, func(u Usage) error {
		if u.RequestID == ev.RequestID {
			found = &u
		}
		return nil
	})
	return found, err
}

// shrink takes a settled carve's room off its lease's hold.
func (b *batch) shrink(lr *leasedRes) {
	l := lr.lease
	if !b.leaseLive(l) {
		return
	}
	p := b.plan(l)
	for i := range l.limits {
		p.size[i] -= lr.amounts[i]
	}
	b.syncLease(l, p)
}
