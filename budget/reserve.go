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
	ID        string
	Key       string
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
	at := t.now()
	var res *Reservation
	var refusal error
	err = t.inTx(ctx, false, func(ctx context.Context, tx Tx, now time.Time) error {
		res, refusal = nil, nil
		var err error
		res, refusal, err = t.reserveTx(ctx, tx, req, at, ttl, policy, opts.MinOutput)
		return err
	}, func() {
		if res != nil {
			t.cacheHolds(res.ID, res.Holds, true)
		}
	})
	if err != nil {
		return nil, err
	}
	if refusal != nil {
		return nil, refusal
	}
	return res, nil
}

func (t *Tracker) reserveTx(ctx context.Context, tx Tx, req Request, at time.Time, ttl time.Duration, policy ExpiryPolicy, minOutput int64) (*Reservation, error, error) {
	if req.Provider != "" {
		p, err := tx.Provider(ctx, req.Provider)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, nil, err
		}
		if err == nil && p.Refusing(at) {
			return nil, &ParkedError{Provider: p, RetryAfter: p.ResumeAt.Sub(at)}, nil
		}
	}
	ls, err := t.limitsFor(ctx, tx, req.Key)
	if err != nil {
		return nil, nil, err
	}
	var apply []Limit
	model := NormalizeModel(req.Model)
	for i := range ls {
		if ls[i].Enabled && ls[i].Applies(req.Key, req.Provider, model) {
			apply = append(apply, ls[i])
		}
	}
	slices.SortFunc(apply, func(a, b Limit) int { return strings.Compare(a.ID, b.ID) })
	ids := make([]string, len(apply))
	for i := range apply {
		ids[i] = apply[i].ID
	}
	if err := tx.LockLimits(ctx, ids); err != nil {
		return nil, nil, err
	}
	statuses := make([]Status, 0, len(apply))
	for i := range apply {
		st, err := storedStatus(ctx, tx, &apply[i], at)
		if err != nil {
			return nil, nil, err
		}
		statuses = append(statuses, st)
	}
	sortStatuses(statuses)
	if hasUSD(apply) {
		table, err := t.writerPrices(ctx, tx)
		if err != nil {
			return nil, nil, err
		}
		if !priceEstimate(table, statuses, req.Provider, model, at, &req.Estimate) {
			d := Decide(statuses, req.Estimate, at)
			d.Allowed, d.Unpriced = false, &Unpriced{Provider: req.Provider, Model: req.Model}
			return nil, &UnpricedError{Provider: req.Provider, Model: req.Model, Decision: d}, nil
		}
	}
	if d := Decide(statuses, req.Estimate, at); !d.Allowed {
		fit, ok := FitOutput(statuses, req.Estimate, minOutput)
		if !ok {
			return nil, &ExceededError{Decision: d}, nil
		}
		req.Estimate = fit
	}
	r := &Reservation{ID: NewID("rsv_"), Key: req.Key, Provider: req.Provider, Model: req.Model,
		Estimate: req.Estimate, At: at, ExpiresAt: at.Add(ttl), OnExpiry: policy}
	for i := range statuses {
		l := &statuses[i].Limit
		exp := r.ExpiresAt
		if policy == ExpireCharge && l.Metric != MetricConcurrent {
			exp = NoExpiry
		}
		r.Holds = append(r.Holds, Hold{ReservationID: r.ID, LimitID: l.ID, Subject: l.Subject, WindowStart: statuses[i].WindowStart,
			Amount: req.Estimate.Amount(l.Metric), ExpiresAt: exp})
	}
	row := ReservationRow{ID: r.ID, Key: r.Key, Provider: r.Provider, Model: r.Model, Estimate: r.Estimate,
		At: r.At, ExpiresAt: r.ExpiresAt, State: ReservationLive, OnExpiry: policy}
	if err := tx.InsertReservation(ctx, row, r.Holds); err != nil {
		return nil, nil, err
	}
	return r, nil, nil
}

func sortStatuses(s []Status) {
	slices.SortFunc(s, func(a, b Status) int { return a.Limit.Compare(&b.Limit) })
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
	actual.Key = "commit" // validated below; the reservation's key is used
	actual.RequestID = id
	if _, err := actual.Normalize(time.Unix(0, 0)); err != nil {
		return Settlement{}, err
	}
	var out Settlement
	var dropped []Hold
	var deltas []windowDelta
	err := t.inTx(ctx, true, func(ctx context.Context, tx Tx, now time.Time) error {
		out, dropped, deltas = Settlement{}, nil, nil
		r, err := tx.Reservation(ctx, id)
		if err != nil {
			return err
		}
		if r.State == ReservationCommitted || r.State == ReservationReleased {
			return settledError(id, r.State)
		}
		out = Settlement{RequestID: id, Expired: r.State == ReservationExpired || !now.Before(r.ExpiresAt)}
		ev := actual
		ev.Key, ev.Provider, ev.Model, ev.At = r.Key, r.Provider, r.Model, r.At
		if r.State == ReservationExpired && r.OnExpiry == ExpireCharge {
			out.Charged = true
			ev = lateUsage(ev, r.Estimate)
		}
		// A commit records its event even with no tokens (it is a request);
		// after a charge only an excess is recorded.
		if !out.Charged || ev.Billable() > 0 {
			if out.Charged {
				out.LateRequestID = ev.RequestID
			}
			var ins []bool
			if ins, deltas, err = t.applyUsage(ctx, tx, []Usage{ev}, now); err != nil {
				return err
			}
			if !ins[0] {
				// Another process charged this reservation between our read
				// and our write (PostgreSQL): fail the batch, so the retry
				// reads it charged and records only the excess.
				return fmt.Errorf("commit %s: raced its recovery by another process; retrying", id)
			}
		}
		dropped, err = tx.SettleReservation(ctx, id, ReservationCommitted, now)
		return err
	}, func() {
		t.invalidate(deltas)
		t.cacheHolds(id, dropped, false)
	})
	return out, err
}

