package proxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

// KeyPrefix starts every gateway key secret, so one is easy to recognise
// (and to scan for in leaked text).
const KeyPrefix = "tbk_"

// DefaultKeyTTL is how long Keys trusts a lookup, found or not: a revoked
// key stops working within it, in every process on the database.
const DefaultKeyTTL = 5 * time.Second

// Bounds of Keys' caches. Known keys and unknown secrets are cached apart,
// each evicting its least recently used entry when full, so a flood of
// made-up secrets never pushes a real key out (nor empties the cache).
const (
	defaultKeyCacheSize     = 10_000
	defaultUnknownCacheSize = 4_096
)

// DefaultTouchInterval is how often at most Keys records a key's use
// (gatekey.Key.LastUsedAt): a write a minute per key, off the request path.
const DefaultTouchInterval = time.Minute

// DefaultRotateGrace is how long 'budget key rotate' keeps the old secret
// working by default: time to roll the new one out.
const DefaultRotateGrace = time.Hour

// KeyStore keeps the gateway keys Keys looks up and the key functions
// below write. Both stores (sqlite.DB, postgres.DB) implement it; its
// contract is gatekey.Store's, defined there so a store need not import
// this package. tokenbudget.DB.KeyStore returns the one of a database.
type KeyStore = gatekey.Store

// ErrUnknownKey is returned by a KeyLookup for a secret that names no
// usable key: unknown, revoked, or absent. The proxy answers 401.
var ErrUnknownKey = errors.New("unknown or revoked gateway key")

// KeyLookup maps a gateway secret to the key name that limits apply to. It
// returns ErrUnknownKey for a secret that names no usable key and any other
// error when it cannot tell (the proxy then answers 503). It must be safe
// for concurrent use.
type KeyLookup interface {
	Lookup(ctx context.Context, secret string) (name string, err error)
}

// KeyFunc adapts a function to KeyLookup.
type KeyFunc func(ctx context.Context, secret string) (string, error)

// Lookup calls f.
func (f KeyFunc) Lookup(ctx context.Context, secret string) (string, error) { return f(ctx, secret) }

