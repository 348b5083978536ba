package sqlite

import (
	"context"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// A DB keeps the proxy's gateway keys beside the budget state, in the
// gateway_keys table. Each method is its own transaction: writes take the
// writer connection like Update (BEGIN IMMEDIATE, SQLITE_BUSY retried),
// reads a snapshot of the read pool like View.
var _ gatekey.Store = (*DB)(nil)

// InsertKey implements gatekey.Store.
func (db *DB) InsertKey(ctx context.Context, k gatekey.Key) error {
	return db.keyTx(ctx, false, func(x sqlrow.KeyTx) error { return x.Insert(ctx, k) })
}

// KeyByHash implements gatekey.Store.
func (db *DB) KeyByHash(ctx context.Context, hash string) (k gatekey.Key, err error) {
	err = db.keyTx(ctx, true, func(x sqlrow.KeyTx) error {
		k, err = x.ByHash(ctx, hash)
		return err
	})
	return k, err
}

// RotateKey implements gatekey.Store.
func (db *DB) RotateKey(ctx context.Context, name, hash string, graceUntil time.Time) error {
	return db.keyTx(ctx, false, func(x sqlrow.KeyTx) error { return x.Rotate(ctx, name, hash, graceUntil) })
}

// ReuseKey implements gatekey.Store.
func (db *DB) ReuseKey(ctx context.Context, k gatekey.Key) error {
	return db.keyTx(ctx, false, func(x sqlrow.KeyTx) error { return x.Reuse(ctx, k) })
}

// TouchKey implements gatekey.Store.
func (db *DB) TouchKey(ctx context.Context, name string, at time.Time) error {
	return db.keyTx(ctx, false, func(x sqlrow.KeyTx) error { return x.Touch(ctx, name, at) })
}

// ListKeys implements gatekey.Store.
func (db *DB) ListKeys(ctx context.Context) (ks []gatekey.Key, err error) {
	err = db.keyTx(ctx, true, func(x sqlrow.KeyTx) error {
		ks, err = x.List(ctx)
		return err
	})
	return ks, err
}

// RevokeKey implements gatekey.Store.
func (db *DB) RevokeKey(ctx context.Context, name string, at time.Time) (revoked bool, err error) {
	err = db.keyTx(ctx, false, func(x sqlrow.KeyTx) error {
		revoked, err = x.Revoke(ctx, name, at)
		return err
	})
	return revoked, err
}

// keyTx runs fn in a read (ro) or write transaction of db. It goes through
// View and Update, not around them, so key writes queue behind the same
// writer connection, retry SQLITE_BUSY and explain a read-only or full
// disk as every other write does; they do not count in Mark.
func (db *DB) keyTx(ctx context.Context, ro bool, fn func(sqlrow.KeyTx) error) error {
	run := db.Update
	if ro {
		run = db.View
	}
	return run(ctx, func(t budget.Tx) error {
		x := t.(*tx)
		// Keys are nothing a Tracker's writer decides on: writing one must
		// not make it re-read its state (see Mark).
		x.keysOnly = true
		return fn(sqlrow.KeyTx{Tx: x.tx})
	})
}
