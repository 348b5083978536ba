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
