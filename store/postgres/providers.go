package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// ---- providers

func (t *tx) Provider(ctx context.Context, name string) (budget.ProviderState, error) {
	var r sqlrow.Provider
	err := t.tx.GetContext(ctx, &r, `SELECT `+sqlrow.ProviderCols+` FROM providers WHERE provider = $1`, name)
	if errors.Is(err, sql.ErrNoRows) {
		return budget.ProviderState{}, fmt.Errorf("provider %q: %w", name, budget.ErrNotFound)
	}
	if err != nil {
		return budget.ProviderState{}, fmt.Errorf("read provider %s: %w", name, err)
	}
	return r.Decode(), nil
}

func (t *tx) Providers(ctx context.Context) ([]budget.ProviderState, error) {
	var rows []sqlrow.Provider
	if err := t.tx.SelectContext(ctx, &rows, `SELECT `+sqlrow.ProviderCols+` FROM providers ORDER BY provider COLLATE "C"`); err != nil {
		return nil, fmt.Errorf("read providers: %w", err)
	}
	out := make([]budget.ProviderState, len(rows))
	for i := range rows {
		out[i] = rows[i].Decode()
	}
	return out, nil
}

func (t *tx) ParkProvider(ctx context.Context, p budget.ProviderState) error {
	_, err := t.exec(ctx, `INSERT INTO providers (`+sqlrow.ProviderCols+`) VALUES ($1, $2, $3, $4, $5, $6, 0)
		ON CONFLICT (provider) DO UPDATE SET kind = excluded.kind, parked_at = excluded.parked_at,
		retry_after = excluded.retry_after, resume_at = excluded.resume_at, affected = excluded.affected`,
		p.Provider, string(p.Kind), ns(p.ParkedAt), int64(p.RetryAfter), ns(p.ResumeAt), strings.Join(p.Affected, "\n"))
	if err != nil {
		return fmt.Errorf("park provider %s: %w", p.Provider, err)
	}
	return nil
}

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
	if _, err := t.exec(ctx, `UPDATE providers SET resume_at = $1 WHERE provider = $2`, ns(p.ResumeAt), name); err != nil {
		return p, fmt.Errorf("back off provider %s: %w", name, err)
	}
	return p, nil
}

func (t *tx) DeleteProvider(ctx context.Context, name string) (bool, error) {
	n, err := t.exec(ctx, `DELETE FROM providers WHERE provider = $1`, name)
	if err != nil {
		return false, fmt.Errorf("unpark provider %s: %w", name, err)
	}
	return n == 1, nil
}

// ClaimProbe is one conditional UPDATE: a concurrent claimer waits for the
// row, then re-checks the condition against the claim just taken.
func (t *tx) ClaimProbe(ctx context.Context, name, owner string, now, until time.Time) (bool, error) {
	n, err := t.exec(ctx, `UPDATE providers SET probe_owner = $1, probe_until = $2
		WHERE provider = $3 AND resume_at <= $4 AND (probe_owner = '' OR probe_owner = $1 OR probe_until <= $4)`,
		owner, ns(until), name, now.UnixNano())
	if err != nil {
		return false, fmt.Errorf("claim probe of %s: %w", name, err)
	}
	return n == 1, nil
}

// ---- gateway keys
