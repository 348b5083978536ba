package budget

import (
	"time"
)

// Estimate is what a request is expected to cost before it runs. Tokens is
// an unsplit estimate that counts fully against every token metric (the
// CLI's --tokens); Input and Output count against their own metric and both
// against tokens.
type Estimate struct {
	Tokens int64
	Input  int64
	Output int64
	// USD is the estimate in micro-dollars, for usd limits. The Tracker
	// fills it from the price table whenever a usd limit applies; callers
	// leave it zero.
	USD int64
}

// Amount is the estimate as seen by a limit of metric m. Requests and
// concurrent limits always count one.
func (e Estimate) Amount(m Metric) int64 {
	switch m {
	case MetricTokens:
		return e.Tokens + e.Input + e.Output
	case MetricInput:
		return e.Tokens + e.Input
	case MetricOutput:
		return e.Tokens + e.Output
	case MetricUSD:
		return e.USD
	}
	return 1
}

func (e Estimate) validate() error {
	for i, v := range [3]int64{e.Tokens, e.Input, e.Output} {
		if v < 0 || v > MaxTokens {
			return invalid("estimate."+[3]string{"tokens", "input", "output"}[i], v, "must be between 0 and 2^53-1")
		}
	}
	if e.Tokens+e.Input+e.Output > MaxTokens {
		return invalid("estimate", e.Tokens+e.Input+e.Output, "overflows 2^53-1")
	}
	return nil
}

// Request names who is asking and what it may cost.
type Request struct {
	Key      string
	Provider string
	Model    string
	// User is the end user the request is for ("" when none is known):
	// user-scope limits apply by it.
	User string
	// Tags are what the request is for ("project=atlas,feature=search"):
	// tag-scope limits apply by them (see Tags).
	Tags     Tags
	Estimate Estimate
	// ServiceTier is the tier the request asks to be served at ("flex",
	// "priority"; "" standard): its estimate is priced at that tier's
	// price (Prices.For).
	ServiceTier string
}

// Status is one limit as it stands at an instant.
type Status struct {
	Limit Limit
	// Max is the limit in force at the status's instant: Limit.Max with
	// the raises active then (Limit.MaxAt).
	Max int64
	// WindowStart and ResetAt bound the current window; zero for concurrent
	// limits, which have none.
	WindowStart time.Time
	ResetAt     time.Time
	// Used is the window's usage (live leases for a concurrent limit),
	// including this process's usage that is queued but not yet written.
	Used int64
	// Reserved is held by live reservations in the window.
	Reserved int64
	// NextExpiry is the earliest live lease expiry of a concurrent limit.
	NextExpiry time.Time
}

// Remaining is Max - Used - Reserved, clamped at 0.
func (s *Status) Remaining() int64 {
	r := s.Max - s.Used - s.Reserved
	if r < 0 {
		return 0
	}
	return r
}

// Breach is the most restrictive limit that refused a request.
type Breach struct {
	Status
	// RetryAfter is the longest wait among all breached limits, in whole
	// seconds rounded up: a window limit waits for its reset (an upper
	// bound), a concurrent one for its earliest lease expiry, at most 5 s.
	RetryAfter time.Duration
	// Retryable is false when the estimate alone exceeds a breached limit:
	// waiting cannot help.
	Retryable bool
}

// Parked is a refusal because the request's provider is parked.
type Parked struct {
	ProviderState
	RetryAfter time.Duration // the wait left until resume-at, in whole seconds rounded up
}

// RetryAfterSeconds is RetryAfter in seconds, as a Retry-After header and
// the JSON's retry_after_seconds carry it.
func (b *Breach) RetryAfterSeconds() int64 { return int64(b.RetryAfter / time.Second) }

// RetryAfterSeconds is RetryAfter in seconds.
func (p *Parked) RetryAfterSeconds() int64 { return int64(p.RetryAfter / time.Second) }

// Decision is the answer to "may this request run now?".
type Decision struct {
	Allowed bool
	// Breach is the most restrictive exceeded limit, or nil.
	Breach *Breach
	// Until is the exceeded limit whose reset decides when the request
	// could pass: the last to reset of those that do (a window that
	// resets, leases that expire), ties to the more restrictive; nil when
	// none does. Its RetryAfter is its own wait, which is Breach's,
	// the longest; a refusal that tells a client when to retry names it,
	// or the wait and the limit named disagree.
	Until *Breach
	// Parked is set while the request's provider refuses work.
	Parked *Parked
	// Limits holds every applicable enabled limit, in listing order.
	Limits []Status
	// Unpriced is set when a usd limit applies and no price matches the
	// request's provider and model: admitting it would count it at $0.
	Unpriced *Unpriced
	// Estimate is the estimate decided on, its USD priced when a usd limit
	// applies: what a refusal says the request needs.
	Estimate Estimate
	// Price is the price Estimate.USD was priced at (nil when no usd limit
	// applies), for FitOutput on these statuses.
	Price *Price
}

// Unpriced names a request's model that has no price while a usd limit
// applies to it.
type Unpriced struct {
	Provider, Model string
}

// maxConcurrentWait caps the retry-after of a refused concurrent limit.
const maxConcurrentWait = 5 * time.Second

