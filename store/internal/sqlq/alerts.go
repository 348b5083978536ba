package sqlq

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// The alerts outbox: reading it and settling a claimed alert. Logging and
// claiming are each store's (arrays or VALUES rows; SKIP LOCKED).

const settleClaimed = ` WHERE id = ? AND claim_owner = ? AND delivered_at = 0`

var (
	qAlerts    = New(`SELECT ` + sqlrow.AlertCols + ` FROM alerts ORDER BY at DESC, id COLLATE "C" DESC LIMIT ?`)
	qDelivered = New(`UPDATE alerts SET delivered_at = ?, claim_owner = '', claim_until = 0` + settleClaimed)
	qRetry     = New(`UPDATE alerts SET attempts = attempts + 1, next_attempt = ?, claim_owner = '', claim_until = 0` + settleClaimed)
)

func (t Tx) Alerts(ctx context.Context, n int) ([]budget.Alert, error) {
	var rows []sqlrow.Alert
	if err := t.sel(ctx, &rows, &qAlerts, n); err != nil {
		return nil, fmt.Errorf("read alerts: %w", err)
	}
	return sqlrow.DecodeAlerts(rows), nil
}

func (t Tx) SettleAlert(ctx context.Context, id, owner string, deliveredAt, next time.Time) error {
	q, at := &qDelivered, deliveredAt
	if deliveredAt.IsZero() {
		q, at = &qRetry, next
	}
	n, err := t.exec(ctx, q, sqlrow.Ns(at), id, owner)
	if err != nil {
		return fmt.Errorf("settle alert %s: %w", id, err)
	}
	if n == 0 {
		return budget.ClaimLost(id)
	}
	return nil
}
