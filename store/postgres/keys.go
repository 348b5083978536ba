package postgres

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/gatekey"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// A DB keeps the proxy's gateway keys beside the budget state, in the
// gateway_keys table. Each method is its own transaction, retried like
// Update's (serialization failures, deadlocks); reads run in View's
// read-only snapshot.
var _ gatekey.Store = (*DB)(nil)

// InsertKey implements gatekey.Store.
func (d *DB) InsertKey(ctx context.Context, k gatekey.Key) error {
	return d.keyTx(ctx, false, func(x sqlrow.KeyTx) error { return x.Insert(ctx, k) })
}

// KeyByHash implements gatekey.Store.
func (d *DB) KeyByHash(ctx context.Context, hash string) (k gatekey.Key, err error) {
	err = d.keyTx(ctx, true, func(x sqlrow.KeyTx) error {
		k, err = x.ByHash(ctx, hash)
		return err
	})
	return k, err
}

// RotateKey implements gatekey.Store.
func (d *DB) RotateKey(ctx context.Context, name, hash string, graceUntil time.Time) error {
	return d.keyTx(ctx, false, func(x sqlrow.KeyTx) error { return x.Rotate(ctx, name, hash, graceUntil) })
}

// ReuseKey implements gatekey.Store.
func (d *DB) ReuseKey(ctx context.Context, k gatekey.Key) error {
	return d.keyTx(ctx, false, func(x sqlrow.KeyTx) error { return x.Reuse(ctx, k) })
}

// TouchKey implements gatekey.Store.
func (d *DB) TouchKey(ctx context.Context, name string, at time.Time) error {
	return d.keyTx(ctx, false, func(x sqlrow.KeyTx) error { return x.Touch(ctx, name, at) })
}

// ListKeys implements gatekey.Store.
func (d *DB) ListKeys(ctx context.Context) (ks []gatekey.Key, err error) {
	err = d.keyTx(ctx, true, func(x sqlrow.KeyTx) error {
		ks, err = x.List(ctx)
		return err
	})
	return ks, err
}

// RevokeKey implements gatekey.Store.
func (d *DB) RevokeKey(ctx context.Context, name string, at time.Time) (revoked bool, err error) {
	err = d.keyTx(ctx, false, func(x sqlrow.KeyTx) error {
		revoked, err = x.Revoke(ctx, name, at)
		return err
	})
	return revoked, err
}

// keyTx runs fn in a read-only (ro) or write transaction through runSQL,
// the retry loop under Update and View: the key statements need no
// budget.Tx around them.
func (d *DB) keyTx(ctx context.Context, ro bool, fn func(sqlrow.KeyTx) error) error {
	return d.runSQL(ctx, ro, func(x *sqlx.Tx) error { return fn(sqlrow.KeyTx{Tx: x}) })
}
