package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Placeholders until schema 10 (alerts) lands on PostgreSQL.

var errNoAlerts = errors.New("postgres: alerts are not supported yet")

func (t *tx) LogAlerts(context.Context, []budget.Alert) error     { return errNoAlerts }
func (t *tx) Alerts(context.Context, int) ([]budget.Alert, error) { return nil, errNoAlerts }
func (t *tx) ClaimAlerts(context.Context, string, time.Time, time.Time, int) ([]budget.Alert, error) {
	return nil, errNoAlerts
}
func (t *tx) SettleAlert(context.Context, string, string, time.Time, time.Time) error {
	return errNoAlerts
}

// LockDefinitions is a placeholder until the lock lands on PostgreSQL.
func (t *tx) LockDefinitions(context.Context) error { return nil }
