package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func (t *tx) ProbeFailed(ctx context.Context, name string, next func(budget.ProviderState) time.Time) (budget.ProviderState, error) {
	n, err := t.exec(ctx, `UPDATE providers SET probe_failures = probe_failures + 1, probe_owner = '', probe_until = 0 WHERE provider = ?`, name)
	if err != nil {
		return budget.ProviderState{}, fmt.Errorf("count probe failure of %s: %w", name, err)
	}
	if n == 0 {
		return budget.ProviderState{}, fmt.Errorf("provider %q is not parked: %w", name, budget.ErrNotFound)
	}
	p, err := t.Provider(ctx, name)
	if err != nil {
		return p, err
	}
	p.ResumeAt = next(p)
	if err := t.BackOffProvider(ctx, p); err != nil {
		return p, err
	}
	return p, nil
}
