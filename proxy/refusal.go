package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
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
	CodeUnpriced       = "unpriced_model"   // a dollar limit applies and the model has no price (403)
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
	param   string // the request field at fault, for OpenAI's param ("": null)
	limit   *limitDetail
}

// limitDetail is the machine-readable breach inside a budget refusal.
// Limit is the limit in force (raises included); Window is null for a
// concurrent limit, ResetAt for one that never resets too (a concurrent
// or a once limit).
type limitDetail struct {
	ID  string `json:"id"`
	Key string `json:"key"`
	// Level is whose limit refused (key, team, org or default), Owner the
	// key, team or org it belongs to (null for a default limit).
	Level             string  `json:"level"`
	Owner             *string `json:"owner"`
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

// writeError writes e in the error shape of format f's API (its adapter's
// ErrorBody): OpenAI's {"error":{"message","type","param","code"}},
// Anthropic's {"type":"error","error":{"type","message"}}, Google's, or
// Bedrock's. Each carries the code, and a budget refusal its limit.
func writeError(w http.ResponseWriter, f Format, e apiError) {
	we := wire.Error{Status: e.status, Type: e.typ, Code: e.code, Message: e.message, Param: e.param}
	if e.limit != nil {
		we.Limit = e.limit
	}
	wire.WriteError(w, adapterOf(f), &we)
}

// typeFor maps a status to the error type of format f.
func typeFor(f Format, status int) string { return adapterOf(f).ErrorType(status) }

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
// The message and the limit object name the level whose limit refused. A
// limit that never resets (window once) has no reset to announce: no
// reset_at, no x-ratelimit-reset-*, and no Retry-After unless another
// breached limit has a wait.
//
// A request that waiting lets through is told of the limit it waits for
// (Decision.Until), not the contract's most restrictive breach: Retry-After
// is that limit's reset, so the message, reset_at and x-ratelimit-* must
// be that limit's too, or a client told "resets in an hour" is asked to
// wait a month. One that no wait helps keeps the ranking's breach.
func exceededError(h http.Header, f Format, d *budget.Decision, est budget.Estimate, now time.Time, maxWait time.Duration) apiError {
	b := d.Breach
	if b != nil && b.Retryable && d.Until != nil {
		b = d.Until
	}
	setRateLimitHeaders(h, d.Limits, budget.Estimate{}, now, false)
	if b == nil { // cannot happen: a refusal without a breach or a park
		return simpleError(f, http.StatusTooManyRequests, CodeBudgetExceeded, "token budget exceeded")
	}
	l := &b.Limit
	e := est.Amount(l.Metric)
	// never: a prepaid balance (window once), which no wait refills.
	never := l.Window.Kind != budget.NoWindow && !l.Window.Resets()
	if b.RetryAfterSeconds() > 0 || b.Retryable {
		h.Set("Retry-After", strconv.FormatInt(b.RetryAfterSeconds(), 10))
	}
	reset := b.RetryAfter
	if never {
		reset = -1
	}
	setLimitHeaders(h, l.Metric, b.Max, b.Max-b.Used-b.Reserved, reset)
	h.Set(limitHeader, l.ID)
	h.Set(limitScopeHeader, l.ScopeString())
	if !b.Retryable || tooLongToWait(b.RetryAfterSeconds(), maxWait) {
		h.Set("X-Should-Retry", "false")
	}
	win := "-"
	det := &limitDetail{ID: l.ID, Key: l.Key, Level: string(l.Level()), Scope: string(l.Scope), ScopeValue: l.ScopeValue, Metric: string(l.Metric),
		Limit: b.Max, Used: b.Used, Reserved: b.Reserved, Estimate: e, RetryAfterSeconds: b.RetryAfterSeconds(), Retryable: b.Retryable}
	if o := l.Owner(); o != "" {
		det.Owner = &o
	}
	if l.Window.Kind != budget.NoWindow {
		win = l.Window.String()
		det.Window = &win
	}
	if l.Window.Resets() {
		r := b.ResetAt.UTC().Format(time.RFC3339)
		det.ResetAt = &r
	}
	// A dollar limit's JSON fields stay micro-dollars; its message speaks
	// dollars, and a requests or concurrent one of requests: "token
	// budget" would send a client looking at its prompt.
	amount, what := func(v int64) string { return strconv.FormatInt(v, 10) }, "token budget"
	switch l.Metric {
	case budget.MetricUSD:
		amount, what = func(v int64) string { return "$" + budget.FormatUSD(v) }, "dollar budget"
	case budget.MetricRequests:
		what = "request limit"
	case budget.MetricConcurrent:
		what = "concurrent request limit"
	}
	per := string(l.Metric) + " per " + win
	if never {
		per = string(l.Metric) + ", never resets"
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "%s exceeded: %s (scope %s, %s) used %s", what, whose(l), l.ScopeString(), per, amount(b.Used))
	if b.Reserved > 0 {
		fmt.Fprintf(&msg, " + reserved %s", amount(b.Reserved))
	}
	fmt.Fprintf(&msg, " of limit %s; this request needs about %s", amount(b.Max), amount(e))
	switch {
	case e > b.Max:
		msg.WriteString(", more than the limit itself: " + fitHint(b.Max, l.Metric, est, d.Price))
	case never:
		msg.WriteString("; this limit never resets (a prepaid balance): ask the gateway's operator to raise it")
	case !b.Retryable:
		msg.WriteString("; " + cannotWait(d.Limits, est, d.Price))
	case l.Window.Kind == budget.NoWindow:
		fmt.Fprintf(&msg, "; retry in %ds", b.RetryAfterSeconds())
	default:
		fmt.Fprintf(&msg, "; the window resets at %s (in %s)", b.ResetAt.UTC().Format(time.RFC3339), b.RetryAfter)
	}
	return apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: CodeBudgetExceeded, message: msg.String(), limit: det}
}

