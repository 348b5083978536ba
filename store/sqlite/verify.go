package sqlite

import (
	"context"
	"errors"
	"fmt"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

var _ budget.IntegrityChecker = (*DB)(nil)

// The same totals through the table's own b-tree and through the covering
// index that seeding and verify read: a damaged page shows as an error or
// as a difference. NOT INDEXED alone does not keep SQLite off a covering
// index; reading the cache columns, which only the table holds, does.
const (
	qTotalsTable = `SELECT key, count(*) AS n, sum(input) AS input, sum(output) AS output, sum(reasoning) AS reasoning,
		min(at) AS min_at, max(at) AS max_at, sum(cache_read) + sum(cache_write) AS cache
		FROM usage NOT INDEXED GROUP BY key ORDER BY key`
	qTotalsIndex = `SELECT key, count(*) AS n, sum(input) AS input, sum(output) AS output, sum(reasoning) AS reasoning,
		min(at) AS min_at, max(at) AS max_at FROM usage INDEXED BY usage_window GROUP BY key ORDER BY key`
)

// CheckHistory compares the usage table with its covering index.
func (db *DB) CheckHistory(ctx context.Context) ([]string, error) {
	var table, index []sqlrow.KeyTotals
	var problems []string
	err := db.View(ctx, func(t budget.Tx) error {
		x := t.(*tx).tx
		if err := x.SelectContext(ctx, &table, qTotalsTable); err != nil {
			if !isCorrupt(err) {
				return err
			}
			problems = append(problems, "usage table unreadable: "+err.Error())
		}
		if err := x.SelectContext(ctx, &index, qTotalsIndex); err != nil {
			if !isCorrupt(err) {
				return err
			}
			problems = append(problems, "usage index unreadable: "+err.Error())
		}
		return nil
	})
	switch {
	case err != nil && len(problems) > 0:
		// Ending the transaction repeats the corruption it met.
	case isCorrupt(err):
		problems = append(problems, "usage history unreadable: "+err.Error())
	case err != nil:
		return nil, fmt.Errorf("check history: %w", err)
	}
	if len(problems) == 0 {
		problems = sqlrow.CompareTotals(table, index)
	}
	return problems, nil
}

// CheckIntegrity runs PRAGMA integrity_check over the whole file.
func (db *DB) CheckIntegrity(ctx context.Context) ([]string, []string, error) {
	var lines []string
	err := db.View(ctx, func(t budget.Tx) error {
		return t.(*tx).tx.SelectContext(ctx, &lines, "PRAGMA integrity_check")
	})
	if err != nil {
		if isCorrupt(err) {
			return []string{"integrity_check: " + err.Error()}, nil, nil
		}
		return nil, nil, fmt.Errorf("integrity check: %w", err)
	}
	if len(lines) == 1 && lines[0] == "ok" {
		return nil, nil, nil
	}
	for i := range lines {
		lines[i] = "integrity_check: " + lines[i]
	}
	return lines, nil, nil
}

func isCorrupt(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code() & 0xff
		return c == sqlite3.SQLITE_CORRUPT || c == sqlite3.SQLITE_NOTADB
	}
	return false
}
