package budget

import (
	"context"
	"fmt"
	"time"
)

// priceSnap is the price table as read at one prices version.
type priceSnap struct {
	version  int64
	table    *Prices
	loadedAt int64 // the tracker's clock, Unix nanos
}

// pricesAt is the price table for checks: cached, re-read once older than
// the refresh interval, like limit definitions.
func (t *Tracker) pricesAt(ctx context.Context, clock int64) (*Prices, error) {
	if s := t.prices.Load(); s != nil && t.fresh(s.loadedAt, clock) {
		return s.table, nil
	}
	loadedAt := t.now().UnixNano()
	var snap priceSnap
	err := t.store.View(ctx, func(tx Tx) error {
		var err error
		snap, err = readPrices(ctx, tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("load prices: %w", err)
	}
	snap.loadedAt = loadedAt
	t.prices.Store(&snap)
	return snap.table, nil
}

func readPrices(ctx context.Context, tx Tx) (priceSnap, error) {
	v, err := tx.PricesVersion(ctx)
	if err != nil {
		return priceSnap{}, err
	}
	ps, err := tx.Prices(ctx)
	if err != nil {
		return priceSnap{}, err
	}
	return priceSnap{version: v, table: NewPrices(ps)}, nil
}

// writerPrices is the price table inside the writer's transaction: the one
// it holds, which each batch's load confirms current (or drops), or a
// fresh read.
func (t *Tracker) writerPrices(ctx context.Context, tx Tx) (*Prices, error) {
	w := &t.w
	if w.prices == nil {
		snap, err := readPrices(ctx, tx)
		if err != nil {
			return nil, err
		}
		w.prices = &snap
	}
	return w.prices.table, nil
}

// PriceUsage prices u as its event will be stored: at the price in force
// at u.At for its provider, normalised model, service tier and prompt, from
// the price table the checks use (cached, re-read once older than the
// refresh interval). It sets u.Cost and u.CostKnown, so the event is
// written at exactly that cost whatever the table holds by the time the
// writer takes it, and u.NoPrice when no price matches (the cost is 0).
// A caller that shows a request its cost before the event is written (the
// proxy's X-Tokenbudget-Cost) shows what the history will hold. A zero
// u.At is priced at now.
func (t *Tracker) PriceUsage(ctx context.Context, u *Usage) error {
	clock := t.now()
	table, err := t.pricesAt(ctx, clock.UnixNano())
	if err != nil {
		return err
	}
	at := u.At
	if at.IsZero() {
		at = clock
	}
	p := table.For(u.Provider, NormalizeModel(u.Model), u.ServiceTier, u.Input, at)
	u.CostKnown, u.NoPrice, u.Cost = true, p == nil, 0
	if p != nil {
		u.Cost = p.Cost(u)
	}
	return nil
}

// priceEstimate fills req.Estimate.USD when a usd limit is among
// statuses: the estimate priced at the price in force at at for the
// request's tier and prompt estimate, which it returns (nil when no usd
// limit applies). ok is false when a usd limit applies and no price
// matches: the request must be refused, as it would count $0.
func priceEstimate(table *Prices, statuses []Status, req *Request, model string, at time.Time) (price *Price, ok bool) {
	est := &req.Estimate
	for i := range statuses {
		if statuses[i].Limit.Metric != MetricUSD {
			continue
		}
		p := table.For(req.Provider, model, req.ServiceTier, est.Input+est.Tokens, at)
		if p == nil {
			return nil, false
		}
		est.USD = p.EstimateCost(*est)
		return p, true
	}
	return nil, true
}

// hasUSD reports whether a usd limit is among ls.
func hasUSD(ls []Limit) bool {
	for i := range ls {
		if ls[i].Metric == MetricUSD {
			return true
		}
	}
	return false
}

// SetPrices validates and stores price versions in one transaction: all or
// nothing. A price with the (provider, model, from) of a stored one
// replaces it; a new from adds a version. The checks see it within the
// refresh interval, the writer at its next batch.
func (t *Tracker) SetPrices(ctx context.Context, specs ...PriceSpec) ([]Price, error) {
	now := t.now()
	ps := make([]Price, len(specs))
	for i, s := range specs {
		var err error
		if ps[i], err = s.Parse(now); err != nil {
			if len(specs) > 1 {
				return nil, fmt.Errorf("price %d: %w", i+1, err)
			}
			return nil, err
		}
	}
	err := t.store.Update(ctx, func(tx Tx) error {
		cur, err := tx.Prices(ctx)
		if err != nil {
			return err
		}
		if err := tx.PutPrices(ctx, ps); err != nil {
			return err
		}
		for i := range ps {
			if err := t.logChange(ctx, tx, now, priceChange(cur, &ps[i])); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	t.prices.Store(nil)
	return ps, nil
}

// UnpricedEvents counts the history's events written with no price for
// their model (stored at $0), for verify.
func (t *Tracker) UnpricedEvents(ctx context.Context) (int64, error) {
	var n int64
	err := t.store.View(ctx, func(tx Tx) error {
		var err error
		n, err = tx.UnpricedEvents(ctx)
		return err
	})
	return n, err
}

// ListPrices lists every price version by provider, model and from.
func (t *Tracker) ListPrices(ctx context.Context) ([]Price, error) {
	var snap priceSnap
	err := t.store.View(ctx, func(tx Tx) error {
		var err error
		snap, err = readPrices(ctx, tx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return snap.table.All(), nil
}
