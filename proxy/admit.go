package proxy

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// admit reserves (or checks) req. minOutput > 0 lets the output estimate
// shrink to fit the room left, down to minOutput (a request that gets an
// injected cap): the estimate admitted is in info.Estimate. It fills
// info.RequestID and the success headers into extra, or answers the
// refusal and returns false.
func (m *Middleware) admit(w http.ResponseWriter, r *http.Request, f Format, req budget.Request, minOutput int64, info *Info, extra http.Header) (*budget.Reservation, bool) {
	ctx := r.Context()
	bp := m.statusBuf()
	defer m.bufs.Put(bp)
	if m.cfg.Mode == ModeCheck {
		now := m.t.Now()
		d, err := m.t.CheckInto(ctx, req, now, *bp)
		*bp = d.Limits[:0]
		if err != nil {
			m.admitError(w, r, f, err)
			return nil, false
		}
		// Decided on: its dollars priced, which a refusal states.
		est := d.Estimate
		if !d.Allowed && minOutput > 0 {
			// The same rule as reserve mode's MinOutput, on the statuses
			// Check read: only a budget refusal can be helped by a
			// smaller output (not a park, nor anything else Err names).
			var ee *budget.ExceededError
			if errors.As(d.Err(), &ee) {
				if fit, ok := budget.FitOutput(d.Limits, d.Estimate, minOutput, d.Price); ok {
					req.Estimate, d.Allowed, d.Breach = fit, true, nil
				} else {
					d, est = atFloor(d, d.Estimate, minOutput, now)
				}
			}
		}
		if !d.Allowed {
			m.refuse(w, r, f, &d, est, now)
			return nil, false
		}
		if m.cfg.RequireLimits && len(d.Limits) == 0 {
			m.noBudget(w, f, req.Key)
			return nil, false
		}
		info.RequestID, info.At, info.Estimate = budget.NewID("req_"), now, req.Estimate
		setRateLimitHeaders(extra, d.Limits, req.Estimate, now, true)
		setMatchedHeaders(extra, d.Limits, req.Estimate)
		return nil, true
	}
	// Not cancelled with the request: a reservation made for a client that
	// left meanwhile must be known, to be released, not left to expire.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	// Charged on expiry: if this process dies, the client may already have
	// its answer, so recovery charges the estimate rather than freeing it.
	res, err := m.t.ReserveWith(rctx, req, budget.ReserveOptions{TTL: m.cfg.ReservationTTL, OnExpiry: budget.ExpireCharge, MinOutput: minOutput})
	if err == nil && (ctx.Err() != nil || m.cfg.RequireLimits && len(res.Holds) == 0) {
		if ctx.Err() != nil {
			m.outcome(w, OutcomeClientClosed)
		} else {
			// Decided on the reservation, not on a cached check before it:
			// it is the answer that saw every limit, default ones included.
			m.noBudget(w, f, req.Key)
		}
		if err := m.t.Release(rctx, res.ID); err != nil {
			m.cfg.Metrics.settleError()
			m.log.Error("proxy: releasing a reservation that was not used failed", "request_id", res.ID, "err", err)
		}
		return nil, false
	}
	if err != nil {
		var ee *budget.ExceededError
		var pe *budget.ParkedError
		var ue *budget.UnpricedError
		switch {
		case errors.As(err, &ue):
			m.outcome(w, OutcomeRefused)
			m.writeRefusal(w, r, f, unpricedError(w.Header(), f, ue.Provider, ue.Model), usdLimit(ue.Decision.Limits))
		case errors.As(err, &ee):
			now := m.t.Now()
			d, est := ee.Decision, ee.Decision.Estimate
			if minOutput > 0 {
				d, est = atFloor(d, est, minOutput, now)
			}
			m.refuse(w, r, f, &d, est, now)
		case errors.As(err, &pe):
			m.outcome(w, OutcomeParked)
			writeError(w, f, parkedError(w.Header(), f, pe.Provider, ceilSeconds(pe.RetryAfter), m.cfg.MaxClientWait))
		default:
			m.admitError(w, r, f, err)
		}
		return nil, false
	}
	info.RequestID, info.At, info.Estimate = res.ID, res.At, res.Estimate
	info.Team, info.Org = res.Team, res.Org
	// The statuses for the headers: the cache holds the reservation now.
	now := m.t.Now()
	if d, err := m.t.CheckInto(ctx, req, now, *bp); err == nil {
		setRateLimitHeaders(extra, d.Limits, budget.Estimate{}, now, true)
		setMatchedHeaders(extra, d.Limits, budget.Estimate{})
		*bp = d.Limits[:0]
	}
	return res, true
}

