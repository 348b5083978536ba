package sqlrow

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

// KeyTx is the key lifecycle in one transaction: the same SQL on both
// stores (placeholders rebound), so each store's gatekey.Store only opens
// and retries the transaction around it. Every change but a key's use
// (Touch) appends its audit entry in the same transaction; Put does not
// (a config apply logs its own changes).
type KeyTx struct{ *sqlx.Tx }

// KeyInsert inserts a key (KeyArgs) unless its name or hash is taken.
const KeyInsert = `INSERT INTO gateway_keys (` + KeyCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`

// KeyReplace replaces a key's row but its last use (KeyReplaceArgs).
const KeyReplace = `UPDATE gateway_keys SET hash = ?, created_at = ?, revoked_at = ?, prev_hash = ?, prev_until = ?,
	expires_at = ?, models = ? WHERE name = ?`

// KeyReplaceArgs are k's values for KeyReplace.
func KeyReplaceArgs(k *gatekey.Key) []any {
	return []any{k.Hash, Ns(k.CreatedAt), Ns(k.RevokedAt), k.PrevHash, Ns(k.PrevUntil), Ns(k.ExpiresAt), joinModels(k.Models), k.Name}
}

// KeyArgs are k's values in KeyCols order.
func KeyArgs(k *gatekey.Key) []any {
	return []any{k.Name, k.Hash, Ns(k.CreatedAt), Ns(k.RevokedAt), k.PrevHash, Ns(k.PrevUntil), Ns(k.LastUsedAt),
		Ns(k.ExpiresAt), joinModels(k.Models)}
}

// Key is the row as a gatekey.Key.
func (r *GatewayKey) Key() gatekey.Key {
	return gatekey.Key{Name: r.Name, Hash: r.Hash, CreatedAt: FromNs(r.CreatedAt), RevokedAt: FromNs(r.RevokedAt),
		PrevHash: r.PrevHash, PrevUntil: FromNs(r.PrevUntil), LastUsedAt: FromNs(r.LastUsed),
		ExpiresAt: FromNs(r.ExpiresAt), Models: splitModels(r.Models)}
}

// byName reads key name; ok is false when there is none.
func (x KeyTx) byName(ctx context.Context, name string) (k gatekey.Key, ok bool, err error) {
	var r GatewayKey
	err = x.GetContext(ctx, &r, x.Rebind(`SELECT `+KeyCols+` FROM gateway_keys WHERE name = ?`), name)
	if errors.Is(err, sql.ErrNoRows) {
		return k, false, nil
	}
	if err != nil {
		return k, false, fmt.Errorf("read gateway key %s: %w", name, err)
	}
	return r.Key(), true, nil
}

// placed is where key name sits, for its audit entries.
func (x KeyTx) placed(ctx context.Context, name string) (budget.Placed, error) {
	var p struct {
		Team string `db:"team"`
		Org  string `db:"org"`
	}
	err := x.GetContext(ctx, &p, x.Rebind(`SELECT k.team, COALESCE(tm.org, '') AS org FROM key_teams k LEFT JOIN teams tm ON tm.name = k.team WHERE k.key = ?`), name)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return budget.Placed{}, fmt.Errorf("read placement of key %s: %w", name, err)
	}
	return budget.Placed{Team: p.Team, Org: p.Org}, nil
}

// auditKey logs a change of key name from before to after (nil: none).
func (x KeyTx) auditKey(ctx context.Context, at time.Time, action budget.AuditAction, name string, before, after *gatekey.Key) error {
	where, err := x.placed(ctx, name)
	if err != nil {
		return err
	}
	var b, a any
	if before != nil {
		b = before.Audited()
	}
	if after != nil {
		a = after.Audited()
	}
	return x.audit(ctx, at, action, budget.ObjectKey, name, where, b, a)
}

// Insert is gatekey.Store.InsertKey. A conflict is skipped rather than
// failed on, so the refusal leaves a PostgreSQL transaction usable and
// needs no parsing of driver errors.
func (x KeyTx) Insert(ctx context.Context, k gatekey.Key) error {
	if err := x.insert(ctx, k); err != nil {
		return err
	}
	return x.auditKey(ctx, k.CreatedAt, budget.AuditCreate, k.Name, nil, &k)
}

func (x KeyTx) insert(ctx context.Context, k gatekey.Key) error {
	res, err := x.ExecContext(ctx, x.Rebind(KeyInsert), KeyArgs(&k)...)
	if err != nil {
		return fmt.Errorf("insert key %s: %w", k.Name, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return fmt.Errorf("insert key %s: %w", k.Name, err)
		}
		return budget.Invalid("name", k.Name, "a key with this name exists")
	}
	return nil
}

// ByHash is gatekey.Store.KeyByHash.
func (x KeyTx) ByHash(ctx context.Context, hash string) (gatekey.Key, error) {
	var r GatewayKey
	err := x.GetContext(ctx, &r, x.Rebind(`SELECT `+KeyCols+` FROM gateway_keys WHERE hash = ?
		UNION ALL SELECT `+KeyCols+` FROM gateway_keys WHERE prev_hash = ? AND prev_hash <> '' LIMIT 1`), hash, hash)
	if errors.Is(err, sql.ErrNoRows) {
		return gatekey.Key{}, fmt.Errorf("gateway key: %w", budget.ErrNotFound)
	}
	if err != nil {
		return gatekey.Key{}, fmt.Errorf("read gateway key: %w", err)
	}
	return r.Key(), nil
}

// Rotate is gatekey.Store.RotateKey. Its audit entry is at the wall
// clock's now: RotateKey is given no instant but the grace's end.
func (x KeyTx) Rotate(ctx context.Context, name, hash string, graceUntil time.Time) error {
	before, ok, err := x.byName(ctx, name)
	if err != nil {
		return err
	}
	res, err := x.ExecContext(ctx, x.Rebind(`UPDATE gateway_keys SET prev_hash = hash, prev_until = ?, hash = ?
		WHERE name = ? AND revoked_at = 0`), Ns(graceUntil), hash, name)
	if err != nil {
		return fmt.Errorf("rotate key %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 1 && ok {
		after := before
		after.PrevHash, after.PrevUntil, after.Hash = before.Hash, graceUntil, hash
		return x.auditKey(ctx, time.Now(), budget.AuditRotate, name, &before, &after)
	}
	return x.refused(ctx, name, "is revoked: 'budget key add --reuse' takes the name again")
}

// Reuse is gatekey.Store.ReuseKey.
func (x KeyTx) Reuse(ctx context.Context, k gatekey.Key) error {
	before, ok, err := x.byName(ctx, k.Name)
	if err != nil {
		return err
	}
	res, err := x.ExecContext(ctx, x.Rebind(`UPDATE gateway_keys SET hash = ?, created_at = ?, revoked_at = 0,
		prev_hash = '', prev_until = 0, last_used_at = 0, expires_at = ?, models = ? WHERE name = ? AND revoked_at <> 0`),
		k.Hash, Ns(k.CreatedAt), Ns(k.ExpiresAt), joinModels(k.Models), k.Name)
	if err != nil {
		return fmt.Errorf("reuse key %s: %w", k.Name, err)
	}
	if n, _ := res.RowsAffected(); n == 1 && ok {
		return x.auditKey(ctx, k.CreatedAt, budget.AuditCreate, k.Name, &before, &k)
	}
	return x.refused(ctx, k.Name, "is in use (only a revoked name can be taken again)")
}

// Update is gatekey.Store.UpdateKey.
func (x KeyTx) Update(ctx context.Context, name string, c gatekey.KeyChange, at time.Time) (gatekey.Key, error) {
	before, ok, err := x.byName(ctx, name)
	if err != nil {
		return gatekey.Key{}, err
	}
	if !ok {
		return gatekey.Key{}, fmt.Errorf("gateway key %q: %w", name, budget.ErrNotFound)
	}
	after := before
	if c.ExpiresAt != nil {
		after.ExpiresAt = *c.ExpiresAt
	}
	if c.Models != nil {
		after.Models = *c.Models
	}
	if _, err := x.ExecContext(ctx, x.Rebind(`UPDATE gateway_keys SET expires_at = ?, models = ? WHERE name = ?`),
		Ns(after.ExpiresAt), joinModels(after.Models), name); err != nil {
		return gatekey.Key{}, fmt.Errorf("update key %s: %w", name, err)
	}
	after.ExpiresAt = FromNs(Ns(after.ExpiresAt))
	return after, x.auditKey(ctx, at, budget.AuditUpdate, name, &before, &after)
}

// Touch is gatekey.Store.TouchKey.
func (x KeyTx) Touch(ctx context.Context, name string, at time.Time) error {
	_, err := x.ExecContext(ctx, x.Rebind(`UPDATE gateway_keys SET last_used_at = ? WHERE name = ? AND last_used_at < ?`),
		Ns(at), name, Ns(at.Add(-time.Minute)))
	if err != nil {
		return fmt.Errorf("touch key %s: %w", name, err)
	}
	return nil
}

// List is gatekey.Store.ListKeys. It sorts in Go: SQLite compares names
// byte by byte and PostgreSQL by its collation, and both must list alike.
func (x KeyTx) List(ctx context.Context) ([]gatekey.Key, error) {
	var rows []GatewayKey
	if err := x.SelectContext(ctx, &rows, `SELECT `+KeyCols+` FROM gateway_keys`); err != nil {
		return nil, fmt.Errorf("read gateway keys: %w", err)
	}
	out := make([]gatekey.Key, len(rows))
	for i := range rows {
		out[i] = rows[i].Key()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Revoke is gatekey.Store.RevokeKey.
func (x KeyTx) Revoke(ctx context.Context, name string, at time.Time) (bool, error) {
	before, ok, err := x.byName(ctx, name)
	switch {
	case err != nil:
		return false, err
	case !ok:
		return false, fmt.Errorf("gateway key %q: %w", name, budget.ErrNotFound)
	case !before.RevokedAt.IsZero():
		return false, nil
	}
	res, err := x.ExecContext(ctx, x.Rebind(`UPDATE gateway_keys SET revoked_at = ? WHERE name = ? AND revoked_at = 0`), Ns(at), name)
	if err != nil {
		return false, fmt.Errorf("revoke key %s: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err // another transaction revoked it first
	}
	after := before
	after.RevokedAt = at
	return true, x.auditKey(ctx, at, budget.AuditRevoke, name, &before, &after)
}

// refused explains why an update of key name changed nothing: no such
// key, or the state that refused it (why).
func (x KeyTx) refused(ctx context.Context, name, why string) error {
	var n int
	if err := x.GetContext(ctx, &n, x.Rebind(`SELECT COUNT(*) FROM gateway_keys WHERE name = ?`), name); err != nil {
		return fmt.Errorf("read key %s: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("gateway key %q: %w", name, budget.ErrNotFound)
	}
	return budget.Invalid("name", name, why)
}
