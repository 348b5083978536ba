// Package gatekey holds the gateway keys of `budget proxy`: the credentials
// applications present, stored only as hashes of their secrets.
//
// The proxy owns this seam (proxy.KeyStore is Store), but it lives in a leaf
// package of its own so that the stores (store, store/postgres), which keep
// the keys beside the budget state, implement it without importing the
// HTTP layer, and the proxy without importing a database. A key's name is
// the key limits are set for in budget; the secret, its hash and the
// key's lifecycle are known only here and in the proxy.
//
// Errors wrap budget.ErrNotFound and budget.ErrInvalid, so callers (the CLI's
// exit codes) treat a missing or refused key as they do a missing or
// refused limit.
package gatekey

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Key is a gateway key as stored: only the SHA-256 of its secret is kept.
// A Key is a value; it is safe to copy and to read concurrently.
type Key struct {
	Name      string
	Hash      string // hex SHA-256 of the secret
	CreatedAt time.Time
	RevokedAt time.Time // zero while usable
	// PrevHash is the hash of the secret a rotation replaced, still
	// accepted until PrevUntil (the grace period); "" when none.
	PrevHash  string
	PrevUntil time.Time
	// LastUsedAt is when the key was last seen, to within a minute
	// (zero: never).
	LastUsedAt time.Time
	// ExpiresAt is when the key stops working (zero: never). Unlike a
	// revoked key, an expired one is still found: the proxy answers it
	// 401 key_expired rather than "unknown key".
	ExpiresAt time.Time
	// Models are the patterns (budget.MatchModel's, as limits use) of the
	// models the key may ask for; none: any model.
	Models []string
}

// Expired reports whether the key has expired at now.
func (k *Key) Expired(now time.Time) bool {
	return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt)
}

// KeyChange is a change of a key's rules (PATCH): a nil field is left as
// it is.
type KeyChange struct {
	ExpiresAt *time.Time // zero time: never expires
	Models    *[]string  // empty: any model
}

// Accepts reports whether a secret with hash hash opens this key at now:
// the key is not revoked and hash is its secret's, or its previous
// secret's within the grace period of a rotation. It is decided at each
// use with the current time, so a cached Key never stretches a grace.
func (k *Key) Accepts(hash string, now time.Time) bool {
	if !k.RevokedAt.IsZero() || hash == "" {
		return false
	}
	return hash == k.Hash || hash == k.PrevHash && now.Before(k.PrevUntil)
}

// Store keeps gateway keys. Each method is one transaction of its own,
// committed when it returns nil: no caller needs two of them to be atomic,
// and key writes are rare next to budget writes.
//
// Implementations MUST be safe for concurrent use by several goroutines and
// by several processes sharing the database, MUST retry transient conflicts
// (SQLITE_BUSY, serialization failures) themselves, and store instants with
// nanosecond precision. A method that finds no key of the name it is given
// returns an error wrapping budget.ErrNotFound; one refused by the key's
// state an error wrapping budget.ErrInvalid that names the field and value.
type Store interface {
	// InsertKey adds k as given: a new key, or one restored from another
	// database with its revocation, previous secret and last use. A name
	// that exists, revoked or not, is budget.ErrInvalid ("name"); nothing
	// is written.
	InsertKey(ctx context.Context, k Key) error
	// KeyByHash finds the key whose secret, or previous secret, hashes to
	// hash, revoked or not and whatever the grace period: Key.Accepts
	// decides whether it opens. An unknown hash is budget.ErrNotFound.
	KeyByHash(ctx context.Context, hash string) (Key, error)
	// RotateKey gives the live key name the secret hashing to hash; its
	// current secret becomes the previous one, accepted until graceUntil,
	// and a previous secret of an earlier rotation is forgotten. A revoked
	// name is budget.ErrInvalid.
	RotateKey(ctx context.Context, name, hash string, graceUntil time.Time) error
	// ReuseKey gives a revoked key's name to k (k.Hash, k.CreatedAt; not
	// revoked, no previous secret, never used). A live key's name is
	// budget.ErrInvalid.
	ReuseKey(ctx context.Context, k Key) error
	// TouchKey records a use of key name at at, unless the use recorded
	// last is a minute or less before at (or later), so a busy key costs
	// a write a minute.
	// An unknown name is not an error: the key may have been removed
	// since it was looked up.
	TouchKey(ctx context.Context, name string, at time.Time) error
	// ListKeys lists every key, revoked ones included, ordered by name
	// byte by byte.
	ListKeys(ctx context.Context) ([]Key, error)
	// RevokeKey revokes key name at at, for good: its name stays taken
	// until ReuseKey. It reports whether this call revoked it (false: it
	// was revoked already, which is no error).
	RevokeKey(ctx context.Context, name string, at time.Time) (revoked bool, err error)
	// UpdateKey changes the rules of key name (revoked or not) as c says
	// and returns the key as changed; at is the change's instant.
	UpdateKey(ctx context.Context, name string, c KeyChange, at time.Time) (Key, error)
}

