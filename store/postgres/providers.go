package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// ProbeFailed counts the failure with one atomic UPDATE, which keeps the
// row locked until the transaction ends, so the resume-at it then writes is
// computed from this transaction's own count.
func (t *tx) ProbeFailed(ctx context.Context, name string, next func(budget.ProviderState) time.Time) (budget.ProviderState, error) {
	if err := t.write(); err != nil {
		return budget.ProviderState{}, err
	}
	var r sqlrow.Provider
	err := t.tx.GetContext(ctx, &r, `UPDATE providers SET probe_failures = probe_failures + 1, probe_owner = '', probe_until = 0
		WHERE provider = $1 RETURNING `+sqlrow.ProviderCols, name)
	if errors.Is(err, sql.ErrNoRows) {
		return budget.ProviderState{}, fmt.Errorf("provider %q is not parked: %w", name, budget.ErrNotFound)
	}
	if err != nil {
		return budget.ProviderState{}, fmt.Errorf("count probe failure of %s: %w", name, err)
	}
	p := r.Decode()
	p.ResumeAt = next(p)
	if err := t.BackOffProvider(ctx, p); err != nil {
		return p, err
	}
	return p, nil
}
