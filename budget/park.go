package budget

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ParseParkKind validates a park kind.
func ParseParkKind(s string) (ParkKind, error) {
	switch k := ParkKind(strings.TrimSpace(s)); k {
	case RateLimited, Overloaded, AuthMissing:
		return k, nil
	}
	return "", invalid("kind", s, "want rate_limited, overloaded or auth_missing")
}

// Park marks provider as refusing work until retryAfter from now (0:
// Config.ParkRetryAfter). Parking a parked provider refreshes its kind,
// times and labels but keeps its probe-failure count. It is atomic against
// concurrent callers in any process.
func (t *Tracker) Park(ctx context.Context, provider string, kind ParkKind, retryAfter time.Duration, affected []string) (ProviderState, error) {
	return t.ParkAt(ctx, provider, kind, retryAfter, affected, t.now())
}

// ParkAt is Park as if parked at the instant at.
func (t *Tracker) ParkAt(ctx context.Context, provider string, kind ParkKind, retryAfter time.Duration, affected []string, at time.Time) (ProviderState, error) {
	provider = strings.TrimSpace(provider)
	if provider == "" {
		return ProviderState{}, invalid("provider", provider, "must not be empty")
	}
	if err := CheckName("provider", provider); err != nil {
		return ProviderState{}, err
	}
	if _, err := ParseParkKind(string(kind)); err != nil {
		return ProviderState{}, err
	}
	if retryAfter < 0 {
		return ProviderState{}, invalid("retry_after", retryAfter, "must not be negative")
	}
	if retryAfter == 0 {
		retryAfter = t.cfg.ParkRetryAfter
	}
	p := ProviderState{Provider: provider, Kind: kind, ParkedAt: at, RetryAfter: retryAfter, ResumeAt: at.Add(retryAfter), Affected: affected}
	err := t.store.Update(ctx, inRole(providerTx, func(_ Tx, pt ProviderTx) error {
		var err error
		if err := pt.ParkProvider(ctx, p); err != nil {
			return err
		}
		p, err = pt.Provider(ctx, provider)
		return err
	}))
	if err != nil {
		return ProviderState{}, err
	}
	t.parked.Put(provider, &p, t.now().UnixNano())
	return p, nil
}

// Unpark lets provider take work again and resets its probe count. It
// reports whether it was parked; unparking a provider that is not is no
// error.
func (t *Tracker) Unpark(ctx context.Context, provider string) (bool, error) {
	provider = strings.TrimSpace(provider)
	if provider == "" {
		return false, invalid("provider", provider, "must not be empty")
	}
	var was bool
	err := t.store.Update(ctx, inRole(providerTx, func(_ Tx, pt ProviderTx) error {
		var err error
		was, err = pt.DeleteProvider(ctx, provider)
		return err
	}))
	if err == nil {
		t.parked.Put(provider, nil, t.now().UnixNano())
	}
	return was, err
}

// ProviderState reads a provider's parking state from the store; a provider
// that is not parked returns ErrNotFound.
func (t *Tracker) ProviderState(ctx context.Context, provider string) (ProviderState, error) {
	var p ProviderState
	err := t.store.View(ctx, inRole(providerTx, func(_ Tx, pt ProviderTx) error {
		var err error
		p, err = pt.Provider(ctx, strings.TrimSpace(provider))
		return err
	}))
	return p, err
}

// ParkedProviders lists every parked provider, by name, including those past
// their resume-at that no probe has unparked yet.
func (t *Tracker) ParkedProviders(ctx context.Context) ([]ProviderState, error) {
	var ps []ProviderState
	err := t.store.View(ctx, func(tx Tx) error {
		var err error
		ps, err = parkedProviders(ctx, tx)
		return err
	})
	return ps, err
}

// ProbeFailed counts a failed probe of provider atomically and pushes its
// resume-at back: retry-after doubled per failure, capped at
// Config.MaxProbeBackoff. It returns the new count.
func (t *Tracker) ProbeFailed(ctx context.Context, provider string) (int, error) {
	now := t.now()
	var p ProviderState
	err := t.store.Update(ctx, inRole(providerTx, func(_ Tx, pt ProviderTx) error {
		var err error
		p, err = pt.ProbeFailed(ctx, provider, func(p ProviderState) time.Time { return now.Add(t.backoff(p)) })
		return err
	}))
	if err != nil {
		return 0, err
	}
	t.parked.Put(provider, &p, t.now().UnixNano())
	return p.ProbeFailures, nil
}

func (t *Tracker) backoff(p ProviderState) time.Duration {
	d := p.RetryAfter
	if d <= 0 {
		d = t.cfg.ParkRetryAfter
	}
	for range min(p.ProbeFailures, 32) {
		if d >= t.cfg.MaxProbeBackoff {
			break
		}
		d *= 2
	}
	return min(d, t.cfg.MaxProbeBackoff)
}

// ProbeSucceeded unparks provider and resets its probe count.
func (t *Tracker) ProbeSucceeded(ctx context.Context, provider string) error {
	_, err := t.Unpark(ctx, provider)
	return err
}

// parkedAt is the provider's refusal at now, or nil while it takes work.
// The state is cached like limits and re-read after the refresh interval.
func (t *Tracker) parkedAt(ctx context.Context, provider string, now time.Time, clock int64) (*Parked, error) {
	if e, ok := t.parked.Peek(provider); ok && t.fresh(e.LoadedAt, clock) {
		return parkedOf(e.Value, now), nil
	}
	loadedAt := t.now().UnixNano()
	var p *ProviderState
	err := t.store.View(ctx, func(tx Tx) error {
		pt, ok := tx.(ProviderTx)
		if !ok { // a store that cannot park: nothing is ever parked
			p = nil
			return nil
		}
		s, err := pt.Provider(ctx, provider)
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
	return parkedOf(p, now), nil
}

func parkedOf(p *ProviderState, now time.Time) *Parked {
	if p == nil || !p.Refusing(now) {
		return nil
	}
	return &Parked{ProviderState: *p, RetryAfter: time.Duration(ceilSeconds(p.ResumeAt.Sub(now))) * time.Second}
}