// atFloor is the refusal d of estimate est, whose output could have shrunk
// to minOutput, decided again at that floor: the request needed only its
// input and the floor to be admitted, so that is what its breach, its
// wait and whether it can ever fit are about. (Decided on the full
// estimate, a request without a cap would be told it can never fit a limit
// smaller than the default max output, and not to retry.)
func atFloor(d budget.Decision, est budget.Estimate, minOutput int64, now time.Time) (budget.Decision, budget.Estimate) {
	floor := est
	floor.Output = min(est.Output, minOutput)
	if d.Price != nil {
		floor.USD = d.Price.EstimateCost(floor)
	}
	fd := budget.Decide(d.Limits, floor, now)
	if fd.Allowed || fd.Breach == nil {
		return d, est // cannot happen: FitOutput found no room for the floor
	}
	fd.Parked, fd.Price = d.Parked, d.Price
	return fd, floor
}

// noBudget answers a request that no enabled limit applies to while
// Config.RequireLimits is set: 403, never retried.
func (m *Middleware) noBudget(w http.ResponseWriter, f Format, key string) {
	m.outcome(w, OutcomeNoBudget)
	w.Header().Set("X-Should-Retry", "false")
	writeError(w, f, simpleError(f, http.StatusForbidden, CodeNoBudget,
		"no budget: no limit applies to gateway key "+key+" for this request, and this gateway refuses unbudgeted requests; "+
			"ask its operator for a limit ('budget limit set --key "+key+" ...' or a default limit)"))
}

func (m *Middleware) statusBuf() *[]budget.Status {
	if p, ok := m.bufs.Get().(*[]budget.Status); ok {
		return p
	}
	s := make([]budget.Status, 0, 8)
	return &s
}

// refuse answers a refused decision: the parked provider wins (no budget
// helps), else the breach.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, f Format, d *budget.Decision, est budget.Estimate, now time.Time) {
	if d.Parked != nil {
		m.outcome(w, OutcomeParked)
		writeError(w, f, parkedError(w.Header(), f, d.Parked.ProviderState, d.Parked.RetryAfterSeconds(), m.cfg.MaxClientWait))
		return
	}
	if d.Unpriced != nil {
		m.outcome(w, OutcomeRefused)
		m.writeRefusal(w, r, f, unpricedError(w.Header(), f, d.Unpriced.Provider, d.Unpriced.Model), usdLimit(d.Limits))
		return
	}
	m.outcome(w, OutcomeRefused)
	if d.Breach != nil {
		m.cfg.Metrics.refused(d.Breach.Limit.Scope)
	}
	m.writeRefusal(w, r, f, exceededError(w.Header(), f, d, est, now, m.cfg.MaxClientWait), nil)
}

// writeRefusal writes the budget refusal e, first telling the access log
// and Refusals.Wrap which limit refused, its level and e's code. The limit
// is the one e names (its limit object, the one the message is about),
// else lim (an unpriced model: the dollar limit that needs the price).
func (m *Middleware) writeRefusal(w http.ResponseWriter, r *http.Request, f Format, e apiError, lim *budget.Limit) {
	var id, level, scope string
	switch {
	case e.limit != nil:
		id, level, scope = e.limit.ID, e.limit.Level, w.Header().Get(limitScopeHeader)
	case lim != nil:
		id, level, scope = lim.ID, string(lim.Level()), lim.ScopeString()
	}
	if x, ok := w.(*exchange); ok {
		x.refusedLimit, x.refusedLevel, x.refusedCode = id, level, e.code
	}
	if n, ok := r.Context().Value(refusalNoteKey{}).(*refusalNote); ok {
		*n = refusalNote{refused: true, limit: id, level: level, scope: scope, code: e.code}
	}
	writeError(w, f, e)
}

