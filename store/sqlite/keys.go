package sqlite

import (
	"context"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// A DB keeps the proxy's gateway keys beside the budget state, in the
// gateway_keys table. Each method is its own transaction: writes take the
// writer connection like Update (BEGIN IMMEDIATE, SQLITE_BUSY retried),
// reads a snapshot of the read pool like View.
var _ gatekey.Store = (*DB)(nil)

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
