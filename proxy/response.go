package proxy

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// recorder is the ResponseWriter the wrapped handler writes to: it passes
// the response through as it comes (each SSE event as soon as it is
// complete when usage-only chunks are stripped) and reads its usage on the
// way. Upstream 401 and 403 answers are replaced: the client's gateway key
// is fine, the gateway's upstream credential is not.
type recorder struct {
	w          http.ResponseWriter
	f          Format
	a          wire.Adapter // the route's; nil answers no usage (a pass-through)
	reqID      string       // X-Tokenbudget-Request-Id, on every answer
	extra      http.Header  // set on a 2xx response
	stripUsage bool
	maxJSON    int64
	stream     bool // the client asked for a stream

	status     int
	replaced   bool // an upstream 401/403, swallowed
	retryAfter time.Duration
	sse        bool
	encoded    bool // a Content-Encoding we cannot read through
	parser     wire.Stream
	sw         *wire.StripWriter
	buf        []byte // a 2xx non-streamed body, for its usage
	over       bool   // buf outgrew maxJSON
	writeErr   error
	finished   bool
}

func (rc *recorder) Header() http.Header { return rc.w.Header() }

// Unwrap lets http.ResponseController reach the connection.
func (rc *recorder) Unwrap() http.ResponseWriter { return rc.w }

func (rc *recorder) WriteHeader(code int) {
	if rc.status != 0 {
		return
	}
	if code < 200 { // informational: pass it on, the real one follows
		rc.w.WriteHeader(code)
		return
	}
	rc.status = code
	h := rc.w.Header()
	// Set again here, not only at admission: the reverse proxy clears the
	// header map after a 1xx answer and copies the upstream's headers in.
	if rc.reqID != "" {
		h[requestIDHeader] = []string{rc.reqID}
	}
	switch code {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, 529:
		rc.retryAfter = retryAfter(h, time.Now())
	case http.StatusUnauthorized, http.StatusForbidden:
		rc.replaced = true
		return
	}
	if code/100 == 2 {
		for k, v := range rc.extra {
			h[k] = v
		}
		ct, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
		rc.sse = ct == "text/event-stream"
		ce := h.Get("Content-Encoding")
		rc.encoded = ce != "" && !strings.EqualFold(ce, "identity")
		if !rc.encoded && rc.a != nil {
			var streamed bool
			rc.parser, streamed = rc.a.Stream(ct, rc.stream)
			rc.sse = rc.sse || streamed // for the logs
			if p, ok := rc.parser.(*wire.SSE); ok && rc.stripUsage {
				h.Del("Content-Length")
				rc.sw = wire.NewStripWriter(rc.w, p)
			}
		}
	}
	rc.w.WriteHeader(code)
}

func (rc *recorder) Write(b []byte) (int, error) {
	if rc.status == 0 {
		rc.WriteHeader(http.StatusOK)
	}
	if rc.replaced {
		return len(b), nil
	}
	if rc.sw != nil {
		n, err := rc.sw.Write(b)
		if err != nil {
			rc.writeErr = err
		}
		return n, err
	}
	if rc.parser != nil {
		rc.parser.Write(b)
	} else if rc.status/100 == 2 && !rc.encoded && !rc.over {
		if int64(len(rc.buf)+len(b)) > rc.maxJSON {
			rc.over, rc.buf = true, nil
		} else {
			rc.buf = append(rc.buf, b...)
		}
	}
	n, err := rc.w.Write(b)
	if err != nil {
		rc.writeErr = err
	}
	return n, err
}

// Flush sends what has been written; an unfinished event held for
// stripping stays held until its end arrives.
func (rc *recorder) Flush() {
	if rc.replaced {
		return
	}
	if f, ok := rc.w.(http.Flusher); ok {
		f.Flush()
	}
}

// finish ends the response once the handler returned: it lets the held
// end of a stripped stream through, or answers a replaced upstream 401/403.
func (rc *recorder) finish(provider string, parked bool) {
	if rc.finished {
		return
	}
	rc.finished = true
	if rc.sw != nil && rc.writeErr == nil {
		if err := rc.sw.Close(); err != nil {
			rc.writeErr = err
		}
		return
	}
	if rc.replaced {
		h := rc.w.Header()
		for k := range h {
			if k != requestIDHeader {
				delete(h, k)
			}
		}
		h.Set("X-Should-Retry", "false")
		msg := "the upstream provider rejected the gateway's own credential (HTTP " + strconv.Itoa(rc.status) + "); ask the gateway's operator to fix it"
		if parked {
			msg += "; provider " + provider + " is parked (auth_missing) meanwhile"
		}
		writeError(rc.w, rc.f, simpleError(rc.f, http.StatusBadGateway, CodeUpstreamAuth, msg))
	}
}

