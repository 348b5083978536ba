package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// newMem makes a fresh database; each call of open is another handle to it,
// as another process opening the same file.
func newMem(t testing.TB) func() budget.Store {
	first := memstore.New()
	used := false
	return func() budget.Store {
		s := first
		if used {
			s = first.Open()
		}
		used = true
		t.Cleanup(func() { s.Close() })
		return s
	}
}

func TestConformance(t *testing.T) { storetest.Run(t, newMem) }

var ctx = context.Background()

// An Update whose function fails, or whose commit is failed by FailCommit,
// leaves nothing behind; one that succeeds is seen by View.
func TestUpdateRollsBack(t *testing.T) {
	s := memstore.New()
	boom := errors.New("boom")
	l := budget.Limit{ID: "l1", Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricRequests, Max: 5, Enabled: true,
		Window: budget.Window{Kind: budget.Fixed, Length: time.Hour}}
	insert := func(tx budget.Tx) error { return tx.InsertLimit(ctx, l, storetest.T0) }
	if err := s.Update(ctx, func(tx budget.Tx) error {
		if err := insert(tx); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Update = %v; want %v", err, boom)
	}
	s.FailCommit(1, boom)
	if err := s.Update(ctx, insert); !errors.Is(err, boom) {
		t.Fatalf("Update with FailCommit = %v; want %v", err, boom)
	}
	if n := limits(t, s); n != 0 {
		t.Fatalf("after two rolled-back inserts: %d limits; want 0", n)
	}
	if err := s.Update(ctx, insert); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if n := limits(t, s); n != 1 {
		t.Fatalf("after a committed insert: %d limits; want 1", n)
	}
	if got := s.Stats().Failures; got != 2 {
		t.Errorf("Stats().Failures = %d; want 2", got)
	}
}

func limits(t *testing.T, s budget.Store) int {
	t.Helper()
	var n int
	if err := s.View(ctx, func(tx budget.Tx) error {
		ls, err := tx.Limits(ctx, "")
		n = len(ls)
		return err
	}); err != nil {
		t.Fatalf("View: %v", err)
	}
	return n
}

// Mark moves by Next for each of the handle's own commits, and otherwise
// when another handle commits.
func TestMark(t *testing.T) {
	a := memstore.New()
	b := a.Open()
	mark := func(s budget.Store) (m budget.Mark) {
		t.Helper()
		if err := s.Update(ctx, func(tx budget.Tx) error {
			var err error
			m, err = tx.Mark(ctx)
			return err
		}); err != nil {
			t.Fatalf("Update: %v", err)
		}
		return m
	}
	m1 := mark(a)
	if m2 := mark(a); m2 != m1.Next() {
		t.Fatalf("mark after own commit = %+v; want %+v", m2, m1.Next())
	}
	mark(b)
	if m4 := mark(a); m4 == m1.Next().Next() {
		t.Fatalf("mark after another handle's commit = %+v; want anything but %+v", m4, m1.Next().Next())
	}
	if err := a.View(ctx, func(tx budget.Tx) error { return tx.LockLimits(ctx, []string{"x"}) }); err == nil {
		t.Error("LockLimits inside View succeeded; want an error")
	}
}

// A gate holds the next Update until released; FailNext fails the next
// ones before their function runs.
func TestHooks(t *testing.T) {
	s := memstore.New()
	g := s.Gate()
	ran := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- s.Update(ctx, func(budget.Tx) error { close(ran); return nil })
	}()
	<-g.Reached()
	select {
	case <-ran:
		t.Fatal("the gated Update ran before its gate was released")
	default:
	}
	g.Release()
	if err := <-errc; err != nil {
		t.Fatalf("gated Update: %v", err)
	}
	boom := errors.New("boom")
	s.FailNext(2, boom)
	calls := 0
	for range 3 {
		err := s.Update(ctx, func(budget.Tx) error { calls++; return nil })
		if calls == 0 && !errors.Is(err, boom) {
			t.Fatalf("Update under FailNext = %v; want %v", err, boom)
		}
	}
	if calls != 1 {
		t.Errorf("functions run = %d; want 1 (two failed before running)", calls)
	}
	s.RetryNext(1)
	calls = 0
	if err := s.Update(ctx, func(budget.Tx) error { calls++; return nil }); err != nil || calls != 2 {
		t.Errorf("Update under RetryNext: err %v, runs %d; want nil, 2", err, calls)
	}
}
