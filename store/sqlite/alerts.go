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

func (t *tx) Alerts(ctx context.Context, n int) ([]budget.Alert, error) {
	var rows []sqlrow.Alert
	if err := t.sel(ctx, &rows, `SELECT `+sqlrow.AlertCols+` FROM alerts ORDER BY at DESC, id DESC LIMIT ?`, n); err != nil {
		return nil, fmt.Errorf("read alerts: %w", err)
	}
	return sqlrow.DecodeAlerts(rows), nil
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

func (t *tx) SettleAlert(ctx context.Context, id, owner string, deliveredAt, next time.Time) error {
	q, args := `UPDATE alerts SET delivered_at = ?, claim_owner = '', claim_until = 0`, []any{ns(deliveredAt)}
	if deliveredAt.IsZero() {
		q, args = `UPDATE alerts SET attempts = attempts + 1, next_attempt = ?, claim_owner = '', claim_until = 0`, []any{ns(next)}
	}
	n, err := t.exec(ctx, q+` WHERE id = ? AND claim_owner = ? AND delivered_at = 0`, append(args, id, owner)...)
	if err != nil {
		return fmt.Errorf("settle alert %s: %w", id, err)
	}
	if n == 0 {
		return budget.ClaimLost(id)
	}
	return nil
}

// sortAlerts orders claimed alerts as they are due: next attempt, then
// when logged (RETURNING gives no order).
func sortAlerts(as []budget.Alert) {
	slices.SortFunc(as, func(a, b budget.Alert) int {
		return cmp.Or(a.NextAttempt.Compare(b.NextAttempt), a.At.Compare(b.At), strings.Compare(a.ID, b.ID))
	})
}
