package budget

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenbudget/tokenbudget/cache"
)

// Leases (see the package doc): room a Tracker holds in the store, as one
// reservation row per route, and carves reservations from in memory.

const (
	// maxLeaseLimits bounds the limits one lease holds on; a route with
	// more takes the store path.
	maxLeaseLimits = 8
	// leaseMinRoom is the room, in estimates, below which no lease is
	// taken or grown: the last tokens go to whoever asks first, in any
	// process, through the store.
	leaseMinRoom = 4
	// leaseStart is the estimates a new lease holds beyond its first.
	leaseStart = 32
	// leaseMaxEstimates caps what one refill adds, in estimates.
	leaseMaxEstimates = 1024
	// LeaseIdle is how long a lease may go unused before its free room is
	// given back.
	LeaseIdle = time.Second
	// leaseEnd is how long a lease that gave its room back keeps its row
	// (holding nothing), so that its route's next request grows it rather
	// than creating a row and a journal again.
	leaseEnd = 30 * time.Second
	// leaseTick is how often the writer looks at its leases when nothing
	// else makes it write (idle give-back, renewal, expiry).
	leaseTick = 250 * time.Millisecond
	// leasePrefix starts a lease's reservation id.
	leasePrefix = "lse_"
)

// routeKey names the requests one lease serves: one key's requests for one
// end user on one provider and model decide on the same limits.
type routeKey struct{ key, user, provider, model string }

// leaseLimit is one counter a lease holds room on.
type leaseLimit struct {
	id, subject string
	metric      Metric
	start       int64 // the window's start, Unix nanos
	key         cache.Key
}

// lease is room held in the store on every limit of one route, carved
// into reservations in memory. Its hold on limits[i] is what the store
// has: free[i] plus what its live carved reservations hold plus what
// commits and give-backs not yet written will take off it.
type lease struct {
	id     string
	route  routeKey
	who    Who
	limits []leaseLimit
	// from and until bound the instants it serves: the windows it holds on.
	from, until int64
	ttl         time.Duration
	lastUse     atomic.Int64 // Unix nanos of the tracker's clock
	// j is its journal's generation, linked before its row is written
	// (nil without one); jerr why the link failed (it then serves
	// nothing).
	j    *journalGen
	jerr error

	mu       sync.Mutex
	free     []int64 // room not carved, per limit
	inflight int     // carved reservations not settled
	dead     bool    // carves no more: retired, lost or given back
	served   int64   // carves since the last refill, for sizing

	// Writer-owned.
	stored  []int64   // the hold amounts the store has, as of the last landed batch
	giving  []int64   // free room taken back, not yet written
	expires time.Time // the row's expiry as stored
	created bool      // its row landed
	at      time.Time // its row's instant
	whole   bool      // once lost: found charged whole (chargedWhole)
}

// leasedRes is a reservation carved from a lease: everything one carve
// allocates, in one allocation.
type leasedRes struct {
	r       Reservation
	lease   *lease
	amounts [maxLeaseLimits]int64
	holds   [maxLeaseLimits]Hold
	// exp is its expiry (Unix nanos), moved by Renew; expired: settled by
	// expiry in memory (charged, for ExpireCharge), so a later commit
	// records only what it must (see commitLeased). Both change under its
	// shard's lock; the caller's Reservation is never written once
	// returned.
	exp     int64
	expired bool
	// cover is, for an expired ExpireRelease one committed after its lease
	// was charged whole, whether that charge covered its estimate: 0 not
	// known, 1 covered, 2 not (writer-owned; see coveredByCharge).
	cover int8
	// op is the reservation that a batch answers with it, until its
	// admission is journaled (writer-owned; nil after).
	op *op
}

