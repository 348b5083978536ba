package storetest

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

func init() {
	extra = append(extra,
		suiteCase{"GatewayKeyLookup", testKeyLookup},
		suiteCase{"GatewayKeyRotation", testKeyRotation},
		suiteCase{"GatewayKeyTouch", testKeyTouch},
		suiteCase{"GatewayKeyRevokeAndReuse", testKeyRevokeReuse},
		suiteCase{"GatewayKeyInsertRace", testKeyInsertRace},
	)
}

// keyStore is a new handle to the database open makes, as the gatekey.Store
// every store of this module also is.
func keyStore(t *testing.T, open func() budget.Store) gatekey.Store {
	t.Helper()
	s := open()
	ks, ok := s.(gatekey.Store)
	if !ok {
		t.Fatalf("%T does not implement gatekey.Store", s)
	}
	return ks
}

func insertKey(t *testing.T, ks gatekey.Store, k gatekey.Key) {
	t.Helper()
	if err := ks.InsertKey(ctx, k); err != nil {
		t.Fatalf("InsertKey(%s): %v", k.Name, err)
	}
}

func keyByHash(t *testing.T, ks gatekey.Store, hash string) gatekey.Key {
	t.Helper()
	k, err := ks.KeyByHash(ctx, hash)
	if err != nil {
		t.Fatalf("KeyByHash(%s): %v", hash, err)
	}
	return k
}

// A key is found by its hash, from another handle too, with its instants
// to the nanosecond; an unknown hash, or a name taken twice, is refused;
// ListKeys orders names byte by byte whatever the database's collation.
func testKeyLookup(t *testing.T, newDB NewDB) {
	open := newDB(t)
	a, b := keyStore(t, open), keyStore(t, open)
	created := T0.Add(123456789 * time.Nanosecond)
	insertKey(t, a, gatekey.Key{Name: "app", Hash: "h-app", CreatedAt: created})
	got := keyByHash(t, b, "h-app")
	if want := (gatekey.Key{Name: "app", Hash: "h-app", CreatedAt: created}); !reflect.DeepEqual(got, want) {
		t.Errorf("KeyByHash from another handle: got %+v; want %+v", got, want)
	}
	if !got.Accepts("h-app", T0) || got.Accepts("h-other", T0) {
		t.Errorf("a new key: accepts its hash %v, another %v; want true, false", got.Accepts("h-app", T0), got.Accepts("h-other", T0))
	}
	for _, h := range []string{"h-unknown", ""} {
		if k, err := b.KeyByHash(ctx, h); !errors.Is(err, budget.ErrNotFound) {
			t.Errorf("KeyByHash(%q): got %+v, %v; want ErrNotFound", h, k, err)
		}
	}
	err := b.InsertKey(ctx, gatekey.Key{Name: "app", Hash: "h-app2", CreatedAt: T0})
	if !errors.Is(err, budget.ErrInvalid) || !strings.Contains(err.Error(), "name") || !strings.Contains(err.Error(), "app") {
		t.Errorf("InsertKey of a taken name: got %v; want ErrInvalid naming name \"app\"", err)
	}
	if k := keyByHash(t, a, "h-app"); k.Hash != "h-app" {
		t.Errorf("after a refused insert: got %+v; want the first key unchanged", k)
	}
	for _, n := range []string{"équipe", "b", "B"} {
		insertKey(t, a, gatekey.Key{Name: n, Hash: "h-" + n, CreatedAt: T0})
	}
	ks, err := keyStore(t, open).ListKeys(ctx)
	if err != nil {
		t.Fatalf("ListKeys: %v", err)
	}
	var names []string
	for _, k := range ks {
		names = append(names, k.Name)
	}
	if got, want := strings.Join(names, ","), "B,app,b,équipe"; got != want {
		t.Errorf("ListKeys: got %s; want %s (byte order)", got, want)
	}
}

