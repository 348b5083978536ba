package proxy

import (
	"context"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// recorder is the ResponseWriter the wrapped handler writes to: it passes
// a stream through as it comes (each SSE event as soon as it is complete
// when usage-only chunks are stripped) and reads its usage on the way; it
// holds a 2xx non-streamed body (up to maxJSON), so that the settlement is
// known and its cost headers set before the first byte goes out (finish
// writes it). Upstream 401 and 403 answers are replaced: the client's
// gateway key is fine, the gateway's upstream credential is not.
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
	held       bool // a 2xx non-streamed body held in buf until finish
	trailers   bool // the cost goes out in trailers (a 2xx stream)
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
	if code/100 != 2 {
		if rc.a != nil {
			setCost(h, nil) // an upstream error is charged nothing
		}
		rc.w.WriteHeader(code)
		return
	}
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
		if rc.parser == nil {
			n, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64)
			if err != nil || n <= rc.maxJSON {
				rc.held = true
				if err == nil && n > 0 {
					rc.buf = make([]byte, 0, n)
				}
				return // finish writes it, with the cost
			}
			rc.over = true // declared too large to hold: it passes through
		}
		if rc.parser != nil {
			// A stream's headers are gone before its usage is known: the
			// cost follows the body, in trailers, which need chunked
			// framing.
			rc.trailers = true
			h.Del("Content-Length")
			h.Add("Trailer", costHeader)
			h.Add("Trailer", chargedTokensHeader)
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
	if rc.held {
		if int64(len(rc.buf)+len(b)) <= rc.maxJSON {
			rc.buf = append(rc.buf, b...)
			return len(b), nil
		}
		// Too large to hold: it goes out as it comes from here, without
		// the cost, and is charged at the estimate.
		rc.held, rc.over = false, true
		rc.w.WriteHeader(rc.status)
		held := rc.buf
		rc.buf = nil
		if _, err := rc.w.Write(held); err != nil {
			rc.writeErr = err
			return 0, err
		}
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
	}
	n, err := rc.w.Write(b)
	if err != nil {
		rc.writeErr = err
	}
	return n, err
}

// Flush sends what has been written; an unfinished event held for
// stripping stays held until its end arrives, a held body until finish.
func (rc *recorder) Flush() {
	if rc.replaced || rc.held {
		return
	}
	if f, ok := rc.w.(http.Flusher); ok {
		f.Flush()
	}
}

// endStream lets the held end of a stripped stream through once the
// handler returned, before its usage is read.
func (rc *recorder) endStream() {
	if rc.sw != nil && rc.writeErr == nil && !rc.finished {
		if err := rc.sw.Close(); err != nil {
			rc.writeErr = err
		}
	}
}

// finish ends the response once the handler returned and its settlement
// s is known (nil: none, a pass-through): it writes a held body with s's
// cost headers, or a stream's cost trailers, or answers a replaced
// upstream 401/403.
func (rc *recorder) finish(provider string, parked bool, s *settlement) {
	if rc.finished {
		return
	}
	rc.endStream()
	rc.finished = true
	h := rc.w.Header()
	switch {
	case rc.held:
		setCost(h, s)
		if h.Get("Content-Length") == "" && rc.status != http.StatusNoContent {
			h.Set("Content-Length", strconv.Itoa(len(rc.buf)))
		}
		rc.w.WriteHeader(rc.status)
		if _, err := rc.w.Write(rc.buf); err != nil {
			rc.writeErr = err
		}
	case rc.trailers:
		setCost(h, s)
	case rc.replaced:
		for k := range h {
			if k != requestIDHeader {
				delete(h, k)
			}
		}
		h.Set("X-Should-Retry", "false")
		if rc.a != nil {
			setCost(h, nil)
		}
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
