package proxy

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

var keysNow = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// keysEnv is a Keys over a fresh database, its clock at *now.
func keysEnv(t *testing.T, now *time.Time) (*tokenbudget.DB, *Keys) {
	t.Helper()
	ctx := context.Background()
	db, err := tokenbudget.Open(ctx, filepath.Join(t.TempDir(), "budget.db"), tokenbudget.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	k := NewKeys(db.KeyStore())
	k.Now = func() time.Time { return *now }
	t.Cleanup(func() {
		k.Wait()
		db.Close(context.Background())
	})
	return db, k
}

// revokeAll revokes every key in the store: a lookup that still succeeds
// afterwards was answered from the cache.
func revokeAll(t *testing.T, db *tokenbudget.DB, names []string) {
	t.Helper()
	ctx := context.Background()
	for _, n := range names {
		if _, err := db.KeyStore().RevokeKey(ctx, n, keysNow); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKeyCacheBounded: the cache of known keys evicts its least recently
// used entry when full (it is never emptied whole), and a flood of unknown
// secrets, cached apart, evicts no known key.
func TestKeyCacheBounded(t *testing.T) {
	t.Parallel()
	now := keysNow
	db, k := keysEnv(t, &now)
	k.known, _ = lru.New[string, *keyEntry](4)
	k.unknown, _ = lru.New[string, time.Time](4)
	ctx := context.Background()
	var names, secrets []string
	for i := range 6 {
		name := fmt.Sprintf("k%d", i)
		s, err := AddKey(ctx, db.KeyStore(), name, now)
		if err != nil {
			t.Fatal(err)
		}
		names, secrets = append(names, name), append(secrets, s)
	}
	for i, s := range secrets {
		if name, err := k.Lookup(ctx, s); name != names[i] || err != nil {
			t.Fatalf("lookup %s: %q %v", names[i], name, err)
		}
	}
	for i := range 100 {
		if _, err := k.Lookup(ctx, fmt.Sprintf("tbk_made-up-%d", i)); !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("made-up secret: %v", err)
		}
	}
	revokeAll(t, db, names)
	// k0 and k1 were evicted for k4 and k5 and are read again: revoked.
	// k2..k5 are still cached (within the TTL): the unknown secrets did not
	// push them out, and the cache was not emptied. (Newest first: reading
	// k0 again would evict k2.)
	for i := len(secrets) - 1; i >= 0; i-- {
		s := secrets[i]
		name, err := k.Lookup(ctx, s)
		cached := i >= 2
		if got := err == nil && name == names[i]; got != cached {
			t.Errorf("%s after revocation: got %q %v; want cached %v", names[i], name, err, cached)
		}
	}
}

// TestKeyLookupTTL: an answer is trusted for the TTL, found or not: a key
// added after its secret was looked up in vain works once the TTL passed.
func TestKeyLookupTTL(t *testing.T) {
	t.Parallel()
	now := keysNow
	db, k := keysEnv(t, &now)
	ctx := context.Background()
	secret, err := NewKeySecret()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Lookup(ctx, secret); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("unknown: %v", err)
	}
	if err := db.KeyStore().InsertKey(ctx, gatekey.Key{Name: "late", Hash: HashKey(secret), CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(DefaultKeyTTL - time.Nanosecond)
	if _, err := k.Lookup(ctx, secret); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("within the TTL: %v; want the cached ErrUnknownKey", err)
	}
	now = now.Add(time.Nanosecond)
	if name, err := k.Lookup(ctx, secret); name != "late" || err != nil {
		t.Errorf("after the TTL: %q %v; want late", name, err)
	}
}

// TestKeyRotationGrace: after a rotation both secrets open the key until
// the grace ends, decided at each lookup with the current time, so a
// cached answer does not stretch the grace; then only the new one does.
func TestKeyRotationGrace(t *testing.T) {
	t.Parallel()
	now := keysNow
	db, k := keysEnv(t, &now)
	// The cache outlives the grace: the row read after the rotation is
	// reused, and Accepts decides each time.
	k.TTL = time.Hour
	ctx := context.Background()
	old, err := AddKey(ctx, db.KeyStore(), "app", now)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := RotateKey(ctx, db.KeyStore(), "app", time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		secret string
		after  time.Duration
		ok     bool
	}{
		{fresh, 0, true}, {old, 0, true}, {old, time.Minute - time.Nanosecond, true},
		{old, time.Minute, false}, {fresh, time.Minute, true},
	} {
		now = keysNow.Add(c.after)
		name, err := k.Lookup(ctx, c.secret)
		if ok := err == nil && name == "app"; ok != c.ok {
			t.Errorf("%s after %s: %q %v; want usable %v", map[bool]string{true: "old", false: "new"}[c.secret == old], c.after, name, err, c.ok)
		}
	}
	if _, err := RotateKey(ctx, db.KeyStore(), "nobody", 0, now); !errors.Is(err, budget.ErrNotFound) {
		t.Errorf("rotate an unknown key: %v; want ErrNotFound", err)
	}
}

// TestKeyTouch: a key's use is written to the store at most once a
// minute per key, off the lookup's path.
func TestKeyTouch(t *testing.T) {
	t.Parallel()
	now := keysNow
	db, k := keysEnv(t, &now)
	ctx := context.Background()
	secret, err := AddKey(ctx, db.KeyStore(), "app", now)
	if err != nil {
		t.Fatal(err)
	}
	lastUsed := func() time.Time {
		t.Helper()
		k.Wait()
		ks, err := db.KeyStore().ListKeys(ctx)
		if err != nil || len(ks) != 1 {
			t.Fatalf("keys: %v %v", ks, err)
		}
		return ks[0].LastUsedAt
	}
	if got := lastUsed(); !got.IsZero() {
		t.Fatalf("a new key: last used %v", got)
	}
	for _, c := range []struct {
		after time.Duration
		want  time.Duration // the last use recorded
	}{{0, 0}, {30 * time.Second, 0}, {59 * time.Second, 0}, {61 * time.Second, 61 * time.Second}, {90 * time.Second, 61 * time.Second}} {
		now = keysNow.Add(c.after)
		if _, err := k.Lookup(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if got := lastUsed(); !got.Equal(keysNow.Add(c.want)) {
			t.Errorf("after a use at +%s: last used %v; want +%s", c.after, got, c.want)
		}
	}
}

// readCounter is a KeyStore that counts the lookups reaching it, to tell a
// cached answer from a read.
type readCounter struct {
	KeyStore
	reads atomic.Int64
}

func (c *readCounter) KeyByHash(ctx context.Context, hash string) (gatekey.Key, error) {
	c.reads.Add(1)
	return c.KeyStore.KeyByHash(ctx, hash)
}

// TestKeyRereadAfterTTL: a key found is answered from the cache until the
// TTL has passed since it was read, then read again, once.
func TestKeyRereadAfterTTL(t *testing.T) {
	t.Parallel()
	now := keysNow
	db, k := keysEnv(t, &now)
	ctx := context.Background()
	secret, err := AddKey(ctx, db.KeyStore(), "app", now)
	if err != nil {
		t.Fatal(err)
	}
	c := &readCounter{KeyStore: db.KeyStore()}
	k.store = c
	for _, step := range []struct {
		after time.Duration
		reads int64 // store reads so far
	}{
		{0, 1}, {time.Second, 1}, {DefaultKeyTTL - time.Nanosecond, 1},
		{DefaultKeyTTL, 2}, {DefaultKeyTTL + time.Second, 2}, {2 * DefaultKeyTTL, 3},
	} {
		now = keysNow.Add(step.after)
		if name, err := k.Lookup(ctx, secret); name != "app" || err != nil {
			t.Fatalf("lookup at +%s: %q %v; want app", step.after, name, err)
		}
		if got := c.reads.Load(); got != step.reads {
			t.Errorf("after a lookup at +%s: got %d store reads; want %d", step.after, got, step.reads)
		}
	}
}

// TestKeyRevocationSeenWithinTTL: a key revoked by another process is
// refused at the latest TTL after this process last read it.
func TestKeyRevocationSeenWithinTTL(t *testing.T) {
	t.Parallel()
	now := keysNow
	db, k := keysEnv(t, &now)
	ctx := context.Background()
	secret, err := AddKey(ctx, db.KeyStore(), "app", now)
	if err != nil {
		t.Fatal(err)
	}
	if name, err := k.Lookup(ctx, secret); name != "app" || err != nil {
		t.Fatalf("lookup of a new key: %q %v", name, err)
	}
	now = keysNow.Add(time.Second)
	revokeAll(t, db, []string{"app"})
	now = keysNow.Add(DefaultKeyTTL - time.Nanosecond)
	if name, err := k.Lookup(ctx, secret); name != "app" || err != nil {
		t.Errorf("within the TTL of the read: %q %v; want the cached app", name, err)
	}
	now = keysNow.Add(DefaultKeyTTL)
	if name, err := k.Lookup(ctx, secret); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("TTL after the read: %q %v; want ErrUnknownKey", name, err)
	}
}

// TestKeyUnknownFloodKeepsKnown: however many made-up secrets are tried,
// each a store read, a key found stays cached and is not read again
// within the TTL.
func TestKeyUnknownFloodKeepsKnown(t *testing.T) {
	t.Parallel()
	now := keysNow
	db, k := keysEnv(t, &now)
	k.known, _ = lru.New[string, *keyEntry](2)
	k.unknown, _ = lru.New[string, time.Time](2)
	ctx := context.Background()
	secret, err := AddKey(ctx, db.KeyStore(), "app", now)
	if err != nil {
		t.Fatal(err)
	}
	c := &readCounter{KeyStore: db.KeyStore()}
	k.store = c
	if _, err := k.Lookup(ctx, secret); err != nil {
		t.Fatal(err)
	}
	const flood = 50
	for i := range flood {
		if _, err := k.Lookup(ctx, fmt.Sprintf("tbk_random-%d", i)); !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("made-up secret %d: %v; want ErrUnknownKey", i, err)
		}
	}
	if name, err := k.Lookup(ctx, secret); name != "app" || err != nil {
		t.Errorf("after the flood: %q %v; want app", name, err)
	}
	if got, want := c.reads.Load(), int64(1+flood); got != want {
		t.Errorf("got %d store reads; want %d (the known key read once)", got, want)
	}
	if got := k.unknown.Len(); got != 2 {
		t.Errorf("unknown secrets cached: got %d; want the bound, 2", got)
	}
}

// TestDefaultKeysUnderMetrics: without Config.Keys the middleware looks
// keys up in the tracker's store, also when Metrics.InstrumentStore wraps
// it.
func TestDefaultKeysUnderMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := tokenbudget.OpenStore(ctx, filepath.Join(t.TempDir(), "budget.db"), tokenbudget.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	tr, err := budget.New(ctx, NewMetrics(prometheus.NewRegistry()).InstrumentStore(s), cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(tr, Config{})
	if err != nil {
		t.Fatalf("New without Keys over an instrumented store: %v", err)
	}
	t.Cleanup(func() {
		m.keys.(*Keys).Wait()
		tr.Close(context.Background())
		s.Close()
	})
	secret, err := AddKey(ctx, s.(KeyStore), "app", keysNow)
	if err != nil {
		t.Fatal(err)
	}
	if name, err := m.keys.Lookup(ctx, secret); name != "app" || err != nil {
		t.Errorf("lookup through the default Keys: got %q %v; want app", name, err)
	}
}
