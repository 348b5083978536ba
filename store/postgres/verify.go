package postgres

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

var _ budget.IntegrityChecker = (*DB)(nil)

const qTotals = `SELECT key COLLATE "C" AS key, count(*) AS n, sum(input)::bigint AS input, sum(output)::bigint AS output,
	sum(reasoning)::bigint AS reasoning, min(at) AS min_at, max(at) AS max_at, 0 AS cache FROM usage GROUP BY 1 ORDER BY 1`

// CheckHistory reads the usage totals per key twice in one snapshot: once
// with index scans disabled (the heap itself) and once with sequential
// scans disabled (the covering index seeding reads), and compares them.
func (d *DB) CheckHistory(ctx context.Context) ([]string, error) {
	var heap, index []sqlrow.KeyTotals
	err := d.runSQL(ctx, true, func(x *sqlx.Tx) error {
		heap, index = nil, nil
		for _, s := range []string{"SET LOCAL enable_indexscan = off", "SET LOCAL enable_indexonlyscan = off", "SET LOCAL enable_bitmapscan = off"} {
			if _, err := x.ExecContext(ctx, s); err != nil {
				return err
			}
		}
		if err := x.SelectContext(ctx, &heap, qTotals); err != nil {
			return err
		}
		for _, s := range []string{"SET LOCAL enable_indexonlyscan = on", "SET LOCAL enable_seqscan = off"} {
			if _, err := x.ExecContext(ctx, s); err != nil {
				return err
			}
		}
		return x.SelectContext(ctx, &index, qTotals)
	})
	if err != nil {
		return nil, fmt.Errorf("check history: %w", err)
	}
	return sqlrow.CompareTotals(heap, index), nil
}

// CheckIntegrity runs amcheck's bt_index_check on every B-tree index of
// the schema's tables when the extension is installed; otherwise it says
// that index structure was not checked (creating an extension is the
// administrator's decision, not verify's).
func (d *DB) CheckIntegrity(ctx context.Context) ([]string, []string, error) {
	var problems, notes []string
	err := d.runSQL(ctx, true, func(x *sqlx.Tx) error {
		problems, notes = nil, nil
		var have bool
		if err := x.GetContext(ctx, &have, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'amcheck')`); err != nil {
			return err
		}
		if !have {
			notes = append(notes, "PostgreSQL: the amcheck extension is not installed, so index structure was not checked (CREATE EXTENSION amcheck enables it); the history was compared with its index")
			return nil
		}
		var idx []string
		if err := x.SelectContext(ctx, &idx, `SELECT c.oid::regclass::text FROM pg_index i
			JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
			WHERE a.amname = 'btree' AND i.indrelid IN ('usage'::regclass, 'counters'::regclass, 'limits'::regclass,
				'reservations'::regclass, 'holds'::regclass) ORDER BY 1`); err != nil {
			return err
		}
		for _, name := range idx {
			if _, err := x.ExecContext(ctx, `SELECT bt_index_check($1::regclass)`, name); err != nil {
				problems = append(problems, fmt.Sprintf("amcheck %s: %v", name, err))
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("integrity check: %w", err)
	}
	return problems, notes, nil
}