// After a rotation both secrets find the key; the old one is accepted
// until the grace ends. A second rotation forgets the first secret. An
// unknown name is ErrNotFound, a revoked one ErrInvalid.
func testKeyRotation(t *testing.T, newDB NewDB) {
	open := newDB(t)
	ks := keyStore(t, open)
	insertKey(t, ks, gatekey.Key{Name: "app", Hash: "h1", CreatedAt: T0})
	grace := T0.Add(time.Hour)
	if err := ks.RotateKey(ctx, "app", "h2", grace); err != nil {
		t.Fatalf("RotateKey: %v", err)
	}
	other := keyStore(t, open)
	for _, tc := range []struct {
		hash string
		at   time.Time
		want bool
	}{
		{"h2", T0, true}, {"h1", T0, true}, {"h1", grace.Add(-time.Nanosecond), true},
		{"h1", grace, false}, {"h2", grace.Add(time.Hour), true},
	} {
		k := keyByHash(t, other, tc.hash)
		if k.Name != "app" || k.Accepts(tc.hash, tc.at) != tc.want {
			t.Errorf("key by %s at %s: got %+v, accepted %v; want app, accepted %v", tc.hash, tc.at, k, k.Accepts(tc.hash, tc.at), tc.want)
		}
	}
	if k := keyByHash(t, other, "h1"); k.PrevHash != "h1" || !k.PrevUntil.Equal(grace) {
		t.Errorf("rotated key: got previous %q until %s; want h1 until %s", k.PrevHash, k.PrevUntil, grace)
	}
	if err := ks.RotateKey(ctx, "app", "h3", grace); err != nil {
		t.Fatalf("second RotateKey: %v", err)
	}
	if k, err := other.KeyByHash(ctx, "h1"); !errors.Is(err, budget.ErrNotFound) {
		t.Errorf("the secret two rotations back: got %+v, %v; want ErrNotFound", k, err)
	}
	if k := keyByHash(t, other, "h2"); !k.Accepts("h2", T0) {
		t.Errorf("the secret one rotation back within its grace: %+v not accepted", k)
	}
	if err := ks.RotateKey(ctx, "nobody", "h9", grace); !errors.Is(err, budget.ErrNotFound) {
		t.Errorf("RotateKey of an unknown key: got %v; want ErrNotFound", err)
	}
	if _, err := ks.RevokeKey(ctx, "app", T0); err != nil {
		t.Fatal(err)
	}
	if err := ks.RotateKey(ctx, "app", "h4", grace); !errors.Is(err, budget.ErrInvalid) {
		t.Errorf("RotateKey of a revoked key: got %v; want ErrInvalid", err)
	}
	if k, err := other.KeyByHash(ctx, "h4"); !errors.Is(err, budget.ErrNotFound) {
		t.Errorf("the refused rotation's hash: got %+v, %v; want ErrNotFound", k, err)
	}
}

// A key's use is written at most once a minute; a use of an unknown name
// is no error (the key may be gone since it was looked up).
func testKeyTouch(t *testing.T, newDB NewDB) {
	open := newDB(t)
	ks := keyStore(t, open)
	insertKey(t, ks, gatekey.Key{Name: "app", Hash: "h1", CreatedAt: T0})
	for _, step := range []struct {
		at, want time.Duration // the use, and the last use stored after it
	}{
		{time.Minute, time.Minute}, {90 * time.Second, time.Minute}, {2 * time.Minute, time.Minute},
		{2*time.Minute + time.Nanosecond, 2*time.Minute + time.Nanosecond}, {4 * time.Minute, 4 * time.Minute},
		{time.Minute, 4 * time.Minute},
	} {
		if err := ks.TouchKey(ctx, "app", T0.Add(step.at)); err != nil {
			t.Fatalf("TouchKey at +%s: %v", step.at, err)
		}
		if got := keyByHash(t, ks, "h1").LastUsedAt; !got.Equal(T0.Add(step.want)) {
			t.Errorf("after a use at +%s: last used %s; want +%s", step.at, got, step.want)
		}
	}
	if err := ks.TouchKey(ctx, "nobody", T0); err != nil {
		t.Errorf("TouchKey of an unknown key: %v; want nil", err)
	}
}