// Decide applies contract section 4 to the statuses of the applicable enabled
// limits. It is pure, so the Tracker's cache path and a store transaction
// reach the same answer.
func Decide(statuses []Status, est Estimate, now time.Time) Decision {
	d := Decision{Allowed: true, Limits: statuses, Estimate: est}
	var best, until *Status
	var bestRem, untilRem, wait int64
	retryable := true
	for i := range statuses {
		s := &statuses[i]
		e := est.Amount(s.Limit.Metric)
		held := s.Used + s.Reserved
		if e > 0 && held+e <= s.Max || e == 0 && held < s.Max {
			continue
		}
		d.Allowed = false
		rem := s.Max - held - e
		if best == nil || moreRestrictive(s, rem, best, bestRem) {
			best, bestRem = s, rem
		}
		// Waiting cannot help an estimate above the limit, nor a window
		// that never resets (a prepaid balance waits for a raise).
		if e > s.Max {
			retryable = false
		}
		if s.Limit.Window.Kind == Once {
			retryable = false
			continue // no reset to wait for
		}
		if w := s.wait(now); until == nil || w > wait || w == wait && moreRestrictive(s, rem, until, untilRem) {
			wait, until, untilRem = w, s, rem
		}
	}
	if best != nil {
		d.Breach = &Breach{Status: *best, RetryAfter: time.Duration(wait) * time.Second, Retryable: retryable}
	}
	if until != nil {
		d.Until = &Breach{Status: *until, RetryAfter: time.Duration(wait) * time.Second, Retryable: retryable}
	}
	return d
}

// moreRestrictive reports whether breach s (room rem after the estimate)
// ranks before breach b (room brem): within one metric, less room, then
// the smaller limit, then the smaller id; across metrics (tokens against
// dollars), less room as a fraction of the limit first.
func moreRestrictive(s *Status, rem int64, b *Status, brem int64) bool {
	if s.Limit.Metric != b.Limit.Metric && countsAmount(s.Limit.Metric) && countsAmount(b.Limit.Metric) {
		fs, fb := float64(rem)/float64(s.Max), float64(brem)/float64(b.Max)
		if fs != fb {
			return fs < fb
		}
	} else if rem != brem {
		return rem < brem
	}
	if s.Max != b.Max {
		return s.Max < b.Max
	}
	return s.Limit.ID < b.Limit.ID
}

// countsAmount is true for metrics whose limits are amounts (tokens or
// dollars) rather than counts of requests.
func countsAmount(m Metric) bool { return m != MetricRequests && m != MetricConcurrent }

// wait is how long the limit refuses, in whole seconds rounded up.
func (s *Status) wait(now time.Time) int64 {
	if s.Limit.Metric == MetricConcurrent {
		if s.NextExpiry.IsZero() {
			return ceilSeconds(maxConcurrentWait)
		}
		return ceilSeconds(min(s.NextExpiry.Sub(now), maxConcurrentWait))
	}
	return ceilSeconds(s.ResetAt.Sub(now))
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Err is nil for an allowed decision, else the typed refusal: *ParkedError
// when the provider is parked (it wins: no budget helps), else
// *ExceededError.
func (d Decision) Err() error {
	switch {
	case d.Allowed:
		return nil
	case d.Parked != nil:
		return &ParkedError{Provider: d.Parked.ProviderState, RetryAfter: d.Parked.RetryAfter}
	case d.Unpriced != nil:
		return &UnpricedError{Provider: d.Unpriced.Provider, Model: d.Unpriced.Model, Decision: d}
	}
	return &ExceededError{Decision: d}
}

// FitOutput shrinks the output part of est to the largest value at least
// minOutput that every status counting output has room for, the other
// parts unchanged, and reports whether the result fits every status (so
// Decide allows it). A usd status counts output at price (the price the
// estimate was priced at, nil when no usd limit applies): the fit is
// priced as EstimateCost prices it, so the dollars it holds are the
// dollars it was fitted to. minOutput 0, or an estimate without an output
// part above minOutput, never fits less than est.
func FitOutput(statuses []Status, est Estimate, minOutput int64, price *Price) (Estimate, bool) {
	if minOutput <= 0 || est.Output <= minOutput {
		return est, false
	}
	out := est.Output
	for i := range statuses {
		s := &statuses[i]
		switch s.Limit.Metric {
		case MetricTokens, MetricOutput:
			other := s.Max - s.Used - s.Reserved - (est.Amount(s.Limit.Metric) - est.Output)
			out = min(out, other)
		case MetricUSD:
			if price == nil {
				return est, false // unpriced: refused whatever the output
			}
			out = min(out, fitUSD(price, est, s.Max-s.Used-s.Reserved, minOutput, out))
		}
	}
	if out < minOutput {
		return est, false
	}
	fit := est
	fit.Output = out
	if price != nil {
		fit.USD = price.EstimateCost(fit)
	}
	if !Decide(statuses, fit, time.Time{}).Allowed {
		return est, false // a limit the output cannot help (input, requests, leases)
	}
	return fit, true
}

// MaxOutput is the largest output, at most est.Output, that est with it
// would cost at most amount at price p, its other parts unchanged; -1
// when not even no output does (the input alone costs more).
func (p *Price) MaxOutput(est Estimate, amount int64) int64 {
	return fitUSD(p, est, amount, 0, est.Output)
}

// fitUSD is the largest output in [lo, hi] whose estimate costs at most
// room at price p, or lo-1 when not even lo does. The cost rounds up per
// estimate, so it is searched for rather than divided out: the answer is
// exact at any price.
func fitUSD(p *Price, est Estimate, room, lo, hi int64) int64 {
	cost := func(out int64) int64 {
		e := est
		e.Output = out
		return p.EstimateCost(e)
	}
	if cost(lo) > room {
		return lo - 1
	}
	for lo < hi { // invariant: cost(lo) <= room
		mid := lo + (hi-lo+1)/2
		if cost(mid) <= room {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}
