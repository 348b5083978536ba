package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Error codes the proxy puts in its error bodies.
const (
	CodeBudgetExceeded = "token_budget_exceeded"
	CodeProviderParked = "provider_parked"
	CodeInvalidKey     = "invalid_api_key"
	CodeTooLarge       = "request_too_large"
	CodeBadRequest     = "invalid_request"
	CodeNotFound       = "not_found"
	CodeUnavailable    = "budget_unavailable"
	CodeUpstream       = "upstream_error"
	CodeUpstreamAuth   = "upstream_auth_failed"
	CodeBusy           = "gateway_busy"     // request bytes in flight over the bound (503)
	CodeTimeout        = "request_timeout"  // the request body came too slowly (408)
	CodeUpstreamTime   = "upstream_timeout" // no upstream response headers in time (504)
	CodeNoBudget       = "no_budget"        // no limit applies and the gateway requires one (403)
	CodeUnpriced       = "unpriced_model"   // a dollar limit applies and the model has no price (429)
)

// Headers naming the limit that bound a request (see setMatchedHeaders).
const (
	limitHeader      = "X-Tokenbudget-Limit"
	limitScopeHeader = "X-Tokenbudget-Limit-Scope"
)

// apiError is one error answer in a provider's shape.
type apiError struct {
	status  int
	typ     string // OpenAI/Anthropic error type: rate_limit_error, ...
	code    string
	message string
	limit   *limitDetail
}

// limitDetail is the machine-readable breach inside a budget refusal.
type limitDetail struct {
	ID                string  `json:"id"`
	Key               string  `json:"key"`
	Scope             string  `json:"scope"`
	ScopeValue        string  `json:"scope_value"`
	Metric            string  `json:"metric"`
	Window            *string `json:"window"`
	Limit             int64   `json:"limit"`
	Used              int64   `json:"used"`
	Reserved          int64   `json:"reserved"`
	Estimate          int64   `json:"estimate"`
	ResetAt           *string `json:"reset_at"`
	RetryAfterSeconds int64   `json:"retry_after_seconds"`
	Retryable         bool    `json:"retryable"`
}

// writeError writes e in the shape of format f: Anthropic's
// {"type":"error","error":{"type","message"}} on Anthropic routes, OpenAI's
// {"error":{"message","type","param","code"}} elsewhere. Both carry the
// code, and a budget refusal its limit.
func writeError(w http.ResponseWriter, f Format, e apiError) {
	var body any
	if f == AnthropicMessages {
		body = struct {
			Type  string `json:"type"`
			Error any    `json:"error"`
		}{"error", struct {
			Type    string       `json:"type"`
			Message string       `json:"message"`
			Code    string       `json:"code,omitempty"`
			Limit   *limitDetail `json:"limit,omitempty"`
		}{e.typ, e.message, e.code, e.limit}}
	} else {
		body = struct {
			Error any `json:"error"`
		}{struct {
			Message string       `json:"message"`
			Type    string       `json:"type"`
			Param   *string      `json:"param"`
			Code    string       `json:"code"`
			Limit   *limitDetail `json:"limit,omitempty"`
		}{e.message, e.typ, nil, e.code, e.limit}}
	}
	b, _ := json.Marshal(body)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Del("Content-Encoding")
	w.WriteHeader(e.status)
	w.Write(append(b, '\n'))
}

// typeFor maps a status to the error type of format f.
func typeFor(f Format, status int) string {
	switch status {
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusUnauthorized:
		if f == AnthropicMessages {
			return "authentication_error"
		}
		return "invalid_request_error"
	case http.StatusNotFound:
		if f == AnthropicMessages {
			return "not_found_error"
		}
		return "invalid_request_error"
	case http.StatusRequestEntityTooLarge:
		if f == AnthropicMessages {
			return "request_too_large"
		}
		return "invalid_request_error"
	case http.StatusForbidden:
		if f == AnthropicMessages {
			return "permission_error"
		}
		return "invalid_request_error"
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusRequestTimeout:
		return "invalid_request_error"
	case http.StatusGatewayTimeout:
		if f == AnthropicMessages {
			return "timeout_error"
		}
		return "server_error"
	case http.StatusServiceUnavailable:
		if f == AnthropicMessages {
			return "overloaded_error"
		}
		return "server_error"
	}
	if f == AnthropicMessages {
		return "api_error"
	}
	return "server_error"
}

// simpleError is an apiError with the status's type.
func simpleError(f Format, status int, code, msg string) apiError {
	return apiError{status: status, typ: typeFor(f, status), code: code, message: msg}
}

// tooLongToWait reports whether a refusal's wait of retry seconds is
// longer than a client should be asked to wait (Config.MaxClientWait;
// negative: any wait is).
func tooLongToWait(retry int64, maxWait time.Duration) bool {
	return maxWait < 0 || time.Duration(retry)*time.Second > maxWait
}

