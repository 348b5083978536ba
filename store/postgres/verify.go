package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
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
// the schema's tables when the extension is installed (in whichever schema
// it lives: the DSN's search_path need not name it); otherwise, or without
// the right to run it, it says that index structure was not checked
// (creating an extension or granting it is the administrator's decision,
// not verify's). Each index is checked under a savepoint, so one that
// fails is reported and the others are still checked.
func (d *DB) CheckIntegrity(ctx context.Context) ([]string, []string, error) {
	var problems, notes []string
	err := d.runSQL(ctx, true, func(x *sqlx.Tx) error {
		problems, notes = nil, nil
		var nsp string
		if err := x.GetContext(ctx, &nsp, `SELECT COALESCE((SELECT quote_ident(n.nspname) FROM pg_extension e
			JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'amcheck'), '')`); err != nil {
			return err
		}
		if nsp == "" {
			notes = append(notes, "PostgreSQL: the amcheck extension is not installed, so index structure was not checked (CREATE EXTENSION amcheck enables it); the history was compared with its index")
			return nil
		}
		var idx []string
		// Every table of the store's schema (the one holding limits), so a
		// new table's indexes are checked without a list to keep.
		if err := x.SelectContext(ctx, &idx, `SELECT c.oid::regclass::text FROM pg_index i
			JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
			WHERE a.amname = 'btree' AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'limits'::regclass)
			ORDER BY 1`); err != nil {
			return err
		}
		for _, name := range idx {
			if _, err := x.ExecContext(ctx, `SAVEPOINT amcheck`); err != nil {
				return err
			}
			_, err := x.ExecContext(ctx, `SELECT `+nsp+`.bt_index_check($1::regclass)`, name)
			if err == nil {
				if _, err := x.ExecContext(ctx, `RELEASE SAVEPOINT amcheck`); err != nil {
					return err
				}
				continue
			}
			if _, rerr := x.ExecContext(ctx, `ROLLBACK TO SAVEPOINT amcheck`); rerr != nil {
				return rerr
			}
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42501" { // insufficient_privilege
				notes = append(notes, "PostgreSQL: amcheck is installed but this role may not run bt_index_check, so index structure was not checked; the history was compared with its index")
				return nil
			}
			problems = append(problems, fmt.Sprintf("amcheck %s: %v", name, err))
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("integrity check: %w", err)
	}
	return problems, notes, nil
}
