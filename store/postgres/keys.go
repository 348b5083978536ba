package postgres

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/gatekey"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// A DB keeps the proxy's gateway keys beside the budget state, in the
// gateway_keys table. Each method is its own transaction, retried like
// Update's (serialization failures, deadlocks); reads run in View's
// read-only snapshot.
var _ gatekey.Store = (*DB)(nil)

// keyTx runs fn in a read-only (ro) or write transaction through runSQL,
// the retry loop under Update and View: the key statements need no
// budget.Tx around them.
func (d *DB) keyTx(ctx context.Context, ro bool, fn func(sqlrow.KeyTx) error) error {
	return d.runSQL(ctx, ro, func(x *sqlx.Tx) error { return fn(sqlrow.KeyTx{Tx: x}) })
}