// exceededError builds the 429 of a budget refusal and sets its headers:
// x-should-retry: false when the request can never fit or its wait is
// longer than maxWait, so that an SDK hands the 429 to its caller at once.
func exceededError(h http.Header, f Format, d *budget.Decision, est budget.Estimate, now time.Time, maxWait time.Duration) apiError {
	b := d.Breach
	setRateLimitHeaders(h, d.Limits, budget.Estimate{}, now, false)
	if b == nil { // cannot happen: a refusal without a breach or a park
		return simpleError(f, http.StatusTooManyRequests, CodeBudgetExceeded, "token budget exceeded")
	}
	l := &b.Limit
	e := est.Amount(l.Metric)
	h.Set("Retry-After", strconv.FormatInt(b.RetryAfterSeconds, 10))
	setLimitHeaders(h, l.Metric, l.Max, l.Max-b.Used-b.Reserved, time.Duration(b.RetryAfterSeconds)*time.Second)
	h.Set(limitHeader, l.ID)
	h.Set(limitScopeHeader, l.ScopeString())
	if !b.Retryable || tooLongToWait(b.RetryAfterSeconds, maxWait) {
		h.Set("X-Should-Retry", "false")
	}
	win := "-"
	det := &limitDetail{ID: l.ID, Key: l.Key, Scope: string(l.Scope), ScopeValue: l.ScopeValue, Metric: string(l.Metric),
		Limit: l.Max, Used: b.Used, Reserved: b.Reserved, Estimate: e, RetryAfterSeconds: b.RetryAfterSeconds, Retryable: b.Retryable}
	if l.Window.Kind != budget.NoWindow {
		win = l.Window.String()
		det.Window = &win
		r := b.ResetAt.UTC().Format(time.RFC3339)
		det.ResetAt = &r
	}
	// A dollar limit speaks dollars (its JSON fields stay micro-dollars).
	amount, what := func(v int64) string { return strconv.FormatInt(v, 10) }, "token"
	if l.Metric == budget.MetricUSD {
		amount, what = func(v int64) string { return "$" + budget.FormatUSD(v) }, "dollar"
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "%s budget exceeded: limit %s (key %s, scope %s, %s per %s) used %s", what, l.ID, l.Key, l.ScopeString(), l.Metric, win, amount(b.Used))
	if b.Reserved > 0 {
		fmt.Fprintf(&msg, " + reserved %s", amount(b.Reserved))
	}
	fmt.Fprintf(&msg, " of limit %s; this request needs about %s", amount(l.Max), amount(e))
	switch {
	case !b.Retryable:
		fmt.Fprintf(&msg, ", more than the limit itself: lower max_tokens or shorten the prompt")
	case l.Window.Kind == budget.NoWindow:
		fmt.Fprintf(&msg, "; retry in %ds", b.RetryAfterSeconds)
	default:
		fmt.Fprintf(&msg, "; the window resets at %s (in %s)", b.ResetAt.UTC().Format(time.RFC3339), time.Duration(b.RetryAfterSeconds)*time.Second)
	}
	return apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: CodeBudgetExceeded, message: msg.String(), limit: det}
}

// parkedError builds the answer to a request for a parked provider: 429,
// or 503 when it is overloaded; x-should-retry: false when the wait is
// longer than maxWait.
func parkedError(h http.Header, f Format, p budget.ProviderState, retry int64, maxWait time.Duration) apiError {
	status := http.StatusTooManyRequests
	if p.Kind == budget.Overloaded {
		status = http.StatusServiceUnavailable
	}
	h.Set("Retry-After", strconv.FormatInt(retry, 10))
	if tooLongToWait(retry, maxWait) {
		h.Set("X-Should-Retry", "false")
	}
	msg := fmt.Sprintf("provider %s is parked (%s) until %s: the gateway is not sending it requests; retry in %ds",
		p.Provider, p.Kind, p.ResumeAt.UTC().Format(time.RFC3339), retry)
	return apiError{status: status, typ: typeFor(f, status), code: CodeProviderParked, message: msg}
}

// setLimitHeaders sets OpenAI's x-ratelimit-{limit,remaining,reset}-{tokens,
// requests} for one limit of metric m (concurrent limits have none).
func setLimitHeaders(h http.Header, m budget.Metric, limit, remaining int64, reset time.Duration) {
	var kind string
	switch m {
	case budget.MetricTokens, budget.MetricInput, budget.MetricOutput:
		kind = "tokens"
	case budget.MetricRequests:
		kind = "requests"
	default:
		return
	}
	h.Set("X-Ratelimit-Limit-"+kind, strconv.FormatInt(limit, 10))
	h.Set("X-Ratelimit-Remaining-"+kind, strconv.FormatInt(max(0, remaining), 10))
	h.Set("X-Ratelimit-Reset-"+kind, max(0, reset).String())
}

