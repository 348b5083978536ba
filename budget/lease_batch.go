package budget

import (
	"slices"
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
	// process still appends to it change nothing. It stays open for them.
}

// endJournal gives up l's journal: its row ended here, every reservation
// of it settled and written, so nothing will read it.
func (t *Tracker) endJournal(l *lease) {
	if l.j != nil {
		removeJournal(t.cfg.LeaseJournal, l.id)
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
		o.resID = newReservationID(at)
	}
	b.t.fillLeased(lr, &o.req, l, at, o.ttl, o.policy, o.resID)
	lr.op = o
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
	if n < leaseMinRoom || old == nil && !b.contended() && !b.t.w.routeWarm(routeKey{o.req.Key, o.req.User, o.req.Provider, o.req.Model}, at) {
		return false
	}
	if b.t.leases.journals.failing() {
		return false // its carves could not be journaled
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
	// A lease of a rotated generation is replaced, so that old generations
	// go with their leases, and so is one of a sealed generation, which
	// takes no more records, and a dead one, which carves no more.
	if l == nil || !l.matches(statuses) || l.isDead() || l.j != nil && (l.j.rotated.Load() || l.j.broken()) {
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

// contended reports whether this batch carries reservations of several
// callers: under concurrent load a route takes its lease on its first
// request. Waiting for its second within LeaseIdle made leases depend on
// the writer's speed: when the store's path was slow, a cycle over many
// routes outlasted LeaseIdle, no route ever looked warm, and they all
// stayed on the slow path.
func (b *batch) contended() bool {
	if b.reserves == 0 {
		b.reserves = -1
		n := 0
		for _, o := range b.ops {
			if o.kind == opReserve {
				if n++; n > 1 {
					b.reserves = 1
					break
				}
			}
		}
	}
	return b.reserves > 0
}

func (l *lease) isDead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
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
