package sqlite

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlq"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// rollupTotals sums rollups rows' sums in RollupCols order, saturating
// like every sum of the history.
const rollupTotals = `CAST(MIN(TOTAL(requests), 9007199254740991) AS INTEGER), CAST(MIN(TOTAL(input), 9007199254740991) AS INTEGER),
	CAST(MIN(TOTAL(output), 9007199254740991) AS INTEGER), CAST(MIN(TOTAL(reasoning), 9007199254740991) AS INTEGER),
	CAST(MIN(TOTAL(cache_read), 9007199254740991) AS INTEGER), CAST(MIN(TOTAL(cache_write), 9007199254740991) AS INTEGER),
	CAST(MIN(TOTAL(cost), 9007199254740991) AS INTEGER), SUM(no_price)`

// qAddRollupsN adds to the daily rollups; %s stands for the VALUES rows.
const qAddRollupsN = `INSERT INTO rollups (` + sqlrow.RollupCols + `) VALUES %s
	ON CONFLICT (` + sqlrow.RollupDims + `) DO UPDATE SET
		requests = MIN(requests + excluded.requests, 9007199254740991),
		input = MIN(input + excluded.input, 9007199254740991),
		output = MIN(output + excluded.output, 9007199254740991),
		reasoning = MIN(reasoning + excluded.reasoning, 9007199254740991),
		cache_read = MIN(cache_read + excluded.cache_read, 9007199254740991),
		cache_write = MIN(cache_write + excluded.cache_write, 9007199254740991),
		cost = MIN(cost + excluded.cost, 9007199254740991),
		no_price = no_price + excluded.no_price`

func (t *tx) addRollups(ctx context.Context, rs []budget.Rollup) error {
	if err := t.insertRows(ctx, qAddRollupsN, sqlrow.RollupNCols, len(rs), func(i int, a []any) []any {
		return sqlrow.RollupArgs(a, &rs[i])
	}); err != nil {
		return fmt.Errorf("add daily rollups: %w", err)
	}
	return nil
}

func (t *tx) Rollups(ctx context.Context, from, to time.Time, key string, by []budget.Dim) ([]budget.Rollup, error) {
	return t.ReadRollups(ctx, rollupTotals, from, to, key, by)
}

const day = int64(24 * time.Hour)

// eventsIn narrows a query of usage to [from, to) and key (all when ""):
// by key and instant, so the covering index is read one key at a time
// (every key with events has rollups of their days).
func eventsIn(q string, from, to time.Time, key string) (string, []any) {
	if key != "" {
		return q + ` WHERE key = ? AND at >= ? AND at < ?`, []any{key, from.UnixNano(), to.UnixNano()}
	}
	f, tn := from.UnixNano(), to.UnixNano()
	return q + ` WHERE key IN (SELECT DISTINCT key FROM rollups WHERE day >= ? AND day < ?) AND at >= ? AND at < ?`,
		[]any{max(f, math.MinInt64+day) - day, tn, f, tn} // a day back covers from's day, without overflow
}

func (t *tx) EventTotals(ctx context.Context, from, to time.Time, key string, by []budget.Dim) ([]budget.Rollup, error) {
	sel, group := sqlq.GroupBy(dayOf("at"), by)
	q, args := eventsIn(`SELECT `+sel+`, `+rollupSums+` FROM usage`, from, to, key)
	out, err := t.ScanRollups(ctx, q+` GROUP BY `+group, args)
	if err != nil {
		return nil, fmt.Errorf("sum events by day: %w", err)
	}
	return out, nil
}

func (t *tx) Events(ctx context.Context, from, to time.Time, key string, fn func(budget.Usage) error) error {
	q, args := eventsIn(`SELECT `+sqlrow.EventCols+` FROM usage`, from, to, key)
	return t.ScanEvents(ctx, q+` ORDER BY at, key, request_id`, args, fn)
}

func (t *tx) PrunedBefore(ctx context.Context) (time.Time, error) {
	if t.horizon != nil {
		return fromNs(*t.horizon), nil
	}
	var v int64
	if err := t.get(ctx, &v, `SELECT value FROM meta WHERE name = 'pruned_before'`); err != nil {
		return time.Time{}, fmt.Errorf("read the prune horizon: %w", err)
	}
	t.horizon = &v
	return fromNs(v), nil
}

func (t *tx) Prune(ctx context.Context, before time.Time) (int64, error) {
	// A scan of the table: pruning is rare, and an index on at alone would
	// cost every write.
	n, err := t.exec(ctx, `DELETE FROM usage WHERE at < ?`, before.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("prune events: %w", err)
	}
	if _, err := t.exec(ctx, `UPDATE meta SET value = ? WHERE name = 'pruned_before'`, before.UnixNano()); err != nil {
		return 0, fmt.Errorf("move the prune horizon: %w", err)
	}
	h := before.UnixNano()
	t.horizon = &h
	// Writers re-read the horizon when the limits version moves.
	if _, err := t.exec(ctx, `UPDATE meta SET value = value + 1 WHERE name = 'limits_version'`); err != nil {
		return 0, fmt.Errorf("move the limits version: %w", err)
	}
	return n, nil
}
