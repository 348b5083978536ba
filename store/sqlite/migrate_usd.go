package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"
)

// migrateUSD is schema 6: budgets in dollars. A price table, each event's
// cost (in the covering index, for seeding usd counters), and the usd
// metric. Loosening the metric CHECK of limits is an edit of the stored
// CREATE TABLE text (SQLite's documented writable_schema procedure for
// changing constraints that existing rows satisfy): rebuilding the table
// that counters, rollovers and holds reference would cascade into them.
const migrateUSDSQL = `CREATE TABLE prices (
		provider    TEXT    NOT NULL,
		model       TEXT    NOT NULL,
		from_at     INTEGER NOT NULL,
		input       INTEGER NOT NULL,
		output      INTEGER NOT NULL,
		cache_read  INTEGER NOT NULL,
		cache_write INTEGER NOT NULL,
		reasoning   INTEGER NOT NULL,
		PRIMARY KEY (provider, model, from_at)
	) WITHOUT ROWID;
	INSERT OR IGNORE INTO meta (name, value) VALUES ('prices_version', 0);
	ALTER TABLE usage ADD COLUMN cost INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE usage ADD COLUMN unpriced INTEGER NOT NULL DEFAULT 0;
	DROP INDEX usage_window;
	CREATE INDEX usage_window ON usage (key, at, provider, model_norm, input, output, reasoning, cost);`

func migrateUSD(ctx context.Context, x *sqlx.Tx) error {
	var v int
	if err := x.GetContext(ctx, &v, `PRAGMA schema_version`); err != nil {
		return err
	}
	var before string
	if err := x.GetContext(ctx, &before, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'limits'`); err != nil {
		return err
	}
	if !strings.Contains(before, `'requests', 'concurrent')`) {
		return fmt.Errorf("allow usd limits: the limits table's metric CHECK is not the one this migration knows")
	}
	for _, q := range []string{
		`PRAGMA writable_schema = ON`,
		`UPDATE sqlite_master SET sql = replace(sql, '''requests'', ''concurrent'')', '''requests'', ''concurrent'', ''usd'')')
			WHERE type = 'table' AND name = 'limits'`,
		fmt.Sprintf(`PRAGMA schema_version = %d`, v+1),
		`PRAGMA writable_schema = OFF`,
	} {
		if _, err := x.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("allow usd limits: %w", err)
		}
	}
	return nil
}
