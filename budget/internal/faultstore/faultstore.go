// Package faultstore wraps any budget.Store so that a test decides when its
// write transactions fail and when they wait, and learns when the writer
// reached them, without a disk to fill and without sleeping.
//
// A write transaction can fail at three points, each the shape of a real
// failure: Begin (the store refused it before fn ran: nothing was planned),
// Apply (fn planned the batch and Tx.Apply failed: a full disk) and Commit
// (fn ran to the end and its writes were rolled back: a COMMIT that failed).
// A Gate holds the next write transaction before it begins, so a test can
// queue work behind it. Reads (View) always pass through: a full disk still
// reads.
//
// Only budget.Store is forwarded; optional interfaces of the wrapped store
// (HealthChecker, IntegrityChecker) are hidden, so a Tracker's Health on a
// faultstore reports the writer's failures alone.
package faultstore

import (
	"context"
	"sync"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Point is where in a write transaction an armed failure strikes.
type Point int

const (
	Begin  Point = iota // before fn runs
	Apply               // at fn's Tx.Apply, which writes nothing
	Commit              // after fn returned nil; everything fn wrote is rolled back
)

// Forever, as Fail's n, fails every write transaction until Heal.
const Forever = -1

// Store is a budget.Store whose write transactions fail or wait on demand.
// It is safe for concurrent use.
type Store struct {
	budget.Store

	mu        sync.Mutex
	point     Point
	left      int // failures still armed; Forever for all of them
	gen       int // moved by Fail and Heal, so a failure taken before is not given back after
	err       error
	gates     []*Gate
	refused   chan struct{} // closed at the next failure
	succeeded chan struct{} // closed at the next commit
	attempts  []time.Time   // when each write transaction began
}

// New wraps s; nothing fails until Fail is called.
func New(s budget.Store) *Store { return &Store{Store: s} }

// Fail makes the next n write transactions (Forever: all, until Heal) fail
// with err at p, replacing what was armed before. It returns a channel
// closed at the first of those failures, so a test knows the writer met
// one.
func (s *Store) Fail(p Point, n int, err error) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.point, s.left, s.err = p, n, err
	s.gen++
	return arm(&s.refused)
}

// Heal disarms the failures and returns a channel closed once a write
// transaction has committed from now on.
func (s *Store) Heal() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.left = 0
	s.gen++
	return arm(&s.succeeded)
}

// Attempts returns when each write transaction so far began (by the
// clock of time.Now, which testing/synctest fakes).
func (s *Store) Attempts() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.attempts...)
}

// Gate holds one write transaction before it begins.
type Gate struct {
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

// Gate arms a gate for the next write transaction no earlier gate holds:
// Update waits at it, before any failure is decided, until it is released
// or its context ends.
func (s *Store) Gate() *Gate {
	g := &Gate{reached: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.gates = append(s.gates, g)
	s.mu.Unlock()
	return g
}

// Reached is closed once a write transaction waits at g.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Release lets the transaction held at g (or the next to arrive) go on.
func (g *Gate) Release() { g.once.Do(func() { close(g.release) }) }

// Update implements budget.Store with the armed gate and failure.
func (s *Store) Update(ctx context.Context, fn func(budget.Tx) error) error {
	s.mu.Lock()
	s.attempts = append(s.attempts, time.Now())
	var g *Gate
	if len(s.gates) > 0 {
		g, s.gates = s.gates[0], s.gates[1:]
	}
	s.mu.Unlock()
	if g != nil {
		close(g.reached)
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p, gen, err := s.take()
	if err != nil && p == Begin {
		s.fired()
		return err
	}
	used := false // whether the failure struck: fn may end before it could
	runErr := s.Store.Update(ctx, func(tx budget.Tx) error {
		used = false // fn may run again after a transient conflict
		if err != nil && p == Apply {
			tx = &failingApply{fullTx: tx.(fullTx), err: err, used: &used}
		}
		if ferr := fn(tx); ferr != nil {
			return ferr
		}
		if err != nil && p == Commit {
			used = true
			return err // the store rolls back what fn wrote
		}
		return nil
	})
	switch {
	case used:
		s.fired()
	case err != nil:
		s.giveBack(gen)
	}
	if runErr == nil {
		s.committed()
	}
	return runErr
}

// giveBack re-arms a failure fn ended too early to meet.
func (s *Store) giveBack(gen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen == s.gen && s.left >= 0 {
		s.left++
	}
}

// take uses up one armed failure, if any, and says where it strikes.
func (s *Store) take() (Point, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.left == 0 {
		return 0, s.gen, nil
	}
	if s.left > 0 {
		s.left--
	}
	return s.point, s.gen, s.err
}

func (s *Store) fired() {
	s.mu.Lock()
	defer s.mu.Unlock()
	fire(&s.refused)
}

func (s *Store) committed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	fire(&s.succeeded)
}

// arm returns *ch, made if need be; s.mu is held.
func arm(ch *chan struct{}) <-chan struct{} {
	if *ch == nil {
		*ch = make(chan struct{})
	}
	return *ch
}

// fire closes *ch, if armed, and disarms it; s.mu is held.
func fire(ch *chan struct{}) {
	if *ch != nil {
		close(*ch)
		*ch = nil
	}
}

// failingApply is a transaction whose Apply fails as a full disk's would:
// having written nothing.
// It keeps every optional role of the wrapped memstore transaction, so the
// writer sees the same store it would without the fault.
type failingApply struct {
	fullTx
	err  error
	used *bool
}

func (f *failingApply) Apply(context.Context, *budget.WriteSet) ([]bool, int64, error) {
	*f.used = true
	return nil, 0, f.err
}

// fullTx is a transaction in every role (memstore's are).
type fullTx interface {
	budget.Tx
	budget.HistoryTx
	budget.AlertTx
	budget.ProviderTx
	budget.AuditTx
}
