package budget

import (
	"errors"
	"fmt"
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
			b.linkLease(l)
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

// linkLease makes new lease l's journal name before its row is written:
// a process killed once the row is committed leaves the name for
// recovery to read (an empty journal charges nothing), where a name
// linked after the commit could be missing and the lease charged whole.
// A try that does not land removes its names (unlinkLeases); one whose
// outcome is unknown leaves them to the stale sweep, which removes a name
// that stays without a row for staleRecheck.
func (b *batch) linkLease(l *lease) {
	if b.t.cfg.LeaseJournal == "" || l.j != nil || l.jerr != nil {
		return
	}
	l.j, l.jerr = b.t.leases.journals.link(l.id)
	if l.jerr == nil {
		b.linked = append(b.linked, l.id)
	}
}

// unlinkLeases removes the journal names this try linked: it did not
// land, so their rows do not exist.
func (b *batch) unlinkLeases() {
	for _, id := range b.linked {
		removeJournal(b.t.cfg.LeaseJournal, id)
	}
	b.linked = nil
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
		l.mu.Unlock()
		var jerr error
		if p.create && l.jerr != nil {
			// Without a journal it serves nothing: its carves are refused
			// and its room goes back at the next look.
			jerr = l.jerr
			l.mu.Lock()
			l.dead = true
			l.mu.Unlock()
		}
		b.journalCarves(l, p, jerr)
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
	b.reportUnjournaled()
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

// journalCarves journals the batch's carves from l (one sync for them all,
// Durable) and makes them known by id. A carve that could not be journaled
// (its lease has no journal, or a failed write sealed its generation) is
// not admitted from the lease: its caller is told to take the store's
// path (errUnjournaled), its room goes back to the lease's free part, and
// the lease carves no more (the writer gives its room back).
func (b *batch) journalCarves(l *lease, p *leasePlan, err error) {
	done := p.carves[:0]
	for _, lr := range p.carves {
		if err == nil {
			err = journalAdmit(l.j, lr, true)
		}
		if err != nil {
			b.refuseCarve(l, lr, err)
			continue
		}
		done = append(done, lr)
	}
	if len(done) > 0 {
		if err := l.j.sync(); err != nil { // Durable: one sync for the batch's carves
			for _, lr := range done {
				b.refuseCarve(l, lr, err)
			}
			done = done[:0]
		}
	}
	if err != nil {
		b.t.reportErr(err)
	}
	l.mu.Lock()
	l.inflight += len(done)
	l.mu.Unlock()
	for _, lr := range done {
		lr.op = nil
		b.t.leases.put(lr.r.ID, lr)
	}
}

// errUnjournaled refuses a carve whose admission could not be journaled:
// its caller (ReserveWith) takes the store's path instead.
var errUnjournaled = errors.New("budget: lease journal failed")

// refuseCarve answers lr's caller errUnjournaled instead of the
// reservation.
func (b *batch) refuseCarve(l *lease, lr *leasedRes, err error) {
	l.mu.Lock()
	for i := range l.limits {
		l.free[i] += lr.amounts[i]
	}
	l.dead = true
	l.mu.Unlock()
	if o := lr.op; o != nil {
		o.out.res, o.out.leased, o.out.err = nil, nil, fmt.Errorf("%w: %v", errUnjournaled, err)
		lr.op = nil
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
