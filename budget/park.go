package budget

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// parkedAt is the provider's refusal at now, or nil while it takes work.
// The state is cached like limits and re-read after the refresh interval.
func (t *Tracker) parkedAt(ctx context.Context, provider string, now time.Time) (*Parked, error) {
	e, ok := t.parked.Peek(provider)
	if !ok || !t.fresh(e.LoadedAt) {
		loadedAt := t.now().UnixNano()
		var p *ProviderState
		err := t.store.View(ctx, func(tx Tx) error {
			s, err := tx.Provider(ctx, provider)
			if errors.Is(err, ErrNotFound) {
				p = nil
				return nil
			}
			p = &s
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("load provider %s: %w", provider, err)
		}
		t.parked.Put(provider, p, loadedAt)
		e, _ = t.parked.Peek(provider)
		if e == nil {
			return parkedOf(p, now), nil
		}
	}
	return parkedOf(e.Value, now), nil
}

func parkedOf(p *ProviderState, now time.Time) *Parked {
	if p == nil || !p.Refusing(now) {
		return nil
	}
	return &Parked{ProviderState: *p, RetryAfterSeconds: ceilSeconds(p.ResumeAt.Sub(now))}
}
