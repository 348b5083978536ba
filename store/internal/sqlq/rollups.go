package sqlq

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// Reports: the daily rollups and the events, grouped by day and the
// dimensions asked for. Each store spells the sums (saturating aggregates
// differ) and the events' range; the grouping, the reading and the rollups'
// range are written here.

// GroupBy is the select list and GROUP BY list of a sum per day (day, the
// SQL of the day) and the columns of by (budget.RollupColumns); the other
// dimensions are selected as empty strings.
func GroupBy(day string, by []budget.Dim) (sel, group string) {
	cols := budget.RollupColumns(by)
	sel, group = day+` AS day`, `1`
	for _, d := range budget.AllDims {
		if col := sqlrow.DimColumn(d); slices.Contains(cols, d) {
			sel += `, ` + col
			group += `, ` + col
		} else {
			sel += `, ''`
		}
	}
	return sel, group
}

// Rebind is q, written with ? placeholders, in d: for the statements a
// report builds per call from its groupings.
func Rebind(d Dialect, q string) string {
	if d == Postgres {
		return sqlx.Rebind(sqlx.DOLLAR, q)
	}
	return q
}

// ReadRollups is budget.Tx.Rollups given the store's sums of a group of
// rollups rows in sqlrow.RollupCols order (totals).
func (t Tx) ReadRollups(ctx context.Context, totals string, from, to time.Time, key string, by []budget.Dim) ([]budget.Rollup, error) {
	sel, group := GroupBy(`day`, by)
	q, args := `SELECT `+sel+`, `+totals+` FROM rollups WHERE day >= ? AND day < ?`, []any{from.UnixNano(), to.UnixNano()}
	if key != "" {
		q += ` AND key = ?`
		args = append(args, key)
	}
	out, err := t.ScanRollups(ctx, Rebind(t.D, q+` GROUP BY `+group), args)
	if err != nil {
		return nil, fmt.Errorf("read rollups: %w", err)
	}
	return out, nil
}

// ScanRollups runs q (in t's dialect) and reads its rows: GroupBy's select
// list, then the sums.
func (t Tx) ScanRollups(ctx context.Context, q string, args []any) ([]budget.Rollup, error) {
	rows, err := t.X.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []budget.Rollup
	for rows.Next() {
		var r sqlrow.Rollup
		if err := rows.Scan(&r.Day, &r.Key, &r.Team, &r.Org, &r.User, &r.Provider, &r.Model, &r.Tags, &r.Requests, &r.Input, &r.Output,
			&r.Reasoning, &r.CacheRead, &r.CacheWrite, &r.Cost, &r.NoPrice); err != nil {
			return nil, err
		}
		out = append(out, r.Decode())
	}
	return out, rows.Err()
}

// ScanEvents runs q (in t's dialect, selecting sqlrow.EventCols) and calls
// fn with each event, stopping at fn's first error.
func (t Tx) ScanEvents(ctx context.Context, q string, args []any, fn func(budget.Usage) error) error {
	rows, err := t.X.Query(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e sqlrow.Event
		if err := rows.StructScan(&e); err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		if err := fn(e.Decode()); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	return nil
}