// usdLimit is the first dollar limit of ls (nil when none is).
func usdLimit(ls []budget.Status) *budget.Limit {
	for i := range ls {
		if ls[i].Limit.Metric == budget.MetricUSD {
			return &ls[i].Limit
		}
	}
	return nil
}

// admitError answers a failed check or reservation: 400 for input the
// tracker rejects, else 503.
func (m *Middleware) admitError(w http.ResponseWriter, r *http.Request, f Format, err error) {
	if errors.Is(err, budget.ErrInvalid) {
		m.outcome(w, OutcomeBadRequest)
		writeError(w, f, simpleError(f, http.StatusBadRequest, CodeBadRequest, err.Error()))
		return
	}
	m.unavailable(w, r, f, "check the budget", err)
}

// unavailable answers 503 when the budget store fails (nothing when the
// client has left: that is why the call failed).
func (m *Middleware) unavailable(w http.ResponseWriter, r *http.Request, f Format, what string, err error) {
	if r.Context().Err() != nil {
		m.outcome(w, OutcomeClientClosed)
		return
	}
	m.outcome(w, OutcomeError)
	m.log.Error("proxy: cannot "+what+"; refusing the request", "err", err)
	w.Header().Set("Retry-After", "1")
	writeError(w, f, simpleError(f, http.StatusServiceUnavailable, CodeUnavailable, "the gateway cannot "+what+" now; retry shortly"))
}

// renewer extends a reservation every third of its TTL while the response
// lasts, so a live request keeps its concurrency leases while those of a
// crashed proxy lapse within one TTL.
type renewer struct {
	mu      sync.Mutex
	stopped bool
	timer   renewTimer
	cancel  context.CancelFunc
}

// renewTimer is what a renewer needs of its timer: *time.Timer's methods.
type renewTimer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

// afterFunc is time.AfterFunc, or Config.renewAfter: the tests' timers,
// which they fire themselves, so that no test waits on the wall clock for
// a renewal.
func (m *Middleware) afterFunc(d time.Duration, f func()) renewTimer {
	if m.cfg.renewAfter != nil {
		return m.cfg.renewAfter(d, f)
	}
	return time.AfterFunc(d, f)
}

func (m *Middleware) startRenew(res *budget.Reservation) *renewer {
	ttl := res.ExpiresAt.Sub(res.At)
	if ttl <= 0 {
		return nil
	}
	every := max(ttl/3, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	rn := &renewer{cancel: cancel}
	tick := func() {
		// Bounded by the interval: a renewal stuck behind an unwritable
		// database must not pile up behind the next one.
		rctx, done := context.WithTimeout(ctx, every)
		_, err := m.t.Renew(rctx, res.ID, ttl)
		done()
		rn.mu.Lock()
		defer rn.mu.Unlock()
		if rn.stopped {
			return
		}
		if err != nil {
			// An expired reservation is charged its estimate by recovery;
			// the commit then records only the excess. Nothing is lost.
			if errors.Is(err, budget.ErrLeaseLost) {
				m.log.Warn("proxy: a reservation expired before its response ended; it is charged its estimate, the commit adds any excess",
					"request_id", res.ID)
				return
			}
			m.log.Warn("proxy: renewing a reservation failed; retrying", "request_id", res.ID, "err", err)
		}
		rn.timer.Reset(every)
	}
	rn.mu.Lock()
	rn.timer = m.afterFunc(every, tick)
	rn.mu.Unlock()
	return rn
}

// stop ends the renewals without waiting for one in progress: the
// response is over and its settlement must not queue behind a renewal.
func (rn *renewer) stop() {
	rn.mu.Lock()
	rn.stopped = true
	rn.timer.Stop()
	rn.mu.Unlock()
	rn.cancel()
}
