package budget

import (
	"context"
	"slices"
	"time"
)

// The writer's look after its leases: every leaseTick (a tick op), at
// every Flush and when closing. It settles carved reservations past their
// TTL, gives back the room of idle leases and ends those idle for
// leaseEnd, renews the ones about to expire, and retires every lease when
// limit definitions change. Only the leases that may need a write are
// locked and read (attention).

// maintained reports whether this batch looks after the leases: on a tick,
// a flush, or when the last look is leaseTick old.
func (b *batch) maintained() bool {
	if !b.t.leasesOn() {
		return false
	}
	for _, o := range b.ops {
		if o.kind == opLeaseClose {
			b.closing = true
		}
		if o.kind == opLeaseTick || o.kind == opFlush || o.kind == opLeaseClose {
			return true
		}
	}
	return b.now.UnixNano()-b.t.w.leaseLook >= int64(leaseTick)
}

// maintainIDs picks the leases this look may change (see attention) and
// appends their rows, with those of the leases that expired carved
// reservations charge.
func (b *batch) maintainIDs(ids []string) []string {
	b.expireCarved()
	b.maint = b.maint[:0]
	for _, l := range b.t.leases.all() {
		if b.attention(l) {
			b.maint = append(b.maint, l)
			ids = leaseIDs(ids, l)
		}
	}
	for _, lr := range b.t.w.leaseCharges {
		ids = leaseIDs(ids, lr.lease)
	}
	return ids
}

// attention reports whether l may need a write in this look: it is dead,
// idle with room to give back or nothing left to hold, past its windows,
// due for renewal, or has room taken back not yet written.
func (b *batch) attention(l *lease) bool {
	now := b.now.UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	idle := now - l.lastUse.Load()
	free := slices.ContainsFunc(l.free, func(v int64) bool { return v > 0 })
	return b.closing || l.dead || now >= l.until || idle >= int64(LeaseIdle) && free ||
		idle >= int64(leaseEnd) && l.inflight == 0 ||
		l.expires.Sub(b.now) < l.ttl/2 || slices.ContainsFunc(l.giving, func(v int64) bool { return v != 0 })
}

// needMaintain needs the limits of the leases this look may change and the
// windows the charges of expired carved reservations count in.
func (b *batch) needMaintain(ctx context.Context, tx Tx, n *needs) error {
	for _, l := range b.maint {
		needLease(l, n)
	}
	for _, lr := range b.t.w.leaseCharges {
		needLease(lr.lease, n)
	}
	for _, lr := range b.t.w.leaseCharges {
		r := &lr.r
		who := Who{Key: r.Key, Team: r.Team, Org: r.Org, User: r.User}
		if err := b.needEvent(ctx, tx, n, &who, r.Provider, r.Model, r.At); err != nil {
			return err
		}
	}
	return nil
}

// expireCarved settles by expiry the carved reservations past their TTL:
// an ExpireRelease one gives its room back to its lease, an ExpireCharge
// one is queued to be charged its estimate (leaseCharges). Each stays
// known by id, so a late commit still records its usage.
func (b *batch) expireCarved() {
	now := b.now
	lt := &b.t.leases
	for i := range lt.shards {
		s := &lt.shards[i]
		s.mu.Lock()
		for id, lr := range s.m {
			if lr.expired {
				if now.UnixNano()-lr.exp > int64(b.t.cfg.SettledRetention) {
					delete(s.m, id)
				}
				continue
			}
			if now.UnixNano() < lr.exp && !b.closing {
				continue
			}
			lr.expired = true
			l := lr.lease
			l.mu.Lock()
			l.inflight--
			if lr.r.OnExpiry != ExpireCharge {
				for j := range l.limits {
					l.free[j] += lr.amounts[j]
				}
			}
			l.mu.Unlock()
			if lr.r.OnExpiry == ExpireCharge {
				b.t.w.leaseCharges = append(b.t.w.leaseCharges, lr)
			}
		}
		s.mu.Unlock()
	}
}

