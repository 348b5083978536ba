package sqlq

import (
	"context"
	"fmt"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

var (
	qPrices = New(`SELECT provider, model, tier, above_input, from_at, input, output, cache_read, cache_write, reasoning, cache_write_1h FROM prices`)
	// qPutPrice replaces a price version (same provider, model, tier,
	// threshold and from).
	qPutPrice = New(`INSERT INTO prices (provider, model, tier, above_input, from_at, input, output, cache_read, cache_write, reasoning, cache_write_1h)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (provider, model, tier, above_input, from_at) DO UPDATE SET input = excluded.input,
		output = excluded.output, cache_read = excluded.cache_read, cache_write = excluded.cache_write, reasoning = excluded.reasoning,
		cache_write_1h = excluded.cache_write_1h`)
	qMovePrices  = New(`UPDATE meta SET value = value + 1 WHERE name = 'prices_version'`)
	qDeletePrice = New(`DELETE FROM prices WHERE provider = ? AND model = ? AND tier = ? AND above_input = ? AND from_at = ?`)
)

func (t Tx) Prices(ctx context.Context) ([]budget.Price, error) {
	var rows []sqlrow.Price
	if err := t.sel(ctx, &rows, &qPrices); err != nil {
		return nil, fmt.Errorf("read prices: %w", err)
	}
	out := make([]budget.Price, len(rows))
	for i, r := range rows {
		out[i] = budget.Price{Provider: r.Provider, Model: r.Model, Tier: r.Tier, AboveInput: r.AboveInput, From: sqlrow.FromNs(r.From), Input: r.Input, Output: r.Output,
			CacheRead: r.CacheRead, CacheWrite: r.CacheWrite, Reasoning: r.Reasoning, CacheWrite1h: r.CacheWrite1h}
	}
	return out, nil
}

// PutPrices upserts ps and moves the prices version.
func (t Tx) PutPrices(ctx context.Context, ps []budget.Price) error {
	for _, p := range ps {
		if _, err := t.exec(ctx, &qPutPrice, p.Provider, p.Model, p.Tier, p.AboveInput, sqlrow.Ns(p.From), p.Input, p.Output, p.CacheRead, p.CacheWrite, p.Reasoning, p.CacheWrite1h); err != nil {
			return fmt.Errorf("store price of %s/%s: %w", p.Provider, p.Model, err)
		}
	}
	if _, err := t.exec(ctx, &qMovePrices); err != nil {
		return fmt.Errorf("move prices version: %w", err)
	}
	return nil
}

// DeletePrice removes the price version p names and moves the prices
// version.
func (t Tx) DeletePrice(ctx context.Context, p budget.Price) error {
	if _, err := t.exec(ctx, &qDeletePrice, p.Provider, p.Model, p.Tier, p.AboveInput, sqlrow.Ns(p.From)); err != nil {
		return fmt.Errorf("delete price of %s/%s: %w", p.Provider, p.Model, err)
	}
	if _, err := t.exec(ctx, &qMovePrices); err != nil {
		return fmt.Errorf("move prices version: %w", err)
	}
	return nil
}