// chargedUsage is the event recovery writes for an ExpireCharge
// reservation: its estimate, an unsplit part counted as input.
func chargedUsage(r ReservationRow) Usage {
	return Usage{RequestID: r.ID, Key: r.Key, Provider: r.Provider, Model: r.Model,
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
	late.RequestID += ":late"
	late.CacheRead, late.CacheWrite = 0, 0
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

// invalidate makes the cached counters of the windows a commit or a
// recovery wrote re-read from the store.
func (t *Tracker) invalidate(deltas []windowDelta) {
	for _, d := range deltas {
		if c := t.counters.Peek(d.key); c != nil {
			c.Invalidate()
		}
	}
}

// Release frees the holds and leases of reservation id without recording
// usage, for a request that failed. Releasing an expired, unsettled
// reservation succeeds; a settled one returns ErrSettled.
func (t *Tracker) Release(ctx context.Context, id string) error {
	var dropped []Hold
	return t.inTx(ctx, true, func(ctx context.Context, tx Tx, now time.Time) error {
		dropped = nil
		r, err := tx.Reservation(ctx, id)
		if err != nil {
			return err
		}
		if r.State == ReservationCommitted || r.State == ReservationReleased {
			return settledError(id, r.State)
		}
		dropped, err = tx.SettleReservation(ctx, id, ReservationReleased, now)
		return err
	}, func() { t.cacheHolds(id, dropped, false) })
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
	var exp time.Time
	var holds []Hold
	err := t.inTx(ctx, false, func(ctx context.Context, tx Tx, now time.Time) error {
		r, err := tx.Reservation(ctx, id)
		if err != nil {
			return err
		}
		if r.State != ReservationLive || !now.Before(r.ExpiresAt) {
			return ErrLeaseLost
		}
		exp = now.Add(ttl)
		holds, err = tx.ReservationHolds(ctx, id)
		if err != nil {
			return err
		}
		return tx.RenewReservation(ctx, id, exp)
	}, func() {
		for i := range holds {
			if !holds[i].ExpiresAt.Equal(NoExpiry) {
				holds[i].ExpiresAt = exp
			}
		}
		t.cacheHolds(id, holds, true)
	})
	return exp, err
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
	var deltas []windowDelta
	var dropped map[string][]Hold
	err := t.inTx(ctx, false, func(ctx context.Context, tx Tx, _ time.Time) error {
		res, deltas, dropped = RecoverResult{}, nil, map[string][]Hold{}
		for {
			rows, err := tx.ExpiredReservations(ctx, now, 500)
			if err != nil {
				return err
			}
			var charges []Usage
			for _, r := range rows {
				if r.OnExpiry == ExpireCharge {
					charges = append(charges, chargedUsage(r))
				}
			}
			// Charged before the holds go, so the limits never show room
			// the charge is about to take.
			if len(charges) > 0 {
				_, ds, err := t.applyUsage(ctx, tx, charges, now)
				if err != nil {
					return err
				}
				deltas = append(deltas, ds...)
				res.ChargedReservations += int64(len(charges))
			}
			for _, r := range rows {
				hs, err := tx.SettleReservation(ctx, r.ID, ReservationExpired, now)
				if err != nil {
					return err
				}
				dropped[r.ID] = hs
				res.ReleasedReservations++
				for _, h := range hs {
					if h.WindowStart.IsZero() {
						res.ReleasedLeases++
					}
				}
			}
			if len(rows) < 500 {
				break
			}
		}
		n, err := tx.DeleteSettledBefore(ctx, now.Add(-t.cfg.SettledRetention))
		res.Deleted = n
		return err
	}, func() {
		t.invalidate(deltas)
		for id, hs := range dropped {
			t.cacheHolds(id, hs, false)
		}
	})
	return res, err
}

// inTx runs fn inside the writer's next batch transaction and then, once
// that committed, after (on the writer goroutine). fn may run more than
// once; it must reset what it reports. A domain error fn returns (not
// found, settled, invalid) is the caller's answer and does not fail the
// batch, so fn must return one only before it writes.
//
// If the caller's ctx ends while the operation is still queued, it is
// withdrawn and never runs, unless keep is set: a settlement (Commit,
// Release) is never given up once queued. It runs, and is retried with its
// batch like recorded usage, even after its caller stopped waiting.
func (t *Tracker) inTx(ctx context.Context, keep bool, fn func(context.Context, Tx, time.Time) error, after func()) error {
	var fnErr error
	sent := false // after runs on the writer goroutine only
	done := make(chan opResult, 1)
	o := &op{kind: opTx, keep: keep, done: done,
		run: func(ctx context.Context, tx Tx, now time.Time) error {
			fnErr = nil
			// Every fn refuses (a domain error) before it writes, so
			// reporting the refusal needs no rollback of its own.
			err := fn(ctx, tx, now)
			if isDomainError(err) {
				fnErr = err
				return nil
			}
			return err
		},
		after: func(err error) {
			if err == nil && fnErr == nil && after != nil {
				after()
			}
			// A kept operation whose caller was told of a failure may still
			// land later: its cache update runs, its answer is not repeated.
			if sent {
				return
			}
			sent = true
			if err == nil {
				err = fnErr
			}
			done <- opResult{err: err}
		},
	}
	if err := t.enqueue(ctx, o); err != nil {
		return err
	}
	return t.wait(ctx, o).err
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
		c := t.counters.Peek(cache.Key{LimitID: h.LimitID, Subject: h.Subject, Start: nsOf(h.WindowStart)})
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