// requestIDHeader carries the request id a response's usage is recorded
// under (canonical form, for direct map access).
const requestIDHeader = "X-Tokenbudget-Request-Id"

// usage is what the response reported: the tokens, whether any were found,
// and whether they are final (a stream cut short may carry only the start).
func (rc *recorder) usage() (t tokens, found, final bool, err error) {
	switch {
	case rc.parser != nil:
		t, found = rc.parser.Result()
		return t, found, rc.parser.Final(), rc.parser.Err()
	case rc.buf != nil && rc.a != nil:
		t, found, err = rc.a.Body(rc.buf)
		return t, found, found, err
	}
	return tokens{}, false, false, nil
}

// retryAfter reads an upstream's wait: retry-after-ms (milliseconds), else
// Retry-After in seconds or as an HTTP date. 0 when absent or unreadable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < 1e12 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 && s < 1e9 {
			return time.Duration(s * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// settle charges or frees what the request held once the handler returned
// (or panicked: ReverseProxy aborts that way when the client goes away).
func (m *Middleware) settle(r *http.Request, rc *recorder, info *Info, route Route, res *budget.Reservation, panicked bool) {
	parked := m.observe(route.Provider, rc, info.RequestID)
	if !panicked {
		rc.finish(route.Provider, parked)
	}
	gone := panicked || rc.writeErr != nil || r.Context().Err() != nil
	stalled := info.stalled.Load()
	est := info.Estimate
	// A commit takes the user from its reservation; a check-mode record
	// from here.
	u := budget.Usage{RequestID: info.RequestID, Key: info.Key, User: info.User, Tags: info.Tags, Provider: route.Provider, Model: info.Request.Model, At: info.At, ServiceTier: info.Request.ServiceTier}
	charge, outcome := true, OutcomeOK
	switch {
	case rc.status/100 == 2:
		tok, found, final, perr := rc.usage()
		// A count the tracker cannot store (over 2^53-1, alone or summed)
		// makes the whole report untrustworthy: the estimate stands in.
		invalid := errors.Is(perr, errCount)
		if invalid {
			found = false
		}
		// A client that left mid-stream stopped the generation when the
		// proxy hung up on the upstream: it is charged what streamed, not
		// the cap it never got. An upstream that cut its own stream short
		// (or stalled) may have generated more than it sent: the estimate
		// of the rest is charged.
		cancelled := gone && !stalled && rc.parser != nil && !(found && final) && !invalid
		switch {
		case found && final:
			tok.Fill(&u)
		case cancelled:
			streamed := ceilDiv(rc.parser.TextBytes(), BytesPerToken)
			if found { // what the upstream reported so far: the input is known
				tok.Output = max(tok.Output, streamed)
				tok.Fill(&u)
			} else {
				u.Input, u.Output = est.Input, streamed
			}
		case found: // a stream cut short: the input is known, the output is not
			tok.Output = max(tok.Output, est.Output)
			tok.Fill(&u)
		default:
			u.Input, u.Output = est.Input, est.Output
		}
		switch {
		case stalled:
			outcome = OutcomeUpstreamError
			m.log.Warn("proxy: the upstream stalled mid-response past the stream idle timeout; charged the usage known so far, the estimate for the rest",
				"request_id", info.RequestID, "key", info.Key, "provider", route.Provider, "model", info.Request.Model,
				"usage_found", found, "input", u.Input, "output", u.Output)
		case cancelled:
			outcome = OutcomeClientClosed
			m.log.Info("proxy: client left mid-stream; charged the usage reported so far, else the input estimate and the text streamed",
				"request_id", info.RequestID, "key", info.Key, "provider", route.Provider, "model", info.Request.Model,
				"usage_found", found, "input", u.Input, "output", u.Output)
		case gone && !(found && final) && !invalid:
			outcome = OutcomeClientClosed
			m.log.Info("proxy: response cut short; charged the usage known so far, the estimate for the rest",
				"request_id", info.RequestID, "key", info.Key, "provider", route.Provider, "model", info.Request.Model,
				"usage_found", found, "input", u.Input, "output", u.Output)
		case !found:
			m.cfg.Metrics.noUsage(route.Provider)
			args := []any{"request_id", info.RequestID, "key", info.Key, "provider", route.Provider, "model", info.Request.Model,
				"status", rc.status, "stream", rc.sse, "estimate_input", est.Input, "estimate_output", est.Output}
			if perr != nil {
				args = append(args, "parse_error", perr.Error())
			}
			if rc.over {
				args = append(args, "reason", "response larger than the parse cap")
			} else if rc.encoded {
				args = append(args, "reason", "compressed response")
			} else if invalid {
				args = append(args, "reason", "invalid usage")
			}
			m.log.Warn("proxy: response without usage; recorded at the estimate", args...)
		}
	case rc.status == 0 && gone:
		// The client left before any answer: the upstream had the prompt.
		u.Input, u.Output = est.Input, est.Output
		outcome = OutcomeClientClosed
	default:
		charge, outcome = false, OutcomeUpstreamError
	}
	m.outcome(rc.w, outcome)
	// Not cancelled with the request: the client leaving (or having its
	// answer) must not cut the settlement short.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), settleTimeout)
	defer cancel()
	var err error
	switch {
	case res != nil && charge:
		var s budget.Settlement
		s, err = m.t.Commit(ctx, res.ID, u)
		if err == nil {
			// A commit writes its event on the tracker's transaction, which
			// the tracker's written count does not see (it counts what the
			// recorder writes).
			if s.Charged {
				if s.LateRequestID != "" {
					m.cfg.Metrics.committed()
				}
				m.log.Warn("proxy: the reservation had expired and was charged its estimate; recorded the excess only",
					"request_id", info.RequestID, "late_request_id", s.LateRequestID)
			} else if u.Billable() > 0 {
				m.cfg.Metrics.committed()
			}
		}
	case res != nil:
		err = m.t.Release(ctx, res.ID)
	case charge:
		err = m.t.Record(ctx, u)
	}
	if charge {
		if x, ok := rc.w.(*exchange); ok {
			x.charged = &u
		}
	}
	if err != nil {
		m.cfg.Metrics.settleError()
		msg := "proxy: settling a request's usage failed"
		if res != nil && !errors.Is(err, budget.ErrInvalid) && !errors.Is(err, budget.ErrNotFound) && !errors.Is(err, budget.ErrSettled) {
			// A queued commit or release is never given up: the tracker
			// writes it once the database takes writes again.
			msg = "proxy: settling a request's usage is not written yet; the tracker keeps retrying it"
		}
		m.log.Error(msg, "request_id", info.RequestID, "key", info.Key,
			"charge", charge, "input", u.Input, "output", u.Output, "reasoning", u.Reasoning, "err", err)
		return
	}
	if charge {
		m.cfg.Metrics.recorded(route.Provider, &u)
	}
}

// ceilDiv is ceil(a / b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// observe parks the provider after an upstream 429, 529, repeated 503, 401
// or 403, and unparks one this middleware parked once it answers 2xx
// again. It reports whether it parked.
func (m *Middleware) observe(provider string, rc *recorder, reqID string) bool {
	if m.cfg.DisableParking || rc.status == 0 || provider == "" {
		return false
	}
	ps := m.provider(provider)
	var kind budget.ParkKind
	switch rc.status {
	case http.StatusTooManyRequests:
		kind = budget.RateLimited
	case 529:
		kind = budget.Overloaded
	case http.StatusServiceUnavailable:
		if int(ps.unavailable.Add(1)) < m.cfg.OverloadedAfter {
			return false
		}
		kind = budget.Overloaded
	case http.StatusUnauthorized, http.StatusForbidden:
		kind = budget.AuthMissing
	default:
		ps.unavailable.Store(0)
		if rc.status/100 == 2 && ps.parked.Load() && ps.parked.CompareAndSwap(true, false) {
			if _, err := m.t.Unpark(context.Background(), provider); err != nil {
				m.log.Error("proxy: unparking a provider that answers again failed", "provider", provider, "err", err)
			} else {
				m.log.Info("proxy: provider answers again; unparked", "provider", provider)
			}
		}
		return false
	}
	ps.unavailable.Store(0)
	p, err := m.t.Park(context.Background(), provider, kind, rc.retryAfter, []string{reqID})
	if err != nil {
		m.log.Error("proxy: parking a provider failed", "provider", provider, "kind", kind, "err", err)
		return false
	}
	ps.parked.Store(true)
	m.cfg.Metrics.parkedProvider(provider, kind)
	m.log.Warn("proxy: upstream refused; provider parked", "provider", provider, "kind", kind, "status", rc.status,
		"resume_at", p.ResumeAt.UTC().Format(time.RFC3339), "request_id", reqID)
	return true
}

func (m *Middleware) provider(name string) *providerState {
	if ps, ok := m.state.Load(name); ok {
		return ps.(*providerState)
	}
	ps, _ := m.state.LoadOrStore(name, &providerState{})
	return ps.(*providerState)
}
