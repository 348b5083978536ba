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

// The proxy's gateway keys and the admin tokens, kept in the state beside
// the budget state as the SQL stores keep them: each gatekey method is a
// transaction of its own that no hook touches and no Mark counts (keys are
// nothing the writer decides on), and a budget transaction reaches the
// keys too (gatekey.Tx), for a change that must land with others. Every
// change but a key's use logs its audit entry in its transaction.
var (
	_ gatekey.Store      = (*Store)(nil)
	_ gatekey.AdminStore = (*Store)(nil)
	_ gatekey.Tx         = (*tx)(nil)
)

// keyUpdate runs fn in a write transaction of its own, outside the hooks
// and Mark.
func (s *Store) keyUpdate(fn func(t *tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	t := &tx{s: s, st: s.db.state.Load().fork()}
	if err := fn(t); err != nil {
		return err
	}
	t.st.base = nil
	s.db.state.Store(t.st)
	return nil
}

// keyView runs fn on the last committed state.
func (s *Store) keyView(fn func(t *tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return fn(&tx{s: s, st: s.db.state.Load(), ro: true})
}

func keyNotFound(name string) error {
	return fmt.Errorf("gateway key %q: %w", name, budget.ErrNotFound)
}

func storedKey(k gatekey.Key) gatekey.Key {
	k.CreatedAt, k.RevokedAt, k.PrevUntil, k.LastUsedAt, k.ExpiresAt = stored(k.CreatedAt), stored(k.RevokedAt), stored(k.PrevUntil), stored(k.LastUsedAt), stored(k.ExpiresAt)
	if len(k.Models) == 0 {
		k.Models = nil
	}
	k.Models = slices.Clone(k.Models)
	return k
}

// putKey writes k as stored.
func (t *tx) putKey(k gatekey.Key) {
	own(t.st, "gkeys", &t.st.gkeys)
	t.st.gkeys[k.Name] = storedKey(k)
}

// auditKey logs a change of key name from before to after (nil: none).
func (t *tx) auditKey(ctx context.Context, at time.Time, action budget.AuditAction, name string, before, after *gatekey.Key) error {
	team := t.st.keyTeams[name]
	where := budget.Placed{Team: team, Org: t.st.teams[team]}
	var b, a any
	if before != nil {
		b = before.Audited()
	}
	if after != nil {
		a = after.Audited()
	}
	e, err := budget.NewAudit(ctx, at, action, budget.ObjectKey, name, where, b, a)
	if err != nil {
		return err
	}
	return t.AppendAudit(ctx, e)
}

// InsertKey implements gatekey.Store.
func (s *Store) InsertKey(ctx context.Context, k gatekey.Key) error {
	return s.keyUpdate(func(t *tx) error {
		if err := t.insertKey(k); err != nil {
			return err
		}
		return t.auditKey(ctx, k.CreatedAt, budget.AuditCreate, k.Name, nil, &k)
	})
}

func (t *tx) insertKey(k gatekey.Key) error {
	// As in the SQL stores, a name or a hash taken is one refusal.
	for _, o := range t.st.gkeys {
		if o.Name == k.Name || o.Hash == k.Hash {
			return budget.Invalid("name", k.Name, "a key with this name exists")
		}
	}
	t.putKey(k)
	return nil
}

// KeyByHash implements gatekey.Store.
func (s *Store) KeyByHash(_ context.Context, hash string) (k gatekey.Key, err error) {
	err = s.keyView(func(t *tx) error {
		for _, o := range t.st.gkeys {
			if o.Hash == hash {
				k = o
				return nil
			}
		}
		for _, o := range t.st.gkeys {
			if o.PrevHash != "" && o.PrevHash == hash {
				k = o
				return nil
			}
		}
		return fmt.Errorf("gateway key: %w", budget.ErrNotFound)
	})
	return k, err
}

// RotateKey implements gatekey.Store. Its audit entry is at the wall
// clock's now, as the SQL stores'.
func (s *Store) RotateKey(ctx context.Context, name, hash string, graceUntil time.Time) error {
	return s.keyUpdate(func(t *tx) error {
		k, ok := t.st.gkeys[name]
		switch {
		case !ok:
			return keyNotFound(name)
		case !k.RevokedAt.IsZero():
			return budget.Invalid("name", name, "is revoked: 'budget key add --reuse' takes the name again")
		}
		before := k
		k.PrevHash, k.PrevUntil, k.Hash = k.Hash, graceUntil, hash
		t.putKey(k)
		return t.auditKey(ctx, time.Now(), budget.AuditRotate, name, &before, &k)
	})
}

// ReuseKey implements gatekey.Store.
func (s *Store) ReuseKey(ctx context.Context, k gatekey.Key) error {
	return s.keyUpdate(func(t *tx) error {
		cur, ok := t.st.gkeys[k.Name]
		switch {
		case !ok:
			return keyNotFound(k.Name)
		case cur.RevokedAt.IsZero():
			return budget.Invalid("name", k.Name, "is in use (only a revoked name can be taken again)")
		}
		n := gatekey.Key{Name: k.Name, Hash: k.Hash, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, Models: k.Models}
		t.putKey(n)
		return t.auditKey(ctx, k.CreatedAt, budget.AuditCreate, k.Name, &cur, &n)
	})
}

// UpdateKey implements gatekey.Store.
func (s *Store) UpdateKey(ctx context.Context, name string, c gatekey.KeyChange, at time.Time) (out gatekey.Key, err error) {
	err = s.keyUpdate(func(t *tx) error {
		k, ok := t.st.gkeys[name]
		if !ok {
			return keyNotFound(name)
		}
		before := k
		if c.ExpiresAt != nil {
			k.ExpiresAt = *c.ExpiresAt
		}
		if c.Models != nil {
			k.Models = *c.Models
		}
		t.putKey(k)
		out = t.st.gkeys[name]
		return t.auditKey(ctx, at, budget.AuditUpdate, name, &before, &out)
	})
	return out, err
}

// TouchKey implements gatekey.Store.
func (s *Store) TouchKey(_ context.Context, name string, at time.Time) error {
	return s.keyUpdate(func(t *tx) error {
		k, ok := t.st.gkeys[name]
		if ok && ns(k.LastUsedAt) < ns(at.Add(-time.Minute)) {
			k.LastUsedAt = at
			t.putKey(k)
		}
		return nil
	})
}

// ListKeys implements gatekey.Store.
func (s *Store) ListKeys(ctx context.Context) (ks []gatekey.Key, err error) {
	err = s.keyView(func(t *tx) error {
		ks, err = t.GatewayKeys(ctx)
		slices.SortFunc(ks, func(a, b gatekey.Key) int { return strings.Compare(a.Name, b.Name) })
		return err
	})
	return ks, err
}

// RevokeKey implements gatekey.Store.
func (s *Store) RevokeKey(ctx context.Context, name string, at time.Time) (revoked bool, err error) {
	err = s.keyUpdate(func(t *tx) error {
		k, ok := t.st.gkeys[name]
		switch {
		case !ok:
			return keyNotFound(name)
		case !k.RevokedAt.IsZero():
			return nil
		}
		before := k
		k.RevokedAt = at
		t.putKey(k)
		revoked = true
		return t.auditKey(ctx, at, budget.AuditRevoke, name, &before, &k)
	})
	return revoked, err
}

// GatewayKeys implements gatekey.Tx.
func (t *tx) GatewayKeys(context.Context) ([]gatekey.Key, error) {
	ks := make([]gatekey.Key, 0, len(t.st.gkeys))
	for _, k := range t.st.gkeys {
		ks = append(ks, k)
	}
	return ks, nil
}

// PutGatewayKey implements gatekey.Tx.
func (t *tx) PutGatewayKey(_ context.Context, k gatekey.Key) error {
	if err := t.write(); err != nil {
		return err
	}
	for _, o := range t.st.gkeys {
		if o.Name != k.Name && o.Hash == k.Hash {
			return budget.Invalid("hash", k.Name, "another gateway key has this key's secret")
		}
	}
	if cur, ok := t.st.gkeys[k.Name]; ok {
		k.LastUsedAt = cur.LastUsedAt
	}
	t.putKey(k)
	return nil
}

// InsertAdminToken implements gatekey.AdminStore.
func (s *Store) InsertAdminToken(ctx context.Context, a gatekey.AdminToken) error {
	return s.keyUpdate(func(t *tx) error {
		for _, o := range t.st.admins {
			if o.Name == a.Name || o.Hash == a.Hash {
				return budget.Invalid("name", a.Name, "an admin token with this name exists")
			}
		}
		a.CreatedAt, a.RevokedAt = stored(a.CreatedAt), time.Time{}
		own(t.st, "admins", &t.st.admins)
		t.st.admins[a.Name] = a
		e, err := budget.NewAudit(ctx, a.CreatedAt, budget.AuditCreate, budget.ObjectAdminToken, a.Name, budget.Placed{}, nil, a.Audited())
		if err != nil {
			return err
		}
		return t.AppendAudit(ctx, e)
	})
}

// AdminTokenByHash implements gatekey.AdminStore.
func (s *Store) AdminTokenByHash(_ context.Context, hash string) (a gatekey.AdminToken, err error) {
	err = s.keyView(func(t *tx) error {
		for _, o := range t.st.admins {
			if o.Hash == hash {
				a = o
				return nil
			}
		}
		return fmt.Errorf("admin token: %w", budget.ErrNotFound)
	})
	return a, err
}

// ListAdminTokens implements gatekey.AdminStore.
func (s *Store) ListAdminTokens(context.Context) (as []gatekey.AdminToken, err error) {
	err = s.keyView(func(t *tx) error {
		for _, a := range t.st.admins {
			as = append(as, a)
		}
		slices.SortFunc(as, func(a, b gatekey.AdminToken) int { return strings.Compare(a.Name, b.Name) })
		return nil
	})
	return as, err
}

// RevokeAdminToken implements gatekey.AdminStore.
func (s *Store) RevokeAdminToken(ctx context.Context, name string, at time.Time) (revoked bool, err error) {
	err = s.keyUpdate(func(t *tx) error {
		a, ok := t.st.admins[name]
		switch {
		case !ok:
			return fmt.Errorf("admin token %q: %w", name, budget.ErrNotFound)
		case !a.RevokedAt.IsZero():
			return nil
		}
		before := a
		a.RevokedAt = stored(at)
		own(t.st, "admins", &t.st.admins)
		t.st.admins[name] = a
		revoked = true
		e, err := budget.NewAudit(ctx, at, budget.AuditRevoke, budget.ObjectAdminToken, name, budget.Placed{}, before.Audited(), a.Audited())
		if err != nil {
			return err
		}
		return t.AppendAudit(ctx, e)
	})
	return revoked, err
}

// AppendAudit implements budget.AuditTx.
func (t *tx) AppendAudit(_ context.Context, e budget.AuditEntry) error {
	if err := t.write(); err != nil {
		return err
	}
	if !t.st.cloned["audit"] {
		t.st.audit = slices.Clone(t.st.audit)
		t.st.cloned["audit"] = true
	}
	e.At = stored(e.At)
	t.st.audit = append(t.st.audit, e)
	return nil
}

// Audit implements budget.AuditTx.
func (t *tx) Audit(_ context.Context, since time.Time) ([]budget.AuditEntry, error) {
	var out []budget.AuditEntry
	for _, e := range t.st.audit {
		if ns(e.At) >= ns(since) {
			out = append(out, e)
		}
	}
	return out, nil
}
