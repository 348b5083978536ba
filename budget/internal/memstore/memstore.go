// Package memstore is a budget.Store held in memory, for tests of the
// Tracker's writer that must not wait on a disk or on time.
//
// A database (New) is a set of maps. Each write transaction works on a
// copy-on-write view of them, published whole when its function returns nil
// and dropped otherwise, so an error rolls back everything; a read
// transaction sees the last published state and nothing newer. Handles to
// one database (Store.Open) stand for processes sharing a file: their write
// transactions run one at a time, and each handle's Mark tells its own
// commits from the others'.
//
// Test hooks order the writer without sleeping: Gate holds the next write
// transaction until released, FailNext makes the next ones fail before
// their function runs, FailCommit after it ran (its writes dropped), and
// RetryNext runs the function twice as a transient conflict would.
//
// A Store is safe for concurrent use.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

var _ budget.Store = (*Store)(nil)

// ErrClosed is returned by a closed handle.
var ErrClosed = errors.New("memstore: closed")

// errReadOnly is a write method called inside View.
var errReadOnly = errors.New("memstore: write inside a read-only transaction")

// db is one database shared by every handle opened on it.
type db struct {
	mu      sync.Mutex // held by the write transaction running, if any
	state   atomic.Pointer[state]
	commits atomic.Uint64 // committed write transactions, all handles
}

// Store is one handle to an in-memory database.
type Store struct {
	db      *db
	commits atomic.Uint64 // this handle's committed write transactions
	closed  atomic.Bool

	retries, failures atomic.Int64

	hookMu      sync.Mutex
	gates       []*Gate
	failBefore  int
	failErr     error
	failAfter   int
	failAftErr  error
	retryBefore int
}

// New makes an empty database and returns a first handle to it.
func New() *Store {
	d := &db{}
	d.state.Store(newState())
	return &Store{db: d}
}

// Open returns another handle to s's database, as another process opening
// the same file would get.
func (s *Store) Open() *Store { return &Store{db: s.db} }

// Close closes the handle; the database stays for the others.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// Stats implements budget.Store.
func (s *Store) Stats() budget.StoreStats {
	return budget.StoreStats{Retries: s.retries.Load(), Failures: s.failures.Load()}
}

