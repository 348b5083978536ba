package sqlq

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

// Parked providers and their probes.

var (
	qProvider     = New(`SELECT ` + sqlrow.ProviderCols + ` FROM providers WHERE provider = ?`)
	qProviders    = New(`SELECT ` + sqlrow.ProviderCols + ` FROM providers ORDER BY provider COLLATE "C"`)
	qParkProvider = New(`INSERT INTO providers (` + sqlrow.ProviderCols + `) VALUES (?, ?, ?, ?, ?, ?, 0)
		ON CONFLICT (provider) DO UPDATE SET kind = excluded.kind, parked_at = excluded.parked_at,
		retry_after = excluded.retry_after, resume_at = excluded.resume_at, affected = excluded.affected`)
	qBackOffProvider = New(`UPDATE providers SET resume_at = ? WHERE provider = ?`)
	qDeleteProvider  = New(`DELETE FROM providers WHERE provider = ?`)
	// A concurrent claimer waits for the row (PostgreSQL), then re-checks
	// the condition against the claim just taken.
	qClaimProbe = New(`UPDATE providers SET probe_owner = ?, probe_until = ?
		WHERE provider = ? AND resume_at <= ? AND (probe_owner = '' OR probe_owner = ? OR probe_until <= ?)`)
)

func (t Tx) Provider(ctx context.Context, name string) (budget.ProviderState, error) {
	var r sqlrow.Provider
	err := t.get(ctx, &r, &qProvider, name)
	if errors.Is(err, sql.ErrNoRows) {
		return budget.ProviderState{}, fmt.Errorf("provider %q: %w", name, budget.ErrNotFound)
	}
	if err != nil {
		return budget.ProviderState{}, fmt.Errorf("read provider %s: %w", name, err)
	}
	return r.Decode(), nil
}

func (t Tx) Providers(ctx context.Context) ([]budget.ProviderState, error) {
	var rows []sqlrow.Provider
	if err := t.sel(ctx, &rows, &qProviders); err != nil {
		return nil, fmt.Errorf("read providers: %w", err)
	}
	out := make([]budget.ProviderState, len(rows))
	for i := range rows {
		out[i] = rows[i].Decode()
	}
	return out, nil
}

func (t Tx) ParkProvider(ctx context.Context, p budget.ProviderState) error {
	_, err := t.exec(ctx, &qParkProvider,
		p.Provider, string(p.Kind), sqlrow.Ns(p.ParkedAt), int64(p.RetryAfter), sqlrow.Ns(p.ResumeAt), strings.Join(p.Affected, "\n"))
	if err != nil {
		return fmt.Errorf("park provider %s: %w", p.Provider, err)
	}
	return nil
}

// BackOffProvider stores p's resume-at, the second half of ProbeFailed.
func (t Tx) BackOffProvider(ctx context.Context, p budget.ProviderState) error {
	if _, err := t.exec(ctx, &qBackOffProvider, sqlrow.Ns(p.ResumeAt), p.Provider); err != nil {
		return fmt.Errorf("back off provider %s: %w", p.Provider, err)
	}
	return nil
}

func (t Tx) DeleteProvider(ctx context.Context, name string) (bool, error) {
	n, err := t.exec(ctx, &qDeleteProvider, name)
	if err != nil {
		return false, fmt.Errorf("unpark provider %s: %w", name, err)
	}
	return n == 1, nil
}

func (t Tx) ClaimProbe(ctx context.Context, name, owner string, now, until time.Time) (bool, error) {
	n, err := t.exec(ctx, &qClaimProbe, owner, sqlrow.Ns(until), name, now.UnixNano(), owner, now.UnixNano())
	if err != nil {
		return false, fmt.Errorf("claim probe of %s: %w", name, err)
	}
	return n == 1, nil
}