// Tx is the gateway keys inside a store's budget transaction (a store's
// budget.Tx implements it; find it by type assertion), for changes that
// must land with others in one transaction: a config apply. Its writes
// log no audit entry: the caller logs the changes it makes.
type Tx interface {
	// GatewayKeys lists every key, unordered.
	GatewayKeys(ctx context.Context) ([]Key, error)
	// PutGatewayKey writes k whole: a new key, or the row of its name
	// replaced (its last use kept). A hash another key has is
	// budget.ErrInvalid.
	PutGatewayKey(ctx context.Context, k Key) error
}

// AllowsModel reports whether the key may ask for model: it has no model
// patterns, or one matches the model's normalised name as a model-scope
// limit's value would.
func (k *Key) AllowsModel(model string) bool {
	if len(k.Models) == 0 {
		return true
	}
	m := budget.NormalizeModel(model)
	for _, p := range k.Models {
		if budget.MatchModel(p, m) {
			return true
		}
	}
	return false
}

// ModelPatterns validates the patterns of `key add --models` (field
// models): each a model name or a pattern with * and ?, normalised as a
// model-scope limit's value is. Duplicates are dropped; nil stays nil.
func ModelPatterns(ps []string) ([]string, error) {
	var out []string
	for _, p := range ps {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, budget.Invalid("models", p, "a model pattern must not be empty")
		}
		if err := budget.CheckLabel("models", p); err != nil {
			return nil, err
		}
		if strings.ContainsAny(p, "[] ,") {
			return nil, budget.Invalid("models", p, "a model name or pattern takes no brackets, spaces or commas (patterns use * and ?)")
		}
		p = budget.NormalizeModel(p)
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// CheckExpiry refuses an expiry that is not after now (field expires).
func CheckExpiry(expires, now time.Time) error {
	if expires.IsZero() {
		return nil
	}
	if err := budget.CheckInstant("expires", expires); err != nil {
		return err
	}
	if !expires.After(now) {
		return budget.Invalid("expires", expires.UTC().Format(time.RFC3339), "must be in the future")
	}
	return nil
}

// Audited is a key as the audit log and a config diff show it: its name,
// state and rules, never its hash.
func (k *Key) Audited() any {
	type view struct {
		Name      string     `json:"name"`
		CreatedAt time.Time  `json:"created_at"`
		RevokedAt *time.Time `json:"revoked_at"`
		Rotating  *time.Time `json:"rotating_until,omitempty"`
		ExpiresAt *time.Time `json:"expires_at"`
		Models    []string   `json:"models"`
	}
	tp := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	return view{Name: k.Name, CreatedAt: k.CreatedAt.UTC(), RevokedAt: tp(k.RevokedAt), Rotating: tp(k.PrevUntil),
		ExpiresAt: tp(k.ExpiresAt), Models: append([]string{}, k.Models...)}
}

// Create stores the new key k (its Hash, CreatedAt and rules set): a new
// name, or with reuse a revoked key's name taken again (see
// Store.ReuseKey), in one transaction with its audit entry. A name that
// exists (revoked ones included, without reuse) is budget.ErrInvalid.
func Create(ctx context.Context, s Store, k Key, reuse bool) error {
	if reuse {
		err := s.ReuseKey(ctx, k)
		if err == nil || !errors.Is(err, budget.ErrNotFound) {
			return err
		}
		// No key has the name: a new one. Should another process insert
		// it first, InsertKey refuses the name as taken.
	}
	return s.InsertKey(ctx, k)
}

// CreateIn is Create inside a budget transaction, as the create of
// budget.Tracker.PlaceNewKey: the key is written through the transaction's
// Tx role, under the same rules (a name that exists is budget.ErrInvalid
// naming "name", unless reuse and the key is revoked), and its audit change
// is returned for the caller to log. A reused name keeps its old last use
// until the new secret's first request.
func CreateIn(k Key, reuse bool) func(ctx context.Context, tx budget.Tx) ([]budget.Change, error) {
	return func(ctx context.Context, btx budget.Tx) ([]budget.Change, error) {
		tx, ok := btx.(Tx)
		if !ok {
			return nil, fmt.Errorf("gateway keys: %T keeps none", btx)
		}
		keys, err := tx.GatewayKeys(ctx)
		if err != nil {
			return nil, err
		}
		var cur *Key
		for i := range keys {
			if keys[i].Name == k.Name {
				cur = &keys[i]
			}
		}
		switch {
		case cur != nil && cur.RevokedAt.IsZero():
			return nil, budget.Invalid("name", k.Name, "a key with this name exists")
		case cur != nil && !reuse:
			return nil, budget.Invalid("name", k.Name, "a key with this name exists (revoked: reuse takes it again)")
		}
		if err := tx.PutGatewayKey(ctx, k); err != nil {
			return nil, err
		}
		c, err := keyChange(ctx, btx, cur, &k)
		c.Action = budget.AuditCreate
		return []budget.Change{c}, err
	}
}
