package budget

import (
	"context"
	"time"
)

// Prober probes parked providers once they are past their resume-at and
// applies the result: a success unparks, a failure backs off, and after
// MaxFailures failures it gives up (unparks and reports it), so a provider
// is never parked forever. With several processes on one database, a claim
// with an expiry makes sure one probe runs per provider at a time.
//
// Set the fields, then call Run (or RunOnce, for tests and cron-style use).
// A Prober is not safe for concurrent use; run one per process.
type Prober struct {
	Tracker *Tracker
	// Probe tries provider once; nil means it answers again. (Required.)
	Probe func(ctx context.Context, provider string) error
	// Interval between passes. (Optional; default 1s.)
	Interval time.Duration
	// MaxFailures is the failure count at which the prober gives up.
	// (Optional; default 5.)
	MaxFailures int
	// ClaimTTL is how long one process owns a provider's probe. (Optional;
	// default 30s.)
	ClaimTTL time.Duration
	// Owner names this prober in claims. (Optional; default random.)
	Owner string
	// OnGiveUp is told which provider was given up on. (Optional.)
	OnGiveUp func(provider string, failures int)
}

// ProbeReport says what one pass did.
type ProbeReport struct {
	Probed, Recovered, Failed, GivenUp int
}

// Run probes every Interval until ctx ends, returning ctx's error.
func (p *Prober) Run(ctx context.Context) error {
	iv := p.Interval
	if iv <= 0 {
		iv = time.Second
	}
	tk := time.NewTicker(iv)
	defer tk.Stop()
	for {
		if _, err := p.RunOnce(ctx); err != nil && ctx.Err() == nil && p.Tracker.cfg.OnError != nil {
			p.Tracker.cfg.OnError(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tk.C:
		}
	}
}

// RunOnce probes each parked provider that is past its resume-at and not
// claimed by another prober.
func (p *Prober) RunOnce(ctx context.Context) (ProbeReport, error) {
	var rep ProbeReport
	t := p.Tracker
	if p.Owner == "" {
		p.Owner = NewID("probe_")
	}
	maxFail := p.MaxFailures
	if maxFail <= 0 {
		maxFail = 5
	}
	ttl := p.ClaimTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	ps, err := t.ParkedProviders(ctx)
	if err != nil {
		return rep, err
	}
	for _, ps := range ps {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		now := t.now()
		if ps.Refusing(now) {
			continue
		}
		var ok bool
		err := t.store.Update(ctx, func(tx Tx) error {
			pt, err := providerTx(tx)
			if err != nil {
				return err
			}
			ok, err = pt.ClaimProbe(ctx, ps.Provider, p.Owner, now, now.Add(ttl))
			return err
		})
		if err != nil {
			return rep, err
		}
		if !ok {
			continue
		}
		rep.Probed++
		if perr := p.Probe(ctx, ps.Provider); perr == nil {
			if err := t.ProbeSucceeded(ctx, ps.Provider); err != nil {
				return rep, err
			}
			rep.Recovered++
			continue
		}
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		n, err := t.ProbeFailed(ctx, ps.Provider)
		if err != nil {
			return rep, err
		}
		rep.Failed++
		if n >= maxFail {
			if _, err := t.Unpark(ctx, ps.Provider); err != nil {
				return rep, err
			}
			rep.GivenUp++
			if p.OnGiveUp != nil {
				p.OnGiveUp(ps.Provider, n)
			}
		}
	}
	return rep, nil
}