// setRateLimitHeaders sets the headers of the applicable limits: the IETF
// RateLimit-Policy and RateLimit fields for every one, and, when success is
// true, OpenAI's x-ratelimit-*-tokens (and -requests) for the token (and
// requests) limit with the least room left. Remaining is limit - used -
// reserved - sub, clamped at 0: sub is the request's estimate when the
// statuses do not hold it yet (check mode), else zero.
func setRateLimitHeaders(h http.Header, limits []budget.Status, sub budget.Estimate, now time.Time, success bool) {
	if len(limits) == 0 {
		return
	}
	var policy, state strings.Builder
	var tok, req *budget.Status
	var tokRem, reqRem int64
	for i := range limits {
		s := &limits[i]
		rem := s.Limit.Max - s.Used - s.Reserved
		if sub != (budget.Estimate{}) {
			rem -= sub.Amount(s.Limit.Metric)
		}
		rem = max(0, rem)
		var reset time.Duration
		w := int64(0)
		if s.Limit.Window.Kind != budget.NoWindow {
			reset = s.ResetAt.Sub(now)
			w = int64(s.ResetAt.Sub(s.WindowStart) / time.Second)
		}
		unit := "tokens"
		switch s.Limit.Metric {
		case budget.MetricRequests:
			unit = "requests"
			if req == nil || rem < reqRem {
				req, reqRem = s, rem
			}
		case budget.MetricConcurrent:
			unit = "concurrent-requests"
		default:
			if tok == nil || rem < tokRem {
				tok, tokRem = s, rem
			}
		}
		if policy.Len() > 0 {
			policy.WriteString(", ")
			state.WriteString(", ")
		}
		fmt.Fprintf(&policy, "%q;q=%d;qu=%q", s.Limit.ID, s.Limit.Max, unit)
		if w > 0 {
			fmt.Fprintf(&policy, ";w=%d", w)
		}
		fmt.Fprintf(&state, "%q;r=%d", s.Limit.ID, rem)
		if reset > 0 {
			fmt.Fprintf(&state, ";t=%d", ceilSeconds(reset))
		}
	}
	h.Set("RateLimit-Policy", policy.String())
	h.Set("RateLimit", state.String())
	if !success {
		return
	}
	if tok != nil {
		setLimitHeaders(h, tok.Limit.Metric, tok.Limit.Max, tokRem, resetOf(tok, now))
	}
	if req != nil {
		setLimitHeaders(h, req.Limit.Metric, req.Limit.Max, reqRem, resetOf(req, now))
	}
}

// setMatchedHeaders names the applicable limit with the least room left,
// as a fraction of the limit, after sub (the estimate, when the statuses do
// not hold it yet): X-Tokenbudget-Limit is its id, X-Tokenbudget-Limit-Scope
// its scope and value as the limit states them ("global",
// "provider=openai", "model=gpt-4o*"), so a client sees which limit, a
// default or a pattern included, its request counted against. Ties go to
// the smaller limit, then to the first in listing order. Nothing is set
// when no limit applies.
func setMatchedHeaders(h http.Header, limits []budget.Status, sub budget.Estimate) {
	var best *budget.Status
	var bestFrac float64
	for i := range limits {
		s := &limits[i]
		rem := s.Limit.Max - s.Used - s.Reserved - sub.Amount(s.Limit.Metric)
		if sub == (budget.Estimate{}) {
			rem = s.Limit.Max - s.Used - s.Reserved
		}
		frac := float64(max(0, rem)) / float64(s.Limit.Max)
		if best == nil || frac < bestFrac || frac == bestFrac && s.Limit.Max < best.Limit.Max {
			best, bestFrac = s, frac
		}
	}
	if best != nil {
		h.Set(limitHeader, best.Limit.ID)
		h.Set(limitScopeHeader, best.Limit.ScopeString())
	}
}

func resetOf(s *budget.Status, now time.Time) time.Duration {
	return time.Duration(ceilSeconds(s.ResetAt.Sub(now))) * time.Second
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// unpricedError refuses a request for a model with no price while a
// dollar limit applies: 429 that no retry helps until a price is set.
func unpricedError(h http.Header, f Format, provider, model string) apiError {
	h.Set("x-should-retry", "false")
	return simpleError(f, http.StatusTooManyRequests, CodeUnpriced,
		fmt.Sprintf("model %q of provider %q has no price and a dollar budget applies: set one with 'budget price set'", clipName(model), provider))
}

// clipName shortens a client-chosen name for a message.
func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
