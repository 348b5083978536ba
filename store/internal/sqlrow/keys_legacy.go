package sqlrow

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

// The budget.Tx key methods (store/tx_hold.go, store/postgres/tx_hold.go)
// still call these until they are removed; delete this file with them,
// and GatewayKey.Decode in sqlrow.go. New code uses KeyTx.

// KeyByHash is KeyTx.ByHash as a budget.GatewayKey.
func KeyByHash(ctx context.Context, x *sqlx.Tx, hash string) (budget.GatewayKey, error) {
	k, err := KeyTx{x}.ByHash(ctx, hash)
	return budget.GatewayKey(k), err
}

// RotateKey is KeyTx.Rotate.
func RotateKey(ctx context.Context, x *sqlx.Tx, name, hash string, graceUntil time.Time) error {
	return KeyTx{x}.Rotate(ctx, name, hash, graceUntil)
}

// ReuseKey is KeyTx.Reuse.
func ReuseKey(ctx context.Context, x *sqlx.Tx, k budget.GatewayKey) error {
	return KeyTx{x}.Reuse(ctx, gatekey.Key(k))
}

// TouchKey is KeyTx.Touch.
func TouchKey(ctx context.Context, x *sqlx.Tx, name string, at time.Time) error {
	return KeyTx{x}.Touch(ctx, name, at)
}
