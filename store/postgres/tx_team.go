package postgres

import (
	"context"
	"errors"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Placeholders until schema 8 lands on PostgreSQL.

var errNotYet = errors.New("postgres: teams, raises and end users are not supported yet")

func (t *tx) OwnedLimits(context.Context, budget.Level, string) ([]budget.Limit, error) {
	return nil, nil
}
func (t *tx) Placement(context.Context, string) (string, string, error) { return "", "", nil }
func (t *tx) Teams(context.Context) ([]budget.Team, error)              { return nil, nil }
func (t *tx) Orgs(context.Context) ([]string, error)                    { return nil, nil }
func (t *tx) PutTeam(context.Context, budget.Team) error                { return errNotYet }
func (t *tx) DeleteTeam(context.Context, string) error                  { return errNotYet }
func (t *tx) SetKeyTeam(context.Context, string, string) error          { return errNotYet }
func (t *tx) AddRaise(context.Context, string, budget.Raise) error      { return errNotYet }
