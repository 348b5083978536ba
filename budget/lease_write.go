package budget

import (
	"slices"
	"strings"
	"time"
)

// A batch's lease changes written and, once it landed, kept: the rows and
// holds it writes (writeLeases), what the tracker keeps of them
// (landedLeases, cacheLeases), and the table of leases by route.
// writeLeases adds every planned lease change to the write set: a new row,
// a settled one, or the row's holds resized and its expiry moved.
func (b *batch) writeLeases() {
	for _, l := range b.leaseOrder {
		p := b.leases[l]
		exp := l.expires
		if !p.exp.IsZero() {
			exp = p.exp
		}
		holds := l.holds(p.size, exp)
		switch {
		case p.create && p.release:
			continue
		case p.create:
			row := ReservationRow{ID: l.id, Key: l.route.key, Team: l.who.Team, Org: l.who.Org, User: l.route.user,
				Provider: l.route.provider, Model: l.route.model, At: b.now, ExpiresAt: exp, State: ReservationLive,
				OnExpiry: ExpireRelease, Holds: holds}
			b.ws.NewReservations = append(b.ws.NewReservations, row)
			b.t.w.mem.res[l.id] = &row
		case p.release:
			r := b.t.w.mem.res[l.id]
			if r != nil {
				b.planSettle(r, ReservationReleased)
			}
		default:
			b.ws.Renewals = append(b.ws.Renewals, Renewal{ID: l.id, ExpiresAt: exp, Holds: holds})
			if r := b.t.w.mem.res[l.id]; r != nil {
				r.ExpiresAt = exp
				r.Holds = holds
			}
		}
	}
}

// holds are l's holds at sizes, expiring at exp.
func (l *lease) holds(size []int64, exp time.Time) []Hold {
	hs := make([]Hold, len(l.limits))
	for i := range l.limits {
		ll := &l.limits[i]
		hs[i] = Hold{ReservationID: l.id, LimitID: ll.id, Subject: ll.subject, WindowStart: time.Unix(0, ll.start).UTC(),
			Amount: size[i], ExpiresAt: exp}
	}
	return hs
}

// landedLeases keeps what the batch did to its leases, before its callers
// are answered: sizes stored, grown room free to carve, carved
// reservations known by id, new leases serving, ended ones gone.
func (b *batch) landedLeases() {
	lt := &b.t.leases
	for _, l := range b.leaseOrder {
		p := b.leases[l]
		if p.create && p.release {
			continue
		}
		copy(l.stored, p.size)
		clear(l.giving)
		if !p.exp.IsZero() {
			l.expires = p.exp
		}
		l.mu.Lock()
		for i := range l.limits {
			l.free[i] += p.grow[i] // a dead lease's is given back by the next look
		}
		l.inflight += len(p.carves)
		l.mu.Unlock()
		if p.create && b.t.cfg.LeaseJournal != "" {
			f, err := b.t.leases.journals.link(l.id)
			if err != nil {
				// Without a journal it serves nothing more; what this batch
				// admitted is answered (its room is held) but a crash
				// before its commit would not charge it.
				b.t.reportErr(err)
				l.mu.Lock()
				l.dead = true
				l.mu.Unlock()
			}
			l.j = f
		}
		for _, lr := range p.carves {
			if err := journalAdmit(l.j, lr, true); err != nil {
				b.t.reportErr(err)
			}
			lt.put(lr.r.ID, lr)
		}
		if len(p.carves) > 0 {
			if err := l.j.sync(); err != nil { // Durable: one sync for the batch's carves
				b.t.reportErr(err)
			}
		}
		l.lastUse.Store(b.now.UnixNano())
		switch {
		case p.release:
			l.mu.Lock()
			l.dead = true
			l.mu.Unlock()
			l.created = false
			lt.drop(l)
			b.t.endJournal(l)
		case p.create:
			l.created, l.at = true, b.now
			lt.add(l)
		}
	}
	b.t.w.leaseCharges = b.t.w.leaseCharges[:0]
	for i, o := range b.evOps {
		if o.kind == opLeaseCommit && b.inserted[i] && strings.HasSuffix(b.ws.Events[i].Usage.RequestID, LateSuffix) {
			lt.late.Add(1)
		}
	}
	for _, id := range b.recoveredLeases {
		removeJournal(b.t.cfg.LeaseJournal, id)
	}
	if len(b.recoveredLeases) > 0 {
		// Their owner may be gone: its generation's own name with it.
		if err := sweepJournals(b.t.cfg.LeaseJournal, b.t.leases.journals.own()); err != nil {
			b.t.reportErr(err)
		}
	}
	if b.looked {
		b.t.w.leaseLook = b.now.UnixNano()
	}
}

// cacheLeases moves the landed lease holds into the cache.
func (t *Tracker) cacheLeases(b *batch) {
	for _, l := range b.leaseOrder {
		p := b.leases[l]
		if p.create && p.release {
			continue
		}
		exp := l.expires
		hs := l.holds(p.size, exp)
		t.cacheHolds(l.id, hs, !p.release)
	}
}

// all lists every lease with a row, serving or not.
func (lt *leaseTable) all() []*lease {
	lt.mu.RLock()
	defer lt.mu.RUnlock()
	out := make([]*lease, 0, len(lt.routes)+len(lt.retired))
	for _, l := range lt.routes {
		out = append(out, l)
	}
	return append(out, lt.retired...)
}

// add makes l its route's lease; the lease it replaces stays listed until
// its row ends.
func (lt *leaseTable) add(l *lease) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if old := lt.routes[l.route]; old != nil && old != l {
		lt.retired = append(lt.retired, old)
	}
	lt.routes[l.route] = l
}

// drop forgets l.
func (lt *leaseTable) drop(l *lease) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.routes[l.route] == l {
		delete(lt.routes, l.route)
	}
	lt.retired = slices.DeleteFunc(lt.retired, func(x *lease) bool { return x == l })
}
