package budget

import (
	"context"
	"slices"
	"strings"
	"time"
)

// The writer's side of leases: what a batch plans for them. Every change
// to a lease's hold is written in the transaction that carries its cause
// (a commit's event, a refill's decision, a give-back), so used + holds
// never exceeds a limit between transactions. Nothing the plan does to a
// lease is kept unless the batch lands (landedLeases); room taken back
// from a lease's free part before the write stays taken (lease.giving).

// leasePlan is what one try of a batch does to one lease.
type leasePlan struct {
	size    []int64 // the hold amounts it writes
	grow    []int64 // room added to free once it lands
	exp     time.Time
	create  bool // its row is new in this batch
	release bool // its row is settled: the lease is over
	carves  []*leasedRes
}

// plan is l's plan in this try, started from what the store holds less
// what was taken back.
func (b *batch) plan(l *lease) *leasePlan {
	if p := b.leases[l]; p != nil {
		return p
	}
	if b.leases == nil {
		b.leases = make(map[*lease]*leasePlan)
	}
	p := &leasePlan{size: make([]int64, len(l.limits)), grow: make([]int64, len(l.limits))}
	for i := range p.size {
		p.size[i] = l.stored[i] - l.giving[i]
	}
	b.leases[l] = p
	b.leaseOrder = append(b.leaseOrder, l)
	return p
}

// leaseRow is l's row as the writer knows it, if it is still l's to
// change: live and unexpired at the batch's instant. A lease found
// otherwise was recovered by another process (this one stalled past its
// TTL): it is dead from now on, and its reservations' commits write their
// events alone.
func (b *batch) leaseLive(l *lease) bool {
	if !l.created {
		p := b.leases[l]
		return p != nil && p.create // new in this batch
	}
	r := b.t.w.mem.res[l.id]
	if r != nil && r.State == ReservationLive && b.now.Before(r.ExpiresAt) && !b.missing[l.id] {
		return true
	}
	b.loseLease(l)
	return false
}

func (b *batch) loseLease(l *lease) {
	l.mu.Lock()
	wasDead := l.dead
	l.dead = true
	l.mu.Unlock()
	l.created = false
	b.t.leases.drop(l)
	if !wasDead {
		b.t.leases.lost.Add(1)
	}
	// Its recovery read (or will read) the journal: the records this
	// process still appends to it change nothing.
	l.closeJournal("", false)
}

// closeJournal closes l's journal, removing it when its row ended here
// (every reservation of it settled and written).
func (l *lease) closeJournal(dir string, remove bool) {
	l.mu.Lock()
	f := l.j
	l.mu.Unlock()
	if f == nil {
		return
	}
	if remove {
		_ = f.Close()
		removeJournal(dir, l.id)
	}
}

// takeFree moves l's free room into its plan's give-back.
func (b *batch) takeFree(l *lease, p *leasePlan) {
	l.mu.Lock()
	for i := range l.limits {
		l.giving[i] += l.free[i]
		p.size[i] -= l.free[i]
		l.free[i] = 0
	}
	l.mu.Unlock()
	b.syncLease(l, p)
}

// syncLease sets l's holds in the writer's windows to its plan.
func (b *batch) syncLease(l *lease, p *leasePlan) {
	m := &b.t.w.mem
	for i := range l.limits {
		w := m.windows[l.limits[i].key]
		if w == nil {
			continue
		}
		exp := l.expires
		if !p.exp.IsZero() {
			exp = p.exp
		}
		j := slices.IndexFunc(w.holds, func(h memHold) bool { return h.id == l.id })
		if j < 0 {
			w.holds = append(w.holds, memHold{id: l.id, amount: p.size[i], expires: exp.UnixNano()})
			continue
		}
		w.holds[j].amount = p.size[i]
		w.holds[j].expires = exp.UnixNano()
	}
}

