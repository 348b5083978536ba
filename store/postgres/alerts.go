package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// The alerts outbox. Logging is one INSERT ... ON CONFLICT DO NOTHING: of
// two transactions logging one (limit, subject, window, threshold), the
// second waits on the first's unique index entry and then skips its row.
// Claiming is one UPDATE of the rows a subquery locks FOR UPDATE SKIP
// LOCKED: concurrent deliverers take disjoint alerts without waiting on
// each other, and a row changed since the statement began is re-checked.

// qLogAlerts logs alerts given as parallel arrays in
// sqlrow.AlertInsertCols order; the first of a (limit, subject, window,
// threshold) stays.
const qLogAlerts = `INSERT INTO alerts (` + sqlrow.AlertInsertCols + `)
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::integer[], $8::bigint[],
		$9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::text[], $15::text[])
	ON CONFLICT DO NOTHING`

func (t *tx) LogAlerts(ctx context.Context, as []budget.Alert) error {
	if err := t.write(); err != nil {
		return err
	}
	n := len(as)
	if n == 0 {
		return nil
	}
	// In unique-key order, so two batches logging the same alerts wait on
	// each other in one order.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int {
		a, b := &as[i], &as[j]
		return cmp.Or(strings.Compare(a.LimitID, b.LimitID), strings.Compare(a.Subject, b.Subject),
			a.WindowStart.Compare(b.WindowStart), cmp.Compare(a.Threshold, b.Threshold))
	})
	ids, lids, levels, owners, subs, kinds := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	metrics := make([]string, n)
	starts, thr, used, maxes, ats, fc, ex, next := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n),
		make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for j, i := range order {
		a := &as[i]
		ids[j], lids[j], levels[j], owners[j], subs[j] = a.ID, a.LimitID, string(a.Level), a.Owner, a.Subject
		starts[j], thr[j], used[j], maxes[j] = ns(a.WindowStart), int64(a.Threshold), a.Used, a.Max
		// Its first try is due at once (as sqlrow.AlertArgs).
		ats[j], fc[j], ex[j], next[j] = ns(a.At), a.ForecastUsed, ns(a.ExhaustsAt), ns(a.At)
		kinds[j], metrics[j] = string(cmp.Or(a.Kind, budget.AlertThreshold)), string(a.Metric)
	}
	if _, err := t.tx.ExecContext(ctx, qLogAlerts, ids, lids, levels, owners, subs, starts, thr, used, maxes, ats, fc, ex, next, kinds, metrics); err != nil {
		return fmt.Errorf("log alerts: %w", err)
	}
	return nil
}

func (t *tx) ClaimAlerts(ctx context.Context, owner string, now, until time.Time, max int) ([]budget.Alert, error) {
	if err := t.write(); err != nil {
		return nil, err
	}
	var rows []sqlrow.Alert
	if err := t.tx.SelectContext(ctx, &rows, `WITH claimed AS (
			UPDATE alerts SET claim_owner = $1, claim_until = $2
			WHERE id IN (SELECT id FROM alerts WHERE delivered_at = 0 AND next_attempt <= $3 AND (claim_until <= $3 OR claim_owner = $1)
				ORDER BY next_attempt, at LIMIT $4 FOR UPDATE SKIP LOCKED)
			RETURNING `+sqlrow.AlertCols+`)
		SELECT * FROM claimed ORDER BY next_attempt, at, id COLLATE "C"`, owner, ns(until), ns(now), max); err != nil {
		return nil, fmt.Errorf("claim alerts: %w", err)
	}
	return sqlrow.DecodeAlerts(rows), nil
}
