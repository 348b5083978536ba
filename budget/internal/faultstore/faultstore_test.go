package faultstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/faultstore"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

var (
	ctx     = context.Background()
	errFull = errors.New("disk full (injected)")
	t0      = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
)

// insert writes limit id in one write transaction of s, calling Apply
// (with nothing to apply) when apply is set.
func insert(s budget.Store, id string, apply bool) error {
	return s.Update(ctx, func(tx budget.Tx) error {
		if err := tx.InsertLimit(ctx, budget.Limit{ID: id, Key: "k-" + id, Metric: budget.MetricTokens, Max: 1}, t0); err != nil {
			return err
		}
		if apply {
			if _, _, err := tx.Apply(ctx, &budget.WriteSet{}); err != nil {
				return err
			}
		}
		return nil
	})
}

// has reports whether s holds limit id.
func has(t *testing.T, s budget.Store, id string) bool {
	t.Helper()
	found := false
	if err := s.View(ctx, func(tx budget.Tx) error {
		ls, err := tx.Limits(ctx, "")
		for _, l := range ls {
			found = found || l.ID == id
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return found
}

// Each point fails the armed number of write transactions with the error
// and leaves nothing of them in the store; then writes work again.
func TestFailLeavesNothingWritten(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    faultstore.Point
	}{{"begin", faultstore.Begin}, {"apply", faultstore.Apply}, {"commit", faultstore.Commit}} {
		t.Run(tc.name, func(t *testing.T) {
			s := faultstore.New(memstore.New())
			refused := s.Fail(tc.p, 2, errFull)
			for _, id := range []string{"a", "b"} {
				if err := insert(s, id, true); !errors.Is(err, errFull) {
					t.Fatalf("write %s with a failure armed = %v; want %v", id, err, errFull)
				}
			}
			select {
			case <-refused:
			default:
				t.Error("Fail's channel still open after the failures struck")
			}
			if has(t, s, "a") || has(t, s, "b") {
				t.Error("a failed write left its limit in the store")
			}
			if err := insert(s, "c", true); err != nil || !has(t, s, "c") {
				t.Fatalf("write after the armed failures = %v; want it stored", err)
			}
			if n := len(s.Attempts()); n != 3 {
				t.Errorf("%d attempts recorded; want 3", n)
			}
		})
	}
}

// An Apply failure strikes only a transaction that applies: one that ends
// before Apply commits and leaves the failure armed for the next.
func TestApplyFailureWaitsForApply(t *testing.T) {
	s := faultstore.New(memstore.New())
	s.Fail(faultstore.Apply, 1, errFull)
	if err := insert(s, "a", false); err != nil || !has(t, s, "a") {
		t.Fatalf("write that never applies = %v; want it stored", err)
	}
	if err := insert(s, "b", true); !errors.Is(err, errFull) || has(t, s, "b") {
		t.Fatalf("next write that applies = %v; want %v, nothing stored", err, errFull)
	}
}

// Forever fails every write until Heal, whose channel closes at the next
// commit; reads pass throughout.
func TestForeverUntilHeal(t *testing.T) {
	s := faultstore.New(memstore.New())
	s.Fail(faultstore.Begin, faultstore.Forever, errFull)
	for range 5 {
		if err := insert(s, "a", false); !errors.Is(err, errFull) {
			t.Fatalf("write while failing forever = %v; want %v", err, errFull)
		}
	}
	has(t, s, "a") // a read works while writes fail
	healed := s.Heal()
	if err := insert(s, "a", false); err != nil {
		t.Fatalf("write after Heal = %v", err)
	}
	<-healed
}

// A gate holds the next write before it begins until released.
func TestGateHoldsTheNextWrite(t *testing.T) {
	s := faultstore.New(memstore.New())
	g := s.Gate()
	done := make(chan error, 1)
	go func() { done <- insert(s, "a", false) }()
	<-g.Reached()
	select {
	case err := <-done:
		t.Fatalf("write returned %v while held at the gate", err)
	default:
	}
	if has(t, s, "a") {
		t.Fatal("held write already stored")
	}
	g.Release()
	if err := <-done; err != nil || !has(t, s, "a") {
		t.Fatalf("released write = %v; want it stored", err)
	}
}
