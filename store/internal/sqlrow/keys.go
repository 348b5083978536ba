package sqlrow

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/budget"
)

// The key lifecycle is the same SQL on both stores (placeholders rebound).

// KeyByHash reads the key whose secret or previous secret hashes to hash.
func KeyByHash(ctx context.Context, x *sqlx.Tx, hash string) (budget.GatewayKey, error) {
	var r GatewayKey
	err := x.GetContext(ctx, &r, x.Rebind(`SELECT `+KeyCols+` FROM gateway_keys WHERE hash = ?
		UNION ALL SELECT `+KeyCols+` FROM gateway_keys WHERE prev_hash = ? AND prev_hash <> '' LIMIT 1`), hash, hash)
	if errors.Is(err, sql.ErrNoRows) {
		return budget.GatewayKey{}, fmt.Errorf("gateway key: %w", budget.ErrNotFound)
	}
	if err != nil {
		return budget.GatewayKey{}, fmt.Errorf("read gateway key: %w", err)
	}
	return r.Decode(), nil
}

// RotateKey is budget.Tx.RotateKey.
func RotateKey(ctx context.Context, x *sqlx.Tx, name, hash string, graceUntil time.Time) error {
	res, err := x.ExecContext(ctx, x.Rebind(`UPDATE gateway_keys SET prev_hash = hash, prev_until = ?, hash = ?
		WHERE name = ? AND revoked_at = 0`), Ns(graceUntil), hash, name)
	if err != nil {
		return fmt.Errorf("rotate key %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	return keyState(ctx, x, name, "is revoked: 'budget key add --reuse' takes the name again")
}

// ReuseKey is budget.Tx.ReuseKey.
func ReuseKey(ctx context.Context, x *sqlx.Tx, k budget.GatewayKey) error {
	res, err := x.ExecContext(ctx, x.Rebind(`UPDATE gateway_keys SET hash = ?, created_at = ?, revoked_at = 0,
		prev_hash = '', prev_until = 0, last_used_at = 0 WHERE name = ? AND revoked_at <> 0`), k.Hash, Ns(k.CreatedAt), k.Name)
	if err != nil {
		return fmt.Errorf("reuse key %s: %w", k.Name, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	return keyState(ctx, x, k.Name, "is in use (only a revoked name can be taken again)")
}

// TouchKey is budget.Tx.TouchKey.
func TouchKey(ctx context.Context, x *sqlx.Tx, name string, at time.Time) error {
	_, err := x.ExecContext(ctx, x.Rebind(`UPDATE gateway_keys SET last_used_at = ? WHERE name = ? AND last_used_at < ?`),
		Ns(at), name, Ns(at.Add(-time.Minute)))
	if err != nil {
		return fmt.Errorf("touch key %s: %w", name, err)
	}
	return nil
}

// keyState explains why an update of key name changed nothing: no such
// key, or the state that refused it (why).
func keyState(ctx context.Context, x *sqlx.Tx, name, why string) error {
	var n int
	if err := x.GetContext(ctx, &n, x.Rebind(`SELECT COUNT(*) FROM gateway_keys WHERE name = ?`), name); err != nil {
		return fmt.Errorf("read key %s: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("gateway key %q: %w", name, budget.ErrNotFound)
	}
	return budget.Invalid("name", name, why)
}
