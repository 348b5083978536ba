package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

func (t *tx) SumUsage(ctx context.Context, l *budget.Limit, start, end time.Time) (int64, error) {
	rolled, from, err := t.rolledUp(ctx, l, start, end)
	if err != nil {
		return 0, err
	}
	if !from.Before(end) {
		return rolled, nil
	}
	q, args, err := sumQuery(l, from, end)
	if err != nil {
		return 0, err
	}
	var v int64
	if err := t.get(ctx, &v, q, args...); err != nil {
		return 0, fmt.Errorf("sum usage of limit %s: %w", l.ID, err)
	}
	return min(v+rolled, budget.MaxTokens), nil
}

// rolledUp is l's sum over the whole UTC days of [start, end) before the
// prune horizon, from the rollups, and where the events take over.
func (t *tx) rolledUp(ctx context.Context, l *budget.Limit, start, end time.Time) (int64, time.Time, error) {
	h, err := t.PrunedBefore(ctx)
	if err != nil {
		return 0, start, err
	}
	rf, rt, ef := sqlrow.Horizon(start.UnixNano(), end.UnixNano(), ns(h))
	from := fromNs(ef)
	if ef == 0 {
		from = time.Unix(0, 0).UTC()
	}
	if rf >= rt {
		return 0, from, nil
	}
	expr, ok := rollupExpr[l.Metric]
	if !ok {
		return 0, from, fmt.Errorf("no usage history for metric %s", l.Metric)
	}
	q, args := historyWhere(`SELECT COALESCE(`+expr+`, 0) FROM rollups WHERE day >= ? AND day < ?`, []any{rf, rt}, l.History(), false)
	var v int64
	if err := t.get(ctx, &v, q, args...); err != nil {
		return 0, from, fmt.Errorf("sum rollups of limit %s: %w", l.ID, err)
	}
	return v, from, nil
}
