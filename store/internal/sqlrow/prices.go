package sqlrow

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Price is a prices row.
type Price struct {
	Provider   string `db:"provider"`
	Model      string `db:"model"`
	From       int64  `db:"from_at"`
	Input      int64  `db:"input"`
	Output     int64  `db:"output"`
	CacheRead  int64  `db:"cache_read"`
	CacheWrite int64  `db:"cache_write"`
	Reasoning  int64  `db:"reasoning"`
}

// Prices reads every price version.
func Prices(ctx context.Context, x *sqlx.Tx) ([]budget.Price, error) {
	var rows []Price
	if err := x.SelectContext(ctx, &rows, `SELECT provider, model, from_at, input, output, cache_read, cache_write, reasoning FROM prices`); err != nil {
		return nil, fmt.Errorf("read prices: %w", err)
	}
	out := make([]budget.Price, len(rows))
	for i, r := range rows {
		out[i] = budget.Price{Provider: r.Provider, Model: r.Model, From: FromNs(r.From), Input: r.Input, Output: r.Output,
			CacheRead: r.CacheRead, CacheWrite: r.CacheWrite, Reasoning: r.Reasoning}
	}
	return out, nil
}

// upsertPrice replaces a price version (same provider, model and from).
const upsertPrice = `INSERT INTO prices (provider, model, from_at, input, output, cache_read, cache_write, reasoning)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (provider, model, from_at) DO UPDATE SET input = excluded.input,
		output = excluded.output, cache_read = excluded.cache_read, cache_write = excluded.cache_write, reasoning = excluded.reasoning`

// PutPrices upserts ps and moves the prices version, in the caller's
// transaction.
func PutPrices(ctx context.Context, x *sqlx.Tx, ps []budget.Price) error {
	q := x.Rebind(upsertPrice)
	for _, p := range ps {
		if _, err := x.ExecContext(ctx, q, p.Provider, p.Model, Ns(p.From), p.Input, p.Output, p.CacheRead, p.CacheWrite, p.Reasoning); err != nil {
			return fmt.Errorf("store price of %s/%s: %w", p.Provider, p.Model, err)
		}
	}
	if _, err := x.ExecContext(ctx, `UPDATE meta SET value = value + 1 WHERE name = 'prices_version'`); err != nil {
		return fmt.Errorf("move prices version: %w", err)
	}
	return nil
}