// whose names a limit with its level, as a refusal says it: "key k limit
// lim_1", "team eng limit lim_1", "org acme limit lim_1", or "default
// limit lim_1 for key k"; a per-user limit (scope user=*) adds "of end
// user u", whose counter it is.
func whose(l *budget.Limit) string {
	var d string
	if l.IsDefault() {
		d = "default limit " + l.ID + strings.TrimPrefix(l.Describe(), "default")
	} else {
		d = l.Describe() + " limit " + l.ID
	}
	if l.EachUser() {
		if user := l.SubjectUser(); user != "" {
			d += " of end user " + user
		}
	}
	if tag := l.SubjectTag(); tag != "" {
		d += " of tag " + tag
	}
	return d
}

// cannotWait says why no wait helps a refusal whose most restrictive
// breach could be waited out: another limit it breaches is smaller than
// the estimate, or never resets.
func cannotWait(limits []budget.Status, est budget.Estimate, price *budget.Price) string {
	for i := range limits {
		s := &limits[i]
		if est.Amount(s.Limit.Metric) > s.Max {
			return "it needs more than " + whose(&s.Limit) + " itself: " + fitHint(s.Max, s.Limit.Metric, est, price)
		}
	}
	for i := range limits {
		s := &limits[i]
		e := est.Amount(s.Limit.Metric)
		breached := e > 0 && s.Used+s.Reserved+e > s.Max || e == 0 && s.Used+s.Reserved >= s.Max
		if breached && !s.Limit.Window.Resets() && s.Limit.Metric != budget.MetricConcurrent {
			return whose(&s.Limit) + " is spent too and never resets (a prepaid balance): ask the gateway's operator to raise it"
		}
	}
	return "waiting does not help: another limit refuses it too"
}