// NewKeySecret returns a new random gateway secret: KeyPrefix and 43
// characters of base64url (256 bits).
func NewKeySecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("proxy: new key secret: %w", err)
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// HashKey is the hex SHA-256 of a secret: the only form stored.
func HashKey(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// AddKey creates the gateway key name in s with a new secret, stored only
// as its hash, and returns the secret: it cannot be read back later. A name
// that exists (revoked ones included) is invalid input; see ReuseKey.
func AddKey(ctx context.Context, s KeyStore, name string, at time.Time) (secret string, err error) {
	return addKey(ctx, s, name, at, false)
}

// ReuseKey is AddKey that also takes the name of a revoked key: the name,
// and so its limits and their windows, get a new secret (the revoked one
// stays refused). A live key's name is invalid input: rotate it instead.
func ReuseKey(ctx context.Context, s KeyStore, name string, at time.Time) (secret string, err error) {
	return addKey(ctx, s, name, at, true)
}

func addKey(ctx context.Context, s KeyStore, name string, at time.Time, reuse bool) (secret string, err error) {
	name = strings.TrimSpace(name)
	if err := ValidKeyName(name); err != nil {
		return "", err
	}
	if secret, err = NewKeySecret(); err != nil {
		return "", err
	}
	k := gatekey.Key{Name: name, Hash: HashKey(secret), CreatedAt: at.UTC()}
	if reuse {
		err := s.ReuseKey(ctx, k)
		if err == nil {
			return secret, nil
		}
		if !errors.Is(err, budget.ErrNotFound) {
			return "", err
		}
		// No key has the name: a new one. Should another process insert
		// it first, InsertKey refuses the name as taken.
	}
	if err := s.InsertKey(ctx, k); err != nil {
		return "", err
	}
	return secret, nil
}

// RotateKey gives the live key name a new secret and returns it; the old
// secret keeps working until at + grace (a grace of 0 refuses it at once,
// give or take the DefaultKeyTTL a running proxy trusts a lookup). The
// name, its limits and their windows are unchanged. A secret replaced by
// an earlier rotation stops working now. An unknown name is
// budget.ErrNotFound; a revoked one invalid input.
func RotateKey(ctx context.Context, s KeyStore, name string, grace time.Duration, at time.Time) (secret string, err error) {
	name = strings.TrimSpace(name)
	if err := ValidKeyName(name); err != nil {
		return "", err
	}
	if grace < 0 {
		return "", budget.Invalid("grace", grace, "must not be negative")
	}
	if secret, err = NewKeySecret(); err != nil {
		return "", err
	}
	until := at.UTC().Add(grace)
	if err := s.RotateKey(ctx, name, HashKey(secret), until); err != nil {
		return "", err
	}
	return secret, nil
}

// ValidKeyName checks a key name: 1 to 200 bytes of valid UTF-8, no spaces
// or control characters (it is the key limits are set for, and a name is
// printed in tables, logs and errors). An error quotes only the name's
// start.
func ValidKeyName(name string) error {
	if err := budget.CheckLabel("name", name); err != nil {
		return err
	}
	if name == "" || len(name) > 200 {
		return budget.Invalid("name", name, "must be 1 to 200 bytes")
	}
	for _, r := range name {
		if unicode.IsSpace(r) {
			return budget.Invalid("name", name, "must not contain spaces or control characters")
		}
	}
	return nil
}

// Secret returns the gateway secret a request presents: the token of
// "Authorization: Bearer", else the x-api-key header, else Azure's api-key
// header, where each SDK sends its API key ("" when none).
func Secret(h http.Header) string {
	if a := h.Get("Authorization"); a != "" {
		if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			return strings.TrimSpace(a[7:])
		}
	}
	for _, name := range keyHeaders {
		if k := strings.TrimSpace(h.Get(name)); k != "" {
			return k
		}
	}
	return ""
}

// keyHeaders are the headers besides Authorization an SDK sends its API key
// in: Anthropic's x-api-key, Azure OpenAI's api-key, Gemini's
// x-goog-api-key. Bedrock API keys travel as Authorization: Bearer.
var keyHeaders = [...]string{"X-Api-Key", "Api-Key", "X-Goog-Api-Key"}

// RequestSecret is Secret, else the ?key= query parameter Gemini's API
// key may travel in.
func RequestSecret(r *http.Request) string {
	if s := Secret(r.Header); s != "" {
		return s
	}
	if r.URL == nil || !strings.Contains(r.URL.RawQuery, "key=") {
		return ""
	}
	k, _ := url.ParseQuery(r.URL.RawQuery)
	return strings.TrimSpace(k.Get("key"))
}

// stripKey removes every place a gateway key may sit in r, so none reaches
// the upstream: the key headers, Authorization, and the key query
// parameter (the rest of the query is kept byte for byte, as a re-encoding
// could change what an upstream reads).
func stripKey(r *http.Request) {
	r.Header.Del("Authorization")
	for _, name := range keyHeaders {
		r.Header.Del(name)
	}
	if r.URL == nil || !strings.Contains(r.URL.RawQuery, "key=") {
		return
	}
	parts := strings.Split(r.URL.RawQuery, "&")
	kept := parts[:0]
	for _, p := range parts {
		name, _, _ := strings.Cut(p, "=")
		if n, err := url.QueryUnescape(name); err == nil && n == "key" || name == "key" {
			continue
		}
		kept = append(kept, p)
	}
	r.URL.RawQuery = strings.Join(kept, "&")
	r.URL.ForceQuery = false
}

