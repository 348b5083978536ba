package budget

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/cache"
)

// Reservation is an estimate held against every applicable limit until it
// is committed, released or expires. Like x/time/rate's Reservation it is a
// value the caller settles: Commit with the actual usage, or Release.
type Reservation struct {
	ID  string
	Key string
	// Team, Org and User are whom it is charged to beyond the key: the
	// key's placement when it was decided, and the request's end user. Its
	// commit is charged to them too, wherever the key is by then.
	Team, Org, User string
	// Tags are the request's: its commit is charged to them.
	Tags      Tags
	Provider  string
	Model     string
	Estimate  Estimate
	At        time.Time // picks the windows the hold and the committed usage count in
	ExpiresAt time.Time
	OnExpiry  ExpiryPolicy
	Holds     []Hold // one per applicable enabled limit (leases for concurrent ones)
}

// ExpiryPolicy is what happens to a reservation that reaches its expiry
// unsettled.
type ExpiryPolicy string

const (
	// ExpireRelease (the default): its holds stop counting at the expiry
	// instant and recovery frees them, charging nothing. Right when the
	// caller may never have spent anything (a CLI reservation, a job that
	// died before it started).
	ExpireRelease ExpiryPolicy = "release"
	// ExpireCharge: its window holds keep counting past the expiry until
	// recovery charges the estimate, as an event at the reservation's
	// instant with the reservation id as request id, so nobody is admitted
	// against money that may already be spent. Its concurrency leases still
	// end at the expiry. Right for a proxy, where the client may already
	// have its answer when the process dies; the proxy releases explicitly
	// when the upstream fails.
	ExpireCharge ExpiryPolicy = "charge"
)

// ParseExpiryPolicy parses "release" or "charge".
func ParseExpiryPolicy(s string) (ExpiryPolicy, error) {
	switch p := ExpiryPolicy(strings.TrimSpace(s)); p {
	case ExpireRelease, ExpireCharge:
		return p, nil
	case "":
		return ExpireRelease, nil
	}
	return "", invalid("on_expiry", s, "want release or charge")
}

// ReserveOptions are the optional parts of a reservation.
type ReserveOptions struct {
	// TTL is how long the holds and leases last unless renewed.
	// (Optional; default Config.ReservationTTL.)
	TTL time.Duration
	// OnExpiry is what recovery does once the TTL passed unsettled.
	// (Optional; default ExpireRelease.)
	OnExpiry ExpiryPolicy
	// MinOutput, when greater than 0, lets the output part of the estimate
	// shrink to fit: if the whole estimate does not fit, the reservation
	// holds the largest output between MinOutput and Estimate.Output that
	// every applicable limit counting output has room for (the input part
	// unchanged), decided in the same transaction as the rest. Only when
	// even MinOutput does not fit is the request refused, as for the whole
	// estimate. Reservation.Estimate.Output says what was granted: a caller
	// that injects an output cap into the request uses that. (Optional.)
	MinOutput int64
	// NoLease keeps this reservation on the store's path even when the
	// Tracker has leases on: a reservation committed or released by id
	// from another process (the CLI's reserve) must be a row of its own.
	// (Optional.)
	NoLease bool
}

// Settlement is what Commit did.
type Settlement struct {
	RequestID string // the reservation id, used as the event's request id
	// Expired is true when the reservation had expired before the commit:
	// the usage is recorded all the same (the tokens were spent).
	Expired bool
	// Charged is true when recovery had already charged the estimate of an
	// ExpireCharge reservation: only what the actual usage exceeds it by,
	// per token kind, was recorded, as the event LateRequestID.
	Charged bool
	// LateRequestID is RequestID + ":late" when Charged and some usage
	// exceeded the estimate, else "".
	LateRequestID string
}

// RecoverResult counts what Recover freed.
type RecoverResult struct {
	ReleasedReservations int64 // expired reservations whose holds were freed
	ReleasedLeases       int64 // concurrency leases among those holds
	// ChargedReservations counts the ExpireCharge reservations among
	// ReleasedReservations: each was charged its estimate.
	ChargedReservations int64
	Deleted             int64 // settled reservations past retention, removed
	// UnjournaledLeases counts the leases among ReleasedReservations
	// charged whole because their journal was not in Config.LeaseJournal
	// (ErrLeaseUnjournaled).
	UnjournaledLeases int64
}

// Reserve is ReserveWith with TTL ttl and the default expiry policy
// (ExpireRelease).
func (t *Tracker) Reserve(ctx context.Context, req Request, ttl time.Duration) (*Reservation, error) {
	return t.ReserveWith(ctx, req, ReserveOptions{TTL: ttl})
}