// leaseIDs appends the rows of the leases that have one, to be locked and
// read with the batch's reservations.
func leaseIDs(ids []string, ls ...*lease) []string {
	for _, l := range ls {
		if l != nil && l.created {
			ids = append(ids, l.id)
		}
	}
	return ids
}

// needLease locks the limits l holds on.
func needLease(l *lease, n *needs) {
	if l == nil {
		return
	}
	for i := range l.limits {
		n.limits[l.limits[i].id] = true
	}
}

// Leased commits.

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
		b.shrink(o.leased)
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
		if whole {
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
func (b *batch) chargedWhole(ctx context.Context, tx Tx, l *lease) (bool, error) {
	if l.whole == 0 {
		ev, err := storedEvent(ctx, tx, &Usage{Key: l.route.key, RequestID: l.id + ":0", At: l.at})
		if err != nil {
			return false, err
		}
		l.whole = 1
		if ev != nil {
			l.whole = 2
		}
	}
	return l.whole == 2, nil
}

// storedEvent is the history's event with ev's key and request id at
// ev's instant, or nil.
func storedEvent(ctx context.Context, tx Tx, ev *Usage) (*Usage, error) {
	var found *Usage
	err := tx.Events(ctx, ev.At, ev.At.Add(1), ev.Key, func(u Usage) error {
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

// Leases in reservations.

// leaseFor is the lease of o's route that the writer may change, or nil.
func (b *batch) leaseFor(o *op) *lease {
	if !o.lease {
		return nil
	}
	k := routeKey{o.req.Key, o.req.User, o.req.Provider, o.req.Model}
	if l := b.newLeases[k]; l != nil {
		return l
	}
	l := b.t.leases.route(k)
	if l == nil || !l.created {
		return nil
	}
	return l
}

// carveInBatch answers o from room this batch already added to its
// route's lease, if there is enough.
func (b *batch) carveInBatch(o *op, l *lease, at time.Time) bool {
	p := b.leases[l]
	if p == nil || p.release || at.UnixNano() < l.from || at.UnixNano() >= l.until {
		return false
	}
	for i := range l.limits {
		if o.req.Estimate.Amount(l.limits[i].metric) > p.grow[i] {
			return false
		}
	}
	lr := &leasedRes{lease: l}
	for i := range l.limits {
		lr.amounts[i] = o.req.Estimate.Amount(l.limits[i].metric)
		p.grow[i] -= lr.amounts[i]
	}
	b.answerCarve(o, l, p, lr, at)
	return true
}

func (b *batch) answerCarve(o *op, l *lease, p *leasePlan, lr *leasedRes, at time.Time) {
	if o.resID == "" {
		o.resID = NewReservationID(at)
	}
	b.t.fillLeased(lr, &o.req, l, at, o.ttl, o.policy, o.resID)
	p.carves = append(p.carves, lr)
	o.out.res = &lr.r
	o.out.leased = lr
}

// leaseable reports whether a request decided on statuses may be served
// by a lease: only limits whose holds add up (no concurrent limit, whose
// lease is one per reservation; no dollar limit, whose estimate depends on
// each request's price), at most maxLeaseLimits.
func leaseable(statuses []Status) bool {
	if len(statuses) == 0 || len(statuses) > maxLeaseLimits {
		return false
	}
	for i := range statuses {
		if m := statuses[i].Limit.Metric; m == MetricConcurrent || m == MetricUSD {
			return false
		}
	}
	return true
}

// grantLease serves an admitted request o from a lease on its route:
// grown, or new, by as many more estimates as demand asks and the room
// allows (at most half the room left, so other processes find some), or
// reports false when the room is too small for a lease: the request then
// holds its own reservation.
func (b *batch) grantLease(o *op, old *lease, statuses []Status, who *Who, at time.Time) bool {
	e := o.req.Estimate
	n := int64(-1) // estimates that fit on every limit, this one included
	for i := range statuses {
		st := &statuses[i]
		a := e.Amount(st.Limit.Metric)
		if a <= 0 {
			continue
		}
		room := st.Max - st.Used - st.Reserved
		if f := room / a; n < 0 || f < n {
			n = f
		}
	}
	if n < leaseMinRoom || old == nil && !b.t.w.routeWarm(routeKey{o.req.Key, o.req.User, o.req.Provider, o.req.Model}, at) {
		return false
	}
	// Sized to the demand: what the lease served since its last refill,
	// twice over, or the requests waiting in this batch.
	want := max(leaseStart, int64(len(b.ops)))
	if old != nil {
		old.mu.Lock()
		want = max(want, 2*old.served)
		old.served = 0
		old.mu.Unlock()
	}
	extra := min(want, n/2, leaseMaxEstimates)
	l := old
	if l == nil || !l.matches(statuses) {
		if l != nil {
			b.retire(l)
		}
		l = b.newLease(o, statuses, who, at)
	}
	p := b.plan(l)
	lr := &leasedRes{lease: l}
	for i := range l.limits {
		a := e.Amount(l.limits[i].metric)
		lr.amounts[i] = a
		p.size[i] += (1 + extra) * a
		p.grow[i] += extra * a
	}
	if p.exp.IsZero() || p.exp.Before(at.Add(l.ttl)) {
		p.exp = at.Add(l.ttl)
	}
	b.syncLease(l, p)
	b.answerCarve(o, l, p, lr, at)
	return true
}

// matches reports whether l holds on exactly the counters of statuses.
func (l *lease) matches(statuses []Status) bool {
	if len(l.limits) != len(statuses) {
		return false
	}
	for i := range statuses {
		ll, st := &l.limits[i], &statuses[i]
		if ll.id != st.Limit.ID || ll.subject != st.Limit.Subject || ll.start != st.WindowStart.UnixNano() {
			return false
		}
	}
	return true
}

// newLease plans a lease for o's route on the counters of statuses.
func (b *batch) newLease(o *op, statuses []Status, who *Who, at time.Time) *lease {
	l := &lease{id: newLeaseID(at), route: routeKey{o.req.Key, o.req.User, o.req.Provider, o.req.Model}, who: *who,
		ttl: max(o.ttl, 2*LeaseIdle), from: 0, until: 1<<63 - 1}
	for i := range statuses {
		st := &statuses[i]
		ll := leaseLimit{id: st.Limit.ID, subject: st.Limit.Subject, metric: st.Limit.Metric, start: st.WindowStart.UnixNano()}
		ll.key = windowKey(&st.Limit, st.WindowStart)
		l.limits = append(l.limits, ll)
		l.from = max(l.from, st.WindowStart.UnixNano())
		l.until = min(l.until, st.ResetAt.UnixNano())
	}
	k := len(l.limits)
	l.free, l.stored, l.giving = make([]int64, k), make([]int64, k), make([]int64, k)
	p := b.plan(l)
	p.create = true
	if b.newLeases == nil {
		b.newLeases = make(map[routeKey]*lease)
	}
	b.newLeases[l.route] = l
	return l
}

// retire stops l carving and plans its free room back; its row goes once
// its reservations are settled.
func (b *batch) retire(l *lease) {
	l.mu.Lock()
	l.dead = true
	l.mu.Unlock()
	b.takeFree(l, b.plan(l))
}

// Maintenance: idle give-back, renewal, expiry of carved reservations.

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
			f, err := openJournal(b.t.cfg.LeaseJournal, l.id)
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
			if err := journalAdmit(l.j, lr); err != nil {
				b.t.reportErr(err)
			}
			lt.put(lr.r.ID, lr)
		}
		l.lastUse.Store(b.now.UnixNano())
		switch {
		case p.release:
			l.mu.Lock()
			l.dead = true
			l.mu.Unlock()
			l.created = false
			lt.drop(l)
			l.closeJournal(b.t.cfg.LeaseJournal, true)
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