// Keys looks gateway secrets up by their hash in a KeyStore and caches each
// answer (the key found, or that there is none) for TTL: a key added by
// another process works within TTL (at once unless its secret was just
// tried in vain), a revoked one stops within TTL. Whether a
// key found opens for a secret is decided at every lookup with the current
// time (gatekey.Key.Accepts), so a rotated key's old secret stops at
// the end of its grace period exactly, cached or not. Known keys and
// unknown secrets are cached apart, each bounded and evicting its least
// recently used entry. A key's use is recorded in the store at most once
// per DefaultTouchInterval, by a goroutine of its own: never on the
// request's path. Keys is safe for concurrent use.
type Keys struct {
	// TTL is how long an answer is trusted. (Optional; default DefaultKeyTTL.)
	TTL time.Duration
	// Now is the clock. (Optional; default time.Now.)
	Now func() time.Time
	// OnTouchError is called when recording a key's use fails (the use is
	// not retried: the next one a minute later records it). (Optional.)
	OnTouchError func(name string, err error)

	store   KeyStore
	known   *lru.Cache[string, *keyEntry] // by hash
	unknown *lru.Cache[string, time.Time] // by hash: when it was found missing
	touches sync.WaitGroup
	rules   sync.Map // key name -> *keyEntry its last lookup found (keyrules.go)
}

// keyEntry is a key found by a hash: the key's row as loaded, and when its
// use was last recorded (Unix ns; shared by reloads of the same key).
type keyEntry struct {
	key      gatekey.Key
	loadedAt time.Time
	touched  *atomic.Int64
}

// NewKeys returns a lookup over s with the default TTL.
func NewKeys(s KeyStore) *Keys {
	known, _ := lru.New[string, *keyEntry](defaultKeyCacheSize)
	unknown, _ := lru.New[string, time.Time](defaultUnknownCacheSize)
	return &Keys{store: s, known: known, unknown: unknown}
}

// Lookup returns the name of the usable key whose secret is secret, or
// ErrUnknownKey.
func (k *Keys) Lookup(ctx context.Context, secret string) (string, error) {
	if secret == "" {
		return "", ErrUnknownKey
	}
	now := time.Now
	if k.Now != nil {
		now = k.Now
	}
	ttl := k.TTL
	if ttl <= 0 {
		ttl = DefaultKeyTTL
	}
	hash := HashKey(secret)
	t := now()
	fresh := func(at time.Time) bool { return !t.Before(at) && t.Sub(at) < ttl }
	e, ok := k.known.Get(hash)
	if !ok || !fresh(e.loadedAt) {
		if at, ok := k.unknown.Get(hash); ok && fresh(at) {
			return "", ErrUnknownKey
		}
		gk, err := k.store.KeyByHash(ctx, hash)
		switch {
		case errors.Is(err, budget.ErrNotFound):
			k.known.Remove(hash)
			k.unknown.Add(hash, t)
			return "", ErrUnknownKey
		case err != nil:
			return "", fmt.Errorf("proxy: look up gateway key: %w", err)
		}
		ne := &keyEntry{key: gk, loadedAt: t, touched: new(atomic.Int64)}
		if e != nil && e.key.Name == gk.Name {
			ne.touched = e.touched
		}
		e = ne
		k.unknown.Remove(hash)
		k.known.Add(hash, e)
	}
	if !e.key.Accepts(hash, t) {
		return "", ErrUnknownKey
	}
	k.rules.Store(e.key.Name, e)
	k.touch(e, t)
	return e.key.Name, nil
}

// touch records the key's use at t unless this process did within the
// last DefaultTouchInterval. It runs the write on its own goroutine.
func (k *Keys) touch(e *keyEntry, t time.Time) {
	last := e.touched.Load()
	if last != 0 && t.UnixNano()-last < int64(DefaultTouchInterval) || !e.touched.CompareAndSwap(last, t.UnixNano()) {
		return
	}
	name := e.key.Name
	k.touches.Add(1)
	go func() {
		defer k.touches.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := k.store.TouchKey(ctx, name, t)
		if err != nil && k.OnTouchError != nil {
			k.OnTouchError(name, err)
		}
	}()
}

// Wait waits for the key uses being recorded: call it before closing the
// store.
func (k *Keys) Wait() { k.touches.Wait() }