// View implements budget.Store: fn reads the last committed state.
func (s *Store) View(ctx context.Context, fn func(budget.Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fn(&tx{s: s, st: s.db.state.Load(), ro: true})
}

// Update implements budget.Store. The hooks armed on s act first, in this
// order: FailNext fails it, a gate holds it (so a gate armed after
// FailNext holds the first transaction that will run), RetryNext runs fn
// once more than needed, FailCommit drops what fn wrote.
func (s *Store) Update(ctx context.Context, fn func(budget.Tx) error) error {
	err := s.update(ctx, fn)
	if err != nil {
		s.failures.Add(1)
	}
	return err
}

func (s *Store) update(ctx context.Context, fn func(budget.Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.takeFailure(); err != nil {
		return err
	}
	if g := s.takeGate(); g != nil {
		close(g.reached)
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	retry, after := s.takeRetryAndCommitFailure()
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	if retry {
		t := &tx{s: s, st: s.db.state.Load().fork()}
		_ = fn(t) // its writes are dropped, as a rolled-back try's
		s.retries.Add(1)
	}
	t := &tx{s: s, st: s.db.state.Load().fork()}
	if err := fn(t); err != nil {
		return err
	}
	if after != nil {
		return after
	}
	t.st.base = nil
	s.db.state.Store(t.st)
	s.db.commits.Add(1)
	s.commits.Add(1)
	return nil
}

// Gate holds one write transaction before it begins, so a test can queue
// work behind it and know where the writer is.
type Gate struct {
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

// Gate arms a gate for the next write transaction of s that has none yet
// and that FailNext does not fail: Update blocks before it begins until
// the gate is released (or its context ends). Gates armed in a row hold
// successive transactions.
func (s *Store) Gate() *Gate {
	g := &Gate{reached: make(chan struct{}), release: make(chan struct{})}
	s.hookMu.Lock()
	s.gates = append(s.gates, g)
	s.hookMu.Unlock()
	return g
}

// Reached is closed once a write transaction is held at the gate.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Release lets the held transaction (or the next to arrive) go on.
func (g *Gate) Release() { g.once.Do(func() { close(g.release) }) }

func (s *Store) takeGate() *Gate {
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	if len(s.gates) == 0 {
		return nil
	}
	g := s.gates[0]
	s.gates = s.gates[1:]
	return g
}

// FailNext makes the next n write transactions of s fail with err before
// their function runs (n <= 0 disarms).
func (s *Store) FailNext(n int, err error) {
	s.hookMu.Lock()
	s.failBefore, s.failErr = n, err
	s.hookMu.Unlock()
}

// FailCommit makes the next n write transactions of s run their function
// and then fail with err, dropping everything it wrote: a commit that
// failed after the work was done.
func (s *Store) FailCommit(n int, err error) {
	s.hookMu.Lock()
	s.failAfter, s.failAftErr = n, err
	s.hookMu.Unlock()
}

// RetryNext makes the next n write transactions of s run their function
// twice, the first try rolled back, as a store does after a transient
// conflict.
func (s *Store) RetryNext(n int) {
	s.hookMu.Lock()
	s.retryBefore = n
	s.hookMu.Unlock()
}

// Pending reports how many failures, commit failures and retries are still
// armed.
func (s *Store) Pending() (fail, failCommit, retry int) {
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	return max(s.failBefore, 0), max(s.failAfter, 0), max(s.retryBefore, 0)
}

func (s *Store) takeFailure() error {
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	if s.failBefore > 0 {
		s.failBefore--
		return s.failErr
	}
	return nil
}

func (s *Store) takeRetryAndCommitFailure() (retry bool, after error) {
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	if s.retryBefore > 0 {
		s.retryBefore--
		retry = true
	}
	if s.failAfter > 0 {
		s.failAfter--
		after = s.failAftErr
	}
	return retry, after
}

// ---- the state

type counterKey struct {
	limitID, subject string
	start            int64
}

type holdKey struct{ reservationID, limitID string }

type eventKey struct{ key, requestID string }

type event struct {
	u         budget.Usage
	modelNorm string
	noPrice   bool
}

type counterRow struct {
	end  int64
	used int64
}

type priceKey struct {
	provider, model, tier string
	above, from           int64
}

type provider struct {
	p           budget.ProviderState
	probeOwner  string
	probeUntil  int64
	affectedRaw string
}

// state is one committed version of the database. A published state is
// never changed: a write transaction forks it and clones each table before
// its first change to it.
type state struct {
	limitsVersion, pricesVersion int64
	limits                       map[string]budget.Limit
	prices                       map[priceKey]budget.Price
	events                       map[eventKey]event
	counters                     map[counterKey]counterRow
	rollovers                    map[counterKey]budget.Rollover
	reservations                 map[string]budget.ReservationRow // without holds
	holds                        map[holdKey]budget.Hold
	providers                    map[string]provider
	teams                        map[string]string // team -> org ("" for none)
	orgs                         map[string]bool
	keyTeams                     map[string]string // key -> team
	rollups                      map[rollupKey]budget.Rollup
	alerts                       map[string]alertRow
	hooks                        map[string]int64    // usage destinations: created at
	outbox                       map[int64]outboxRow // by seq
	outboxSeq                    int64               // the last seq given
	prunedBefore                 int64
	gkeys                        map[string]gatekey.Key // gateway keys by name
	admins                       map[string]gatekey.AdminToken
	audit                        []budget.AuditEntry // appended; cloned before a transaction's first append

	base   *state          // the state forked, while unpublished
	cloned map[string]bool // tables cloned since the fork
}

func newState() *state {
	return &state{limits: map[string]budget.Limit{}, prices: map[priceKey]budget.Price{}, events: map[eventKey]event{},
		counters: map[counterKey]counterRow{}, rollovers: map[counterKey]budget.Rollover{},
		reservations: map[string]budget.ReservationRow{}, holds: map[holdKey]budget.Hold{}, providers: map[string]provider{},
		teams: map[string]string{}, orgs: map[string]bool{}, keyTeams: map[string]string{}, rollups: map[rollupKey]budget.Rollup{}, alerts: map[string]alertRow{},
		hooks: map[string]int64{}, outbox: map[int64]outboxRow{}, gkeys: map[string]gatekey.Key{}, admins: map[string]gatekey.AdminToken{}}
}

func (st *state) fork() *state {
	c := *st
	c.base, c.cloned = st, map[string]bool{}
	return &c
}

// own clones table name before its first change in this transaction.
func own[K comparable, V any](st *state, name string, m *map[K]V) {
	if st.cloned[name] {
		return
	}
	*m = maps.Clone(*m)
	st.cloned[name] = true
}

// ns and fromNs store instants as the SQL stores do: Unix nanoseconds, 0
// for the zero time, read back in UTC.
func ns(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNs(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// stored is t as stored and read back.
func stored(t time.Time) time.Time { return fromNs(ns(t)) }

func notFound(what, name string) error {
	return fmt.Errorf("%s %q: %w", what, name, budget.ErrNotFound)
}
