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
// and retries the transaction around it.
type KeyTx struct{ *sqlx.Tx }

// Key is the row as a gatekey.Key.
func (r *GatewayKey) Key() gatekey.Key {
	return gatekey.Key{Name: r.Name, Hash: r.Hash, CreatedAt: FromNs(r.CreatedAt), RevokedAt: FromNs(r.RevokedAt),
		PrevHash: r.PrevHash, PrevUntil: FromNs(r.PrevUntil), LastUsedAt: FromNs(r.LastUsed)}
}

// Insert is gatekey.Store.InsertKey. A conflict is skipped rather than
// failed on, so the refusal leaves a PostgreSQL transaction usable and
// needs no parsing of driver errors.
func (x KeyTx) Insert(ctx context.Context, k gatekey.Key) error {
	res, err := x.ExecContext(ctx, x.Rebind(`INSERT INTO gateway_keys (name, hash, created_at, revoked_at, prev_hash, prev_until, last_used_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`), k.Name, k.Hash, Ns(k.CreatedAt), Ns(k.RevokedAt), k.PrevHash, Ns(k.PrevUntil), Ns(k.LastUsedAt))
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

// Rotate is gatekey.Store.RotateKey.
func (x KeyTx) Rotate(ctx context.Context, name, hash string, graceUntil time.Time) error {
	res, err := x.ExecContext(ctx, x.Rebind(`UPDATE gateway_keys SET prev_hash = hash, prev_until = ?, hash = ?
		WHERE name = ? AND revoked_at = 0`), Ns(graceUntil), hash, name)
	if err != nil {
		return fmt.Errorf("rotate key %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	return x.refused(ctx, name, "is revoked: 'budget key add --reuse' takes the name again")
}

// Reuse is gatekey.Store.ReuseKey.
func (x KeyTx) Reuse(ctx context.Context, k gatekey.Key) error {
	res, err := x.ExecContext(ctx, x.Rebind(`UPDATE gateway_keys SET hash = ?, created_at = ?, revoked_at = 0,
		prev_hash = '', prev_until = 0, last_used_at = 0 WHERE name = ? AND revoked_at <> 0`), k.Hash, Ns(k.CreatedAt), k.Name)
	if err != nil {
		return fmt.Errorf("reuse key %s: %w", k.Name, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	return x.refused(ctx, k.Name, "is in use (only a revoked name can be taken again)")
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
	res, err := x.ExecContext(ctx, x.Rebind(`UPDATE gateway_keys SET revoked_at = ? WHERE name = ? AND revoked_at = 0`), Ns(at), name)
	if err != nil {
		return false, fmt.Errorf("revoke key %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return true, nil
	}
	var exists int
	if err := x.GetContext(ctx, &exists, x.Rebind(`SELECT COUNT(*) FROM gateway_keys WHERE name = ?`), name); err != nil {
		return false, fmt.Errorf("revoke key %s: %w", name, err)
	}
	if exists == 0 {
		return false, fmt.Errorf("gateway key %q: %w", name, budget.ErrNotFound)
	}
	return false, nil
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