// fitHint says what would make est fit a limit of metric m and size max
// that the estimate alone exceeds: the output that fits it with this
// prompt (dollars at price, the price the estimate was priced at), or,
// when the prompt alone is over it or output does not count, a shorter
// prompt.
func fitHint(max int64, m budget.Metric, est budget.Estimate, price *budget.Price) string {
	var out int64
	switch m {
	case budget.MetricTokens, budget.MetricOutput:
		out = max - (est.Amount(m) - est.Output)
	case budget.MetricUSD:
		if price == nil { // cannot happen: an unpriced request is refused as such
			return "lower max_tokens or shorten the prompt"
		}
		out = price.MaxOutput(est, max)
	case budget.MetricInput:
		return "shorten the prompt"
	default: // a requests or concurrent limit of 0 admits nothing
		return "ask the gateway's operator to raise it"
	}
	if est.Output == 0 {
		return "shorten the prompt"
	}
	if out < 1 {
		return "shorten the prompt: it alone is more than the limit"
	}
	return fmt.Sprintf("lower max_tokens (at most %d output tokens fit it with this prompt) or shorten the prompt", out)
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
// requests} for one limit of metric m (concurrent limits have none); a
// negative reset (a limit that never resets) sets no reset header.
func setLimitHeaders(h http.Header, m budget.Metric, limit, remaining int64, reset time.Duration) {
	var names *[3]string
	switch m {
	case budget.MetricTokens, budget.MetricInput, budget.MetricOutput:
		names = &tokenLimitHeaders
	case budget.MetricRequests:
		names = &requestLimitHeaders
	default:
		return
	}
	// Canonical keys set directly: Header.Set's canonicalising showed in
	// the profile of every admitted request.
	h[names[0]] = []string{strconv.FormatInt(limit, 10)}
	h[names[1]] = []string{strconv.FormatInt(max(0, remaining), 10)}
	if reset >= 0 {
		h[names[2]] = []string{reset.String()}
	}
}

// The x-ratelimit-* fields, canonical: limit, remaining, reset.
var (
	tokenLimitHeaders   = [3]string{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"}
	requestLimitHeaders = [3]string{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"}
)

// setRateLimitHeaders sets the headers of the applicable limits: the IETF
// RateLimit-Policy and RateLimit fields for every one but dollar limits,
// and, when success is
// true, OpenAI's x-ratelimit-*-tokens (and -requests) for the token (and
// requests) limit with the least room left. Remaining is limit - used -
// reserved - sub, clamped at 0, of the limit in force (Status.Max): sub is
// the request's estimate when the statuses do not hold it yet (check
// mode), else zero. A limit that never resets has no window length (w) nor
// reset (t).
func setRateLimitHeaders(h http.Header, limits []budget.Status, sub budget.Estimate, now time.Time, success bool) {
	if len(limits) == 0 {
		return
	}
	// Appended, not printed: fmt's %q and %d were most of this function.
	var policy, state []byte
	var tok, req *budget.Status
	var tokRem, reqRem int64
	for i := range limits {
		s := &limits[i]
		rem := s.Max - s.Used - s.Reserved
		if sub != (budget.Estimate{}) {
			rem -= sub.Amount(s.Limit.Metric)
		}
		rem = max(0, rem)
		var reset time.Duration
		w := int64(0)
		if s.Limit.Window.Resets() {
			reset = s.ResetAt.Sub(now)
			w = int64(s.ResetAt.Sub(s.WindowStart) / time.Second)
		}
		unit := "tokens"
		switch s.Limit.Metric {
		case budget.MetricUSD:
			// Micro-dollars are no token quota (the fields have no dollar
			// unit): the dollar limit is named in the refusal body instead.
			continue
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
		if len(policy) > 0 {
			policy = append(policy, ", "...)
			state = append(state, ", "...)
		}
		policy = strconv.AppendQuote(policy, s.Limit.ID)
		policy = append(policy, ";q="...)
		policy = strconv.AppendInt(policy, s.Max, 10)
		policy = append(policy, ";qu="...)
		policy = strconv.AppendQuote(policy, unit)
		if w > 0 {
			policy = append(policy, ";w="...)
			policy = strconv.AppendInt(policy, w, 10)
		}
		state = strconv.AppendQuote(state, s.Limit.ID)
		state = append(state, ";r="...)
		state = strconv.AppendInt(state, rem, 10)
		if reset > 0 {
			state = append(state, ";t="...)
			state = strconv.AppendInt(state, ceilSeconds(reset), 10)
		}
	}
	if len(policy) > 0 {
		h["Ratelimit-Policy"] = []string{string(policy)}
		h["Ratelimit"] = []string{string(state)}
	}
	if !success {
		return
	}
	if tok != nil {
		setLimitHeaders(h, tok.Limit.Metric, tok.Max, tokRem, resetOf(tok, now))
	}
	if req != nil {
		setLimitHeaders(h, req.Limit.Metric, req.Max, reqRem, resetOf(req, now))
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
		rem := s.Max - s.Used - s.Reserved - sub.Amount(s.Limit.Metric)
		if sub == (budget.Estimate{}) {
			rem = s.Max - s.Used - s.Reserved
		}
		frac := float64(max(0, rem)) / float64(s.Max)
		if best == nil || frac < bestFrac || frac == bestFrac && s.Max < best.Max {
			best, bestFrac = s, frac
		}
	}
	if best != nil {
		h.Set(limitHeader, best.Limit.ID)
		h.Set(limitScopeHeader, best.Limit.ScopeString())
	}
}

// resetOf is when s's window resets, rounded up to whole seconds; -1 for
// a window that never does.
func resetOf(s *budget.Status, now time.Time) time.Duration {
	if !s.Limit.Window.Resets() {
		return -1
	}
	return time.Duration(ceilSeconds(s.ResetAt.Sub(now))) * time.Second
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// unpricedError refuses a request for a model with no price while a
// dollar limit applies. It is the gateway's configuration that is missing,
// not room: 403 in the API's permission-error shape (the SDKs raise
// PermissionDeniedError and never retry it), x-should-retry: false, and no
// Retry-After, as no wait helps until a price is set.
func unpricedError(h http.Header, f Format, provider, model string) apiError {
	h.Set("X-Should-Retry", "false")
	return simpleError(f, http.StatusForbidden, CodeUnpriced,
		fmt.Sprintf("model %q of provider %q has no price and a dollar budget applies, so its cost cannot be counted: "+
			"ask the gateway's operator to set one ('budget price set') or use a priced model", clipName(model), provider))
}

// clipName shortens a client-chosen name for a message.
func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