// RevokeKey reports whether it revoked; a revoked name is taken again only
// by ReuseKey, which starts it afresh, and the revoked secret stays
// refused.
func testKeyRevokeReuse(t *testing.T, newDB NewDB) {
	open := newDB(t)
	ks := keyStore(t, open)
	insertKey(t, ks, gatekey.Key{Name: "app", Hash: "h1", CreatedAt: T0})
	if err := ks.RotateKey(ctx, "app", "h2", T0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := ks.TouchKey(ctx, "app", T0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := ks.ReuseKey(ctx, gatekey.Key{Name: "app", Hash: "h3", CreatedAt: T0}); !errors.Is(err, budget.ErrInvalid) {
		t.Errorf("ReuseKey of a live key: got %v; want ErrInvalid", err)
	}
	if err := ks.ReuseKey(ctx, gatekey.Key{Name: "nobody", Hash: "h3", CreatedAt: T0}); !errors.Is(err, budget.ErrNotFound) {
		t.Errorf("ReuseKey of an unknown key: got %v; want ErrNotFound", err)
	}
	revokedAt := T0.Add(time.Hour + time.Nanosecond)
	for i, want := range []bool{true, false} {
		revoked, err := ks.RevokeKey(ctx, "app", revokedAt.Add(time.Duration(i)*time.Minute))
		if err != nil || revoked != want {
			t.Errorf("RevokeKey #%d: got %v, %v; want %v, nil", i+1, revoked, err, want)
		}
	}
	if revoked, err := ks.RevokeKey(ctx, "nobody", revokedAt); revoked || !errors.Is(err, budget.ErrNotFound) {
		t.Errorf("RevokeKey of an unknown key: got %v, %v; want false, ErrNotFound", revoked, err)
	}
	other := keyStore(t, open)
	k := keyByHash(t, other, "h2")
	if !k.RevokedAt.Equal(revokedAt) || k.Accepts("h2", T0) || k.Accepts("h1", T0) {
		t.Errorf("revoked key: got %+v (accepts h2 %v, h1 %v); want revoked at %s, accepting neither",
			k, k.Accepts("h2", T0), k.Accepts("h1", T0), revokedAt)
	}
	reused := T0.Add(2 * time.Hour)
	if err := ks.ReuseKey(ctx, gatekey.Key{Name: "app", Hash: "h3", CreatedAt: reused}); err != nil {
		t.Fatalf("ReuseKey of a revoked key: %v", err)
	}
	if got, want := keyByHash(t, other, "h3"), (gatekey.Key{Name: "app", Hash: "h3", CreatedAt: reused}); !reflect.DeepEqual(got, want) {
		t.Errorf("reused key: got %+v; want %+v (live, no previous secret, never used)", got, want)
	}
	for _, h := range []string{"h1", "h2"} {
		if k, err := other.KeyByHash(ctx, h); !errors.Is(err, budget.ErrNotFound) {
			t.Errorf("the revoked key's secret %s after reuse: got %+v, %v; want ErrNotFound", h, k, err)
		}
	}
}

// Two processes inserting one name at once: exactly one wins, the other is
// told the name is taken, and the winner's secret is the one stored.
func testKeyInsertRace(t *testing.T, newDB NewDB) {
	open := newDB(t)
	stores := []gatekey.Store{keyStore(t, open), keyStore(t, open)}
	const rounds = 8
	for r := range rounds {
		name := "race-" + string(rune('a'+r))
		errs := make([]error, len(stores))
		var wg sync.WaitGroup
		for i, ks := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = ks.InsertKey(ctx, gatekey.Key{Name: name, Hash: name + "-" + string(rune('0'+i)), CreatedAt: T0})
			}()
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner < 0:
				winner = i
			case err == nil:
				t.Fatalf("%s: both inserts succeeded", name)
			case !errors.Is(err, budget.ErrInvalid):
				t.Fatalf("%s: insert %d: got %v; want nil or ErrInvalid", name, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("%s: both inserts refused: %v", name, errs)
		}
		if k := keyByHash(t, stores[1-winner], name+"-"+string(rune('0'+winner))); k.Name != name {
			t.Errorf("%s: the winner's key: got %+v", name, k)
		}
	}
}
