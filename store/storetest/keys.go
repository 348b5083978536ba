package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra, suiteCase{"GatewayKeyLifecycle", testKeyLifecycle})
}

// A key is rotated with a grace period for its old secret, its last use is
// written at most once a minute, and a revoked name is taken again only by
// ReuseKey.
func testKeyLifecycle(t *testing.T, newDB NewDB) {
	open := newDB(t)
	s := open()
	upd := func(fn func(budget.Tx) error) error { return s.Update(ctx, fn) }
	get := func(hash string) (budget.GatewayKey, error) {
		var k budget.GatewayKey
		err := s.View(ctx, func(tx budget.Tx) error {
			var err error
			k, err = tx.KeyByHash(ctx, hash)
			return err
		})
		return k, err
	}
	if err := upd(func(tx budget.Tx) error {
		return tx.InsertKey(ctx, budget.GatewayKey{Name: "app", Hash: "h1", CreatedAt: T0})
	}); err != nil {
		t.Fatal(err)
	}
	grace := T0.Add(time.Hour)
	if err := upd(func(tx budget.Tx) error { return tx.RotateKey(ctx, "app", "h2", grace) }); err != nil {
		t.Fatalf("RotateKey: %v", err)
	}
	for _, tc := range []struct {
		hash string
		at   time.Time
		want bool
	}{{"h2", T0, true}, {"h1", T0, true}, {"h1", grace.Add(-time.Nanosecond), true}, {"h1", grace, false}, {"h2", grace.Add(time.Hour), true}} {
		k, err := get(tc.hash)
		if err != nil || k.Name != "app" || k.Accepts(tc.hash, tc.at) != tc.want {
			t.Errorf("key by %s at %s = %+v, %v; want accepted %v", tc.hash, tc.at, k, err, tc.want)
		}
	}
	if _, err := get("h0"); !errors.Is(err, budget.ErrNotFound) {
		t.Errorf("unknown hash = %v; want ErrNotFound", err)
	}
	if err := upd(func(tx budget.Tx) error { return tx.RotateKey(ctx, "nobody", "h9", grace) }); !errors.Is(err, budget.ErrNotFound) {
		t.Errorf("RotateKey of an unknown key = %v; want ErrNotFound", err)
	}
	// Last use: written, then not again within a minute.
	for _, at := range []time.Time{T0.Add(time.Minute), T0.Add(90 * time.Second), T0.Add(3 * time.Minute)} {
		if err := upd(func(tx budget.Tx) error { return tx.TouchKey(ctx, "app", at) }); err != nil {
			t.Fatal(err)
		}
	}
	if k, _ := get("h2"); !k.LastUsedAt.Equal(T0.Add(3 * time.Minute)) {
		t.Errorf("last used = %s; want %s", k.LastUsedAt, T0.Add(3*time.Minute))
	}
	if err := upd(func(tx budget.Tx) error {
		return tx.ReuseKey(ctx, budget.GatewayKey{Name: "app", Hash: "h3", CreatedAt: T0})
	}); !errors.Is(err, budget.ErrInvalid) {
		t.Errorf("ReuseKey of a live key = %v; want ErrInvalid", err)
	}
	if err := upd(func(tx budget.Tx) error { return tx.RevokeKey(ctx, "app", T0.Add(time.Hour)) }); err != nil {
		t.Fatal(err)
	}
	if err := upd(func(tx budget.Tx) error { return tx.RotateKey(ctx, "app", "h4", grace) }); !errors.Is(err, budget.ErrInvalid) {
		t.Errorf("RotateKey of a revoked key = %v; want ErrInvalid", err)
	}
	if err := upd(func(tx budget.Tx) error {
		return tx.ReuseKey(ctx, budget.GatewayKey{Name: "app", Hash: "h3", CreatedAt: T0.Add(2 * time.Hour)})
	}); err != nil {
		t.Fatalf("ReuseKey of a revoked key: %v", err)
	}
	k, err := get("h3")
	if err != nil || !k.Accepts("h3", T0.Add(3*time.Hour)) || !k.LastUsedAt.IsZero() {
		t.Errorf("reused key = %+v, %v; want live, never used", k, err)
	}
	if _, err := get("h2"); !errors.Is(err, budget.ErrNotFound) {
		t.Errorf("the revoked key's old secret = %v; want ErrNotFound", err)
	}
}
