package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

// The proxy's gateway keys, kept beside the budget state as the SQL stores
// keep them: each method is a transaction of its own, outside the budget
// transactions (it moves no Mark, and the hooks do not touch it).
var _ gatekey.Store = (*Store)(nil)

type keyRow = gatekey.Key

func (s *Store) keys(fn func(m map[string]keyRow) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.db.keysMu.Lock()
	defer s.db.keysMu.Unlock()
	return fn(s.db.keys)
}

func keyNotFound(name string) error {
	return fmt.Errorf("gateway key %q: %w", name, budget.ErrNotFound)
}

// InsertKey implements gatekey.Store.
func (s *Store) InsertKey(_ context.Context, k gatekey.Key) error {
	return s.keys(func(m map[string]keyRow) error {
		// As in the SQL stores, a name or a hash taken is one refusal.
		taken := false
		for _, o := range m {
			taken = taken || o.Name == k.Name || o.Hash == k.Hash
		}
		if taken {
			return budget.Invalid("name", k.Name, "a key with this name exists")
		}
		m[k.Name] = gatekey.Key{Name: k.Name, Hash: k.Hash, CreatedAt: stored(k.CreatedAt), RevokedAt: stored(k.RevokedAt),
			PrevHash: k.PrevHash, PrevUntil: stored(k.PrevUntil), LastUsedAt: stored(k.LastUsedAt)}
		return nil
	})
}

// KeyByHash implements gatekey.Store.
func (s *Store) KeyByHash(_ context.Context, hash string) (k gatekey.Key, err error) {
	err = s.keys(func(m map[string]keyRow) error {
		for _, o := range m {
			if o.Hash == hash {
				k = o
				return nil
			}
		}
		for _, o := range m {
			if o.PrevHash != "" && o.PrevHash == hash {
				k = o
				return nil
			}
		}
		return fmt.Errorf("gateway key: %w", budget.ErrNotFound)
	})
	return k, err
}

// RotateKey implements gatekey.Store.
func (s *Store) RotateKey(_ context.Context, name, hash string, graceUntil time.Time) error {
	return s.keys(func(m map[string]keyRow) error {
		k, ok := m[name]
		switch {
		case !ok:
			return keyNotFound(name)
		case !k.RevokedAt.IsZero():
			return budget.Invalid("name", name, "is revoked: 'budget key add --reuse' takes the name again")
		}
		k.PrevHash, k.PrevUntil, k.Hash = k.Hash, stored(graceUntil), hash
		m[name] = k
		return nil
	})
}

// ReuseKey implements gatekey.Store.
func (s *Store) ReuseKey(_ context.Context, k gatekey.Key) error {
	return s.keys(func(m map[string]keyRow) error {
		cur, ok := m[k.Name]
		switch {
		case !ok:
			return keyNotFound(k.Name)
		case cur.RevokedAt.IsZero():
			return budget.Invalid("name", k.Name, "is in use (only a revoked name can be taken again)")
		}
		m[k.Name] = gatekey.Key{Name: k.Name, Hash: k.Hash, CreatedAt: stored(k.CreatedAt)}
		return nil
	})
}

// TouchKey implements gatekey.Store.
func (s *Store) TouchKey(_ context.Context, name string, at time.Time) error {
	return s.keys(func(m map[string]keyRow) error {
		k, ok := m[name]
		if ok && ns(k.LastUsedAt) < ns(at.Add(-time.Minute)) {
			k.LastUsedAt = stored(at)
			m[name] = k
		}
		return nil
	})
}

// ListKeys implements gatekey.Store.
func (s *Store) ListKeys(context.Context) (ks []gatekey.Key, err error) {
	err = s.keys(func(m map[string]keyRow) error {
		for _, k := range m {
			ks = append(ks, k)
		}
		slices.SortFunc(ks, func(a, b gatekey.Key) int { return strings.Compare(a.Name, b.Name) })
		return nil
	})
	return ks, err
}

// RevokeKey implements gatekey.Store.
func (s *Store) RevokeKey(_ context.Context, name string, at time.Time) (revoked bool, err error) {
	err = s.keys(func(m map[string]keyRow) error {
		k, ok := m[name]
		switch {
		case !ok:
			return keyNotFound(name)
		case !k.RevokedAt.IsZero():
			return nil
		}
		k.RevokedAt = stored(at)
		m[name] = k
		revoked = true
		return nil
	})
	return revoked, err
}
