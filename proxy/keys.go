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
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/tokenbudget/tokenbudget/budget"
)

// KeyPrefix starts every gateway key secret, so one is easy to recognise
// (and to scan for in leaked text).
const KeyPrefix = "tbk_"

// DefaultKeyTTL is how long Keys trusts a lookup: a revoked key stops
// working within it, in every process on the database.
const DefaultKeyTTL = 5 * time.Second

// defaultKeyCacheSize bounds Keys' cache; past it the cache starts over.
const defaultKeyCacheSize = 10_000

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
// that exists (revoked ones included) is invalid input.
func AddKey(ctx context.Context, s budget.Store, name string, at time.Time) (secret string, err error) {
	name = strings.TrimSpace(name)
	if err := ValidKeyName(name); err != nil {
		return "", err
	}
	if secret, err = NewKeySecret(); err != nil {
		return "", err
	}
	k := budget.GatewayKey{Name: name, Hash: HashKey(secret), CreatedAt: at.UTC()}
	if err := s.Update(ctx, func(tx budget.Tx) error { return tx.InsertKey(ctx, k) }); err != nil {
		return "", err
	}
	return secret, nil
}

// ValidKeyName checks a key name: 1 to 200 bytes of valid UTF-8, no spaces
// or control characters (it is the key limits are set for, and a name is
// printed in tables, logs and errors). An error quotes only the name's
// start.
func ValidKeyName(name string) error {
	if err := budget.CheckName("name", name); err != nil {
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
// "Authorization: Bearer", else the x-api-key header ("" when neither).
func Secret(h http.Header) string {
	if a := h.Get("Authorization"); a != "" {
		if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			return strings.TrimSpace(a[7:])
		}
	}
	return strings.TrimSpace(h.Get("X-Api-Key"))
}

// Keys looks gateway secrets up by their hash in a Store and caches each
// answer (the name, or that the secret is unknown or revoked) for TTL: a
// key added by another process works at once, a revoked one stops within
// TTL. Keys is safe for concurrent use.
type Keys struct {
	// TTL is how long an answer is trusted. (Optional; default DefaultKeyTTL.)
	TTL time.Duration
	// Now is the clock. (Optional; default time.Now.)
	Now func() time.Time

	store budget.Store
	mu    sync.RWMutex
	cache map[string]keyEntry // by hash
}

type keyEntry struct {
	name     string // "" for unknown or revoked
	loadedAt time.Time
}

// NewKeys returns a lookup over s with the default TTL.
func NewKeys(s budget.Store) *Keys {
	return &Keys{store: s, cache: make(map[string]keyEntry)}
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
	k.mu.RLock()
	e, ok := k.cache[hash]
	k.mu.RUnlock()
	if !ok || t.Sub(e.loadedAt) >= ttl || t.Before(e.loadedAt) {
		var gk budget.GatewayKey
		err := k.store.View(ctx, func(tx budget.Tx) error {
			var err error
			gk, err = tx.KeyByHash(ctx, hash)
			return err
		})
		switch {
		case errors.Is(err, budget.ErrNotFound):
			gk = budget.GatewayKey{}
		case err != nil:
			return "", fmt.Errorf("proxy: look up gateway key: %w", err)
		}
		e = keyEntry{loadedAt: t}
		if gk.Name != "" && gk.RevokedAt.IsZero() {
			e.name = gk.Name
		}
		k.mu.Lock()
		if len(k.cache) >= defaultKeyCacheSize {
			clear(k.cache)
		}
		k.cache[hash] = e
		k.mu.Unlock()
	}
	if e.name == "" {
		return "", ErrUnknownKey
	}
	return e.name, nil
}
