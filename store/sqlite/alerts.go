package sqlite

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

// qInsertAlertsN logs alerts; %s stands for the VALUES rows. The first of
// a (limit, subject, window, threshold) stays.
const qInsertAlertsN = `INSERT INTO alerts (` + sqlrow.AlertInsertCols + `) VALUES %s ON CONFLICT DO NOTHING`

func (t *tx) LogAlerts(ctx context.Context, as []budget.Alert) error {
	if err := t.write(); err != nil {
		return err
	}
	if err := t.insertRows(ctx, qInsertAlertsN, 15, len(as), func(i int, a []any) []any {
		return sqlrow.AlertArgs(a, &as[i])
	}); err != nil {
		return fmt.Errorf("log alerts: %w", err)
	}
	return nil
}

func (t *tx) ClaimAlerts(ctx context.Context, owner string, now, until time.Time, max int) ([]budget.Alert, error) {
	var rows []sqlrow.Alert
	if err := t.sel(ctx, &rows, `UPDATE alerts SET claim_owner = ?, claim_until = ?
		WHERE id IN (SELECT id FROM alerts WHERE delivered_at = 0 AND next_attempt <= ? AND (claim_until <= ? OR claim_owner = ?)
			ORDER BY next_attempt, at LIMIT ?)
		RETURNING `+sqlrow.AlertCols, owner, ns(until), ns(now), ns(now), owner, max); err != nil {
		return nil, fmt.Errorf("claim alerts: %w", err)
	}
	out := sqlrow.DecodeAlerts(rows)
	sortAlerts(out)
	return out, nil
}

// sortAlerts orders claimed alerts as they are due: next attempt, then
// when logged (RETURNING gives no order).
func sortAlerts(as []budget.Alert) {
	slices.SortFunc(as, func(a, b budget.Alert) int {
		return cmp.Or(a.NextAttempt.Compare(b.NextAttempt), a.At.Compare(b.At), strings.Compare(a.ID, b.ID))
	})
}