// leaseTable is a Tracker's leases by route and its carved reservations by
// id.
type leaseTable struct {
	mu       sync.RWMutex
	routes   map[routeKey]*lease
	retired  []*lease // replaced on their route, their rows not yet ended
	shards   [16]resShard
	journals *journals // nil without a journal directory
	// staleChecked is when Recover last looked at other processes' lease
	// names (writer-owned; journal_stale.go).
	staleChecked map[string]int64
	// rowless is when each of those names was first found without a row.
	rowless     map[string]int64
	lost        atomic.Int64 // leases found recovered by another process
	carved      atomic.Int64 // reservations answered in memory
	late        atomic.Int64 // commits after a recovery that recorded an excess
	unjournaled atomic.Int64 // leases recovery charged whole, their journal not found
}

type resShard struct {
	mu sync.Mutex
	m  map[string]*leasedRes
	// done remembers the last settledPerShard settled ids (ring, next), so
	// a second Commit or Release of one answers ErrSettled as the store's
	// path does.
	done map[string]ReservationState
	ring [settledPerShard]string
	next int
}

// settledPerShard bounds the settled ids each shard remembers.
const settledPerShard = 4096

func (lt *leaseTable) init() {
	lt.routes = make(map[routeKey]*lease)
	for i := range lt.shards {
		lt.shards[i].m = make(map[string]*leasedRes)
		lt.shards[i].done = make(map[string]ReservationState)
	}
}

func (lt *leaseTable) shard(id string) *resShard {
	var h uint32
	for i := len(id) - 4; i < len(id); i++ {
		if i >= 0 {
			h = h*31 + uint32(id[i])
		}
	}
	return &lt.shards[h%uint32(len(lt.shards))]
}

func (lt *leaseTable) route(k routeKey) *lease {
	lt.mu.RLock()
	l := lt.routes[k]
	lt.mu.RUnlock()
	return l
}

func (lt *leaseTable) put(id string, lr *leasedRes) {
	s := lt.shard(id)
	s.mu.Lock()
	s.m[id] = lr
	delete(s.done, id)
	s.mu.Unlock()
}

// take removes and returns the carved reservation id, if this process
// holds it, remembering it as settled in state; else it reports the
// state id was settled in, if remembered.
func (lt *leaseTable) take(id string, state ReservationState) (*leasedRes, ReservationState) {
	s := lt.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	lr := s.m[id]
	if lr == nil {
		return nil, s.done[id]
	}
	delete(s.m, id)
	if old := s.ring[s.next]; old != "" {
		delete(s.done, old)
	}
	s.ring[s.next], s.done[id] = id, state
	s.next = (s.next + 1) % settledPerShard
	return lr, ""
}

// reportErr hands err to Config.OnError.
func (t *Tracker) reportErr(err error) {
	if t.cfg.OnError != nil {
		t.cfg.OnError(err)
	}
}

// leasesOn reports whether reservations may be carved from leases. In
// Durable mode too: there every journal record is on disk (fdatasync)
// before its call returns.
func (t *Tracker) leasesOn() bool { return t.cfg.Leases }