// decideMaintain charges the expired carved reservations, gives back the
// free room of idle and dead leases, ends the leases left with nothing,
// and renews those whose expiry comes within half their TTL.
func (b *batch) decideMaintain(ctx context.Context, tx Tx) error {
	charge := &op{kind: opLeaseCommit}
	for _, lr := range b.t.w.leaseCharges {
		if !b.leaseLive(lr.lease) {
			// Its lease was recovered while this process stalled: if it was
			// charged whole, that charge covered its estimate (its room never
			// left the hold, no shrink of it landed).
			whole, err := b.chargedWhole(ctx, tx, lr.lease)
			if err != nil {
				return err
			}
			if whole {
				continue
			}
		}
		ev := chargedUsage(ReservationRow{ID: lr.r.ID, Key: lr.r.Key, Team: lr.r.Team, Org: lr.r.Org, User: lr.r.User,
			Provider: lr.r.Provider, Model: lr.r.Model, Estimate: lr.r.Estimate, At: lr.r.At})
		ev.Placed = true
		if !b.stored(ev) {
			if err := b.event(ctx, tx, ev, charge); err != nil {
				return err
			}
		}
		b.shrink(lr)
	}
	now := b.now.UnixNano()
	for _, l := range b.maint {
		if !b.leaseLive(l) {
			continue
		}
		p := b.plan(l)
		l.mu.Lock()
		idleFor := now - l.lastUse.Load()
		idle := b.closing || l.dead || idleFor >= int64(LeaseIdle) || now >= l.until
		// The room goes back at once; the row (holding nothing) stays for
		// the route's next request to grow, until idle for leaseEnd.
		ended := b.closing || l.dead || idleFor >= int64(leaseEnd) || now >= l.until
		inflight := l.inflight
		if b.closing || now >= l.until {
			l.dead = true
		}
		l.mu.Unlock()
		if idle {
			b.takeFree(l, p)
		}
		if ended && inflight == 0 && !slices.ContainsFunc(p.size, func(v int64) bool { return v > 0 }) {
			l.mu.Lock()
			if l.inflight == 0 { // none carved since: none can be now
				l.dead, p.release = true, true
			}
			l.mu.Unlock()
			if p.release {
				continue
			}
		}
		if l.expires.Sub(b.now) < l.ttl/2 {
			p.exp = b.now.Add(l.ttl)
			b.syncLease(l, p)
		}
	}
	return nil
}

// retireLeases stops every lease carving: the limits they were decided on
// changed. The writer's next look gives their free room back.
func (t *Tracker) retireLeases() {
	for _, l := range t.leases.all() {
		l.mu.Lock()
		l.dead = true
		l.mu.Unlock()
	}
	t.w.leaseLook = 0
}

// leaseTicker makes the writer look after its leases every leaseTick
// while it has any, so idle room goes back even when nothing else is
// written.
func (t *Tracker) leaseTicker() {
	defer t.sweepWG.Done()
	tk := time.NewTicker(leaseTick)
	defer tk.Stop()
	for {
		select {
		case <-t.stop:
			<-t.done // the writer's last batch ended every lease it could
			t.leases.journals.close()
			return
		case <-tk.C:
			if len(t.leases.all()) == 0 {
				continue
			}
			_ = t.enqueue(context.Background(), &op{kind: opLeaseTick, out: new(opResult)})
		}
	}
}

// routeWarm reports whether a route with no lease asked the store within
// LeaseIdle before: only then is it worth a lease (a row, a journal and a
// give-back); a route that asks less often than that keeps the store's
// path, as without leases.
func (w *writerState) routeWarm(k routeKey, at time.Time) bool {
	now := at.UnixNano()
	if last, ok := w.routeSeen[k]; ok && now-last < int64(LeaseIdle) && now >= last {
		delete(w.routeSeen, k)
		return true
	}
	if w.routeSeen == nil || len(w.routeSeen) >= maxRouteSeen {
		w.routeSeen = make(map[routeKey]int64)
	}
	w.routeSeen[k] = now
	return false
}

// maxRouteSeen bounds the routes remembered by routeWarm.
const maxRouteSeen = 100_000