// ReserveWith atomically checks every applicable enabled limit and, only if
// all fit, holds the estimate on each (and takes a lease on concurrent
// limits) until the reservation is settled or opts.TTL passes. A refusal
// holds nothing and returns *ExceededError or *ParkedError.
//
// It runs on the writer's transaction after every event this process
// queued before it, so its own unflushed usage counts; holds that have
// expired stop counting whether or not a sweep has run (but see
// ExpireCharge).
func (t *Tracker) ReserveWith(ctx context.Context, req Request, opts ReserveOptions) (*Reservation, error) {
	req, err := normalizeRequest(req)
	if err != nil {
		return nil, err
	}
	e := req.Estimate
	if e.Tokens+e.Input+e.Output <= 0 {
		return nil, invalid("estimate", 0, "must be greater than 0")
	}
	ttl := opts.TTL
	if ttl < 0 {
		return nil, invalid("ttl", ttl, "must be greater than 0")
	}
	if ttl == 0 {
		ttl = t.cfg.ReservationTTL
	}
	policy, err := ParseExpiryPolicy(string(opts.OnExpiry))
	if err != nil {
		return nil, err
	}
	if opts.MinOutput < 0 || opts.MinOutput > MaxTokens {
		return nil, invalid("min_output", opts.MinOutput, "must be between 0 and 2^53-1")
	}
	now := t.now()
	// A tagged request is decided by the writer: a lease is carved per
	// route (key, user, provider, model), which tags would split further.
	leased := t.leasesOn() && !opts.NoLease && req.Tags == ""
	var tried string
	if leased {
		var r *Reservation
		if r, tried = t.reserveLeased(ctx, &req, ttl, policy, now); r != nil {
			return r, nil
		}
	}
	args := &opArgs{req: req, at: now, ttl: ttl, policy: policy, minOut: opts.MinOutput, lease: leased, resID: tried}
	r, err := t.do(ctx, newOp(opReserve, args))
	if errors.Is(err, errUnjournaled) {
		// Carved from a lease whose journal failed: decided again on the
		// store's path, a reservation of its own, under the same id (args
		// keep it): if the carve's record did land (its sync failed), a
		// recovery charges the one request once. Not cut short by the
		// caller: its admission may be journaled, and only the store's row
		// of its id tells recovery to leave it alone; a caller that has
		// gone gets its row released (charged nothing) and its error.
		args.lease = false
		bg := context.WithoutCancel(ctx)
		r, err = t.do(bg, newOp(opReserve, args))
		if err == nil && ctx.Err() != nil {
			if rerr := t.Release(bg, r.res.ID); rerr != nil {
				t.reportErr(fmt.Errorf("budget: releasing reservation %s of a caller that left: %w", r.res.ID, rerr))
			}
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	return r.res, nil
}

// newOp is a reservation operation with its answer's room.
func newOp(kind opKind, args *opArgs) *op {
	return &op{kind: kind, opArgs: args, done: make(chan opResult, 1), out: new(opResult)}
}

// do queues o and waits for its answer.
func (t *Tracker) do(ctx context.Context, o *op) (opResult, error) {
	if err := t.enqueue(ctx, o); err != nil {
		return opResult{}, err
	}
	r := t.wait(ctx, o)
	return r, r.err
}

// Commit records the actual usage of reservation id as an event at the
// reservation's instant (request id = reservation id; key, provider and
// model from the reservation) and frees its holds, in one transaction. The
// actual may be larger or smaller than the estimate: it is recorded as it
// is. A commit after expiry still records the usage and reports Expired; if
// recovery already charged an ExpireCharge reservation its estimate, only
// the excess is recorded (see Settlement.Charged). A second commit or a
// commit after Release returns ErrSettled.
//
// Once queued, a Commit is never given up: if the store stays unwritable,
// the caller gets the error (after Config.FlushFailures attempts, or when
// ctx ends) while the writer keeps retrying it like recorded usage.
func (t *Tracker) Commit(ctx context.Context, id string, actual Usage) (Settlement, error) {
	o, mem, s, err := t.commitQueued(ctx, id, actual)
	if mem || err != nil {
		return s, err
	}
	r := t.wait(ctx, o)
	return r.settlement, r.err
}

// chargedUsage is the event recovery writes for an ExpireCharge
// reservation: its estimate, an unsplit part counted as input.
func chargedUsage(r ReservationRow) Usage {
	return Usage{RequestID: r.ID, Key: r.Key, Team: r.Team, Org: r.Org, User: r.User, Tags: r.Tags, Provider: r.Provider, Model: r.Model,
		Input: min(r.Estimate.Input+r.Estimate.Tokens, MaxTokens), Output: r.Estimate.Output, At: r.At}
}

// lateUsage is what actual exceeds the charged estimate by, per token kind,
// as the event id + ":late". The estimate's output part covers output and
// then reasoning (the output metric counts both); its unsplit part covers
// whatever input, output and reasoning the split parts did not. Cache
// counts are a breakdown of input the charge already covered, so the late
// event carries none.
func lateUsage(actual Usage, est Estimate) Usage {
	late := actual
	late.RequestID += LateSuffix
	late.CacheRead, late.CacheWrite, late.CacheWrite1h = 0, 0, 0
	// A cost the caller priced (PriceUsage) is the whole usage's: the
	// excess is priced again when it is written.
	late.Cost, late.CostKnown, late.NoPrice = 0, false, false
	shared := est.Tokens
	over := func(v, allowance int64) int64 {
		v -= min(v, allowance)
		use := min(v, shared)
		shared -= use
		return v - use
	}
	late.Input = over(actual.Input, est.Input)
	outAllow := est.Output
	late.Output = over(actual.Output, outAllow)
	outAllow -= min(outAllow, actual.Output)
	late.Reasoning = over(actual.Reasoning, outAllow)
	return late
}

// Release frees the holds and leases of reservation id without recording
// usage, for a request that failed. Releasing an expired, unsettled
// reservation succeeds; a settled one returns ErrSettled.
func (t *Tracker) Release(ctx context.Context, id string) error {
	o, mem, err := t.releaseQueued(ctx, id)
	if mem || err != nil {
		return err
	}
	return t.wait(ctx, o).err
}

// Renew extends reservation id and its leases to ttl from now (0:
// Config.ReservationTTL). A reservation that expired or was settled returns
// ErrLeaseLost: its holds may already be someone else's room.
func (t *Tracker) Renew(ctx context.Context, id string, ttl time.Duration) (time.Time, error) {
	if ttl < 0 {
		return time.Time{}, invalid("ttl", ttl, "must be greater than 0")
	}
	if ttl == 0 {
		ttl = t.cfg.ReservationTTL
	}
	if exp, ok, err := t.renewLeased(id, ttl); ok {
		return exp, err
	}
	r, err := t.do(ctx, newOp(opRenew, &opArgs{id: id, ttl: ttl}))
	return r.expires, err
}

func settledError(id string, s ReservationState) error {
	return &settled{id: id, state: s}
}

type settled struct {
	id    string
	state ReservationState
}

func (e *settled) Error() string { return "reservation " + e.id + " already " + string(e.state) }
func (e *settled) Unwrap() error { return ErrSettled }

// Recover settles the reservations expired at now: an ExpireRelease one
// has its holds and leases freed; an ExpireCharge one is charged its
// estimate (see chargedUsage) and then freed. Both are marked expired and
// stay committable for Config.SettledRetention; settled reservations older
// than that are deleted. It runs on the writer's transaction. Several
// processes may run it at once: each reservation is recovered, and charged,
// by exactly one.
func (t *Tracker) Recover(ctx context.Context, now time.Time) (RecoverResult, error) {
	var res RecoverResult
	for {
		r, err := t.do(ctx, newOp(opRecover, &opArgs{at: now}))
		if err != nil {
			return res, err
		}
		res.ReleasedReservations += r.recovered.ReleasedReservations
		res.ReleasedLeases += r.recovered.ReleasedLeases
		res.ChargedReservations += r.recovered.ChargedReservations
		res.Deleted += r.recovered.Deleted
		res.UnjournaledLeases += r.recovered.UnjournaledLeases
		if !r.more {
			return res, nil
		}
	}
}

// isDomainError tells a refusal or bad request (the caller's answer) from
// a store failure (the batch's problem).
func isDomainError(err error) bool {
	return err != nil && (errors.Is(err, ErrNotFound) || errors.Is(err, ErrSettled) ||
		errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrInvalid))
}

// cacheHolds adds (add) or removes the reservation's holds on the cached
// counters. Adding is idempotent, as a refresh may already have read them.
func (t *Tracker) cacheHolds(id string, holds []Hold, add bool) {
	for _, h := range holds {
		c := t.counters.Peek(h.windowKey())
		if c == nil {
			continue
		}
		ch := cache.Hold{ID: id, Amount: h.Amount, ExpiresAt: h.ExpiresAt.UnixNano()}
		c.UpdateHolds(func(cur []cache.Hold) []cache.Hold {
			cur = slices.DeleteFunc(cur, func(x cache.Hold) bool { return x.ID == id })
			if add {
				cur = append(cur, ch)
			}
			return cur
		})
	}
}

func nsOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
