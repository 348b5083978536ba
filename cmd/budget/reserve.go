package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

const reserveHelp = `usage: budget reserve --key K [--provider P] [--model M] [--user U] [--tag NAME=VALUE]... --tokens N [--ttl D]
	[--on-expiry release|charge] [--json]

Holds an estimate of N tokens against every applicable enabled limit (the
key's, its team's, its org's, the defaults counted for it; user limits by
--user, the end user the request is for; tag limits by each --tag, what it
is for, which its commit is charged to too), all or nothing, and takes a lease on each concurrent limit, until the reservation is
committed ('budget commit ID'), released ('budget release ID') or expires
(--ttl, default 2m). At expiry a release reservation (the default) stops
counting; a charge reservation keeps counting until recovery charges its
estimate (a later commit records only what exceeds it). Uses the real clock. Prints the reservation id, or
{"id", "expires_at", "limits": [{"limit_id", "amount"}]} with --json.
Exit 3 when refused, holding nothing; with --json it prints the same object
as 'budget check --json'.

`

func (m *Main) runReserve(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("reserve")
	dsn := m.dbFlag(fs)
	var req budget.Request
	fs.StringVar(&req.Key, "key", "", "API key (required)")
	fs.StringVar(&req.Provider, "provider", "", "provider of the request")
	fs.StringVar(&req.Model, "model", "", "model of the request")
	fs.StringVar(&req.User, "user", "", "end user the request is for")
	tags := tagFlag(fs)
	fs.Int64Var(&req.Estimate.Tokens, "tokens", 0, "estimated tokens of the request, > 0 (required)")
	ttl := fs.Duration("ttl", budget.DefaultReservationTTL, "how long the reservation holds unless settled, > 0")
	onExpiry := fs.String("on-expiry", string(budget.ExpireRelease), "what expiry does: release (stop counting) or charge (charge the estimate)")
	asJSON := fs.Bool("json", false, `print {"id", "expires_at", "limits"}`)
	pos, err := m.parseArgs(fs, reserveHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("reserve", pos); err != nil {
		return err
	}
	if req.Tags, err = tags(); err != nil {
		return err
	}
	if req.Estimate.Tokens <= 0 {
		return budget.Invalid("tokens", req.Estimate.Tokens, "must be greater than 0")
	}
	if err := req.Validate(); err != nil {
		return err
	}
	if *ttl <= 0 {
		return budget.Invalid("ttl", *ttl, "must be greater than 0")
	}
	policy, err := budget.ParseExpiryPolicy(*onExpiry)
	if err != nil {
		return err
	}

	db, err := m.openDB(ctx, *dsn, dbOptions{create: true})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	r, err := db.ReserveWith(ctx, req, budget.ReserveOptions{TTL: *ttl, OnExpiry: policy})
	if err != nil {
		now := m.Now()
		d, ok, derr := m.refusal(ctx, db.Tracker, req, err, now)
		if !ok {
			return derr
		}
		if *asJSON {
			var fs []*budget.Forecast
			if fs, err = decisionForecasts(ctx, db.Tracker, &d, now); err != nil {
				return err
			}
			err = writeJSON(m.Stdout, decisionObj(&d, fs, now))
		} else {
			err = writeDecision(m.Stdout, &d, req.Estimate)
		}
		if err == nil {
			err = errRefused
		}
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, reservationObj(r))
	}
	_, err = fmt.Fprintln(m.Stdout, r.ID)
	return err
}

// refusal turns Reserve's refusal into the decision check would print: an
// exceeded limit carries its decision; a parked provider's refusal carries
// no limits, so they are read (without writing) as check reads them. ok is
// false when err is not a refusal (or reading failed): derr is the error.
// now is the instant of the refusal.
func (m *Main) refusal(ctx context.Context, t *budget.Tracker, req budget.Request, err error, now time.Time) (d budget.Decision, ok bool, derr error) {
	var ee *budget.ExceededError
	if errors.As(err, &ee) {
		return ee.Decision, true, nil
	}
	var ue *budget.UnpricedError
	if errors.As(err, &ue) {
		return ue.Decision, true, nil
	}
	var pe *budget.ParkedError
	if !errors.As(err, &pe) {
		return d, false, err
	}
	if d, derr = t.CheckAt(ctx, req, now); derr != nil {
		return d, false, errors.Join(err, derr)
	}
	d.Allowed = false
	d.Parked = &budget.Parked{ProviderState: pe.Provider, RetryAfter: time.Duration(ceilSeconds(pe.RetryAfter)) * time.Second}
	return d, true, nil
}

// ceilSeconds rounds a wait up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