// reserveLeased carves req from its route's lease, or returns nil when the
// lease cannot answer alone (none, out of room, stale, the provider
// parked, or its journal failed): the caller then takes the writer's
// path, which may grow it. tried is the id of a carve whose record failed,
// which the store's path reuses: if the record landed whole after all
// (its sync failed), recovery charges the one request once.
func (t *Tracker) reserveLeased(ctx context.Context, req *Request, ttl time.Duration, policy ExpiryPolicy, now time.Time) (r *Reservation, tried string) {
	l := t.leases.route(routeKey{req.Key, req.User, req.Provider, req.Model})
	if l == nil {
		return nil, ""
	}
	ns := now.UnixNano()
	if ns < l.from || ns >= l.until {
		return nil, ""
	}
	if req.Provider != "" {
		if p, err := t.parkedAt(ctx, req.Provider, now, ns); err != nil || p != nil {
			return nil, ""
		}
	}
	lr := &leasedRes{lease: l}
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return nil, ""
	}
	for i := range l.limits {
		a := req.Estimate.Amount(l.limits[i].metric)
		if a > l.free[i] {
			l.mu.Unlock()
			return nil, ""
		}
		lr.amounts[i] = a
	}
	for i := range l.limits {
		l.free[i] -= lr.amounts[i]
	}
	l.inflight++
	l.served++
	l.mu.Unlock()
	l.lastUse.Store(ns)
	t.fillLeased(lr, req, l, now, ttl, policy, newLeasedID(now))
	if err := journalAdmit(l.j, lr, false); err != nil {
		// Not journaled, not admitted here: the store's path decides it.
		// The failure sealed the lease's generation: the lease carves no
		// more, and the writer gives its room back and replaces it.
		l.mu.Lock()
		for i := range l.limits {
			l.free[i] += lr.amounts[i]
		}
		l.inflight--
		l.dead = true
		l.mu.Unlock()
		t.reportErr(err)
		return nil, lr.r.ID
	}
	if l.j != nil && l.j.size.Load() >= genMax {
		// Its generation is full: the lease carves no more, and the
		// route's next request takes a new one, in a new generation. A
		// lease that is never refilled (its reservations released) would
		// otherwise append to one file for ever.
		l.mu.Lock()
		l.dead = true
		l.mu.Unlock()
	}
	t.leases.carved.Add(1)
	t.leases.put(lr.r.ID, lr)
	return &lr.r, ""
}

// fillLeased fills lr's Reservation as carved from l.
func (t *Tracker) fillLeased(lr *leasedRes, req *Request, l *lease, at time.Time, ttl time.Duration, policy ExpiryPolicy, id string) {
	exp := at.Add(ttl)
	lr.r = Reservation{ID: id, Key: req.Key, Team: l.who.Team, Org: l.who.Org, User: req.User, Provider: req.Provider,
		Model: req.Model, Estimate: req.Estimate, At: at, ExpiresAt: exp, OnExpiry: policy}
	for i := range l.limits {
		ll := &l.limits[i]
		lr.holds[i] = Hold{ReservationID: id, LimitID: ll.id, Subject: ll.subject, WindowStart: time.Unix(0, ll.start).UTC(),
			Amount: lr.amounts[i], ExpiresAt: exp}
	}
	lr.r.Holds = lr.holds[:len(l.limits)]
	lr.exp = exp.UnixNano()
}

// idSalt and idSeq make the last 6 bytes of a carved reservation's id:
// random per process, then counted, so ids stay unique without reading
// randomness per request.
var (
	idSalt = func() uint64 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return binary.LittleEndian.Uint64(b[:])
	}()
	idSeq atomic.Uint64
)

// newLeasedID is a reservation id shaped like newReservationID's (time,
// then 6 bytes), built in one allocation.
func newLeasedID(at time.Time) string {
	var raw [16]byte
	binary.BigEndian.PutUint64(raw[:8], uint64(at.UnixNano()))
	binary.BigEndian.PutUint64(raw[8:], idSalt+idSeq.Add(1)) // its low 6 bytes: distinct for 2^48 ids
	copy(raw[8:14], raw[10:16])
	return rsvID(raw[:14])
}

func rsvID(raw []byte) string {
	var b [4 + 28]byte
	copy(b[:], "rsv_")
	hex.Encode(b[4:], raw)
	return string(b[:])
}

// routeFree is the room this process may still carve from the lease of
// req's route on the counter k, which a check in this process must not
// count as reserved.
func (t *Tracker) routeFree(req *Request, k cache.Key) int64 {
	l := t.leases.route(routeKey{req.Key, req.User, req.Provider, req.Model})
	if l == nil {
		return 0
	}
	for i := range l.limits {
		if l.limits[i].key == k {
			l.mu.Lock()
			f := l.free[i]
			if l.dead {
				f = 0
			}
			l.mu.Unlock()
			return f
		}
	}
	return 0
}

// newLeaseID is a lease's reservation id.
func newLeaseID(at time.Time) string { return leasePrefix + newReservationID(at)[4:] }
