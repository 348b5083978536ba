package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Placeholders until schema 9 (rollups, prune) lands on PostgreSQL.

var errNoRollups = errors.New("postgres: rollups, reports and prune are not supported yet")

func (t *tx) Rollups(context.Context, time.Time, time.Time, string, []budget.Dim) ([]budget.Rollup, error) {
	return nil, errNoRollups
}
func (t *tx) EventTotals(context.Context, time.Time, time.Time, string, []budget.Dim) ([]budget.Rollup, error) {
	return nil, errNoRollups
}
func (t *tx) Events(context.Context, time.Time, time.Time, string, func(budget.Usage) error) error {
	return errNoRollups
}
func (t *tx) PrunedBefore(context.Context) (time.Time, error) { return time.Time{}, nil }
func (t *tx) Prune(context.Context, time.Time) (int64, error) { return 0, errNoRollups }
func (t *tx) OpenReservationsBefore(context.Context, time.Time, time.Time, int) ([]budget.ReservationRow, error) {
	return nil, errNoRollups
}
