package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// exchange is the ResponseWriter the middleware answers a request
// through: it passes everything on and keeps what the access log line
// says about the request. Only the request's own goroutine touches it.
type exchange struct {
	http.ResponseWriter
	start time.Time
	end   time.Time // when the handler was over: the response's latency

	status    int // the status the client got (0: none, the client left first)
	outcome   string
	key       string // the gateway key's name, once authenticated
	provider  string
	model     string // the request's, once validated
	user      string // the request's end user, once validated
	requestID string
	est       *budget.Estimate // what was admitted (Info.Estimate)
	settled   *settlement      // what a forwarded request was charged
	write     func()           // its store write, once the response is sent
	info      *Info            // once the request reached admission (Observer)

	// A budget refusal's limit id, its level and the error code.
	refusedLimit, refusedLevel, refusedCode string
}

func (x *exchange) WriteHeader(code int) {
	if x.status == 0 && code >= 200 {
		x.status = code
	}
	x.ResponseWriter.WriteHeader(code)
}

func (x *exchange) Write(b []byte) (int, error) {
	if x.status == 0 {
		x.status = http.StatusOK
	}
	return x.ResponseWriter.Write(b)
}

// Flush passes a flush on: streamed answers go out event by event.
func (x *exchange) Flush() {
	if f, ok := x.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection (read
// deadlines for the body timeout, flushes).
func (x *exchange) Unwrap() http.ResponseWriter { return x.ResponseWriter }

// chargedUsage is what a forwarded request was charged (its Cost priced,
// see budget.Tracker.PriceUsage); nil when nothing was.
func (x *exchange) chargedUsage() *budget.Usage {
	if x.settled == nil || !x.settled.Charged {
		return nil
	}
	return &x.settled.Usage
}

// logExchange writes the request's access log line. The attributes are
// names and numbers the proxy chose or validated: never a secret (the key
// is its name), never a prompt or an answer. A model is logged only once
// it passed budget.CheckName, so a client cannot forge log lines with it;
// so is an end user.
func (m *Middleware) logExchange(x *exchange, r *http.Request) {
	attrs := make([]slog.Attr, 0, 20)
	attrs = append(attrs,
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", x.status),
		slog.String("outcome", x.outcome))
	if x.refusedCode != "" {
		// Which limit refused, and why, is what an operator reads a
		// refusal's line for: next to its outcome.
		attrs = append(attrs, slog.String("limit", x.refusedLimit), slog.String("level", x.refusedLevel), slog.String("code", x.refusedCode))
	}
	attrs = append(attrs,
		slog.String("key", x.key),
		slog.String("provider", x.provider),
		slog.String("model", x.model))
	if x.user != "" {
		attrs = append(attrs, slog.String("user", x.user))
	}
	if x.info != nil && x.info.Tags != "" {
		// Normalized (budget.NormalizeTags): names and values checked.
		attrs = append(attrs, slog.String("tags", string(x.info.Tags)))
	}
	if x.requestID != "" {
		attrs = append(attrs, slog.String("request_id", x.requestID))
	}
	if x.est != nil {
		attrs = append(attrs, slog.Int64("estimate_input", x.est.Input), slog.Int64("estimate_output", x.est.Output))
	}
	if s := x.settled; s != nil && s.Charged {
		u := &s.Usage
		attrs = append(attrs, slog.Int64("charged_tokens", u.Input+u.Output+u.Reasoning),
			slog.Int64("charged_input", u.Input), slog.Int64("charged_output", u.Output+u.Reasoning))
	} else {
		attrs = append(attrs, slog.Int64("charged_tokens", 0))
	}
	if s := x.settled; s != nil {
		// What the cost header or trailer said; absent when unknown.
		if c, ok := s.cost(); ok {
			attrs = append(attrs, slog.String("cost", c))
		}
	}
	if s := x.settled; s != nil && s.Err != nil {
		attrs = append(attrs, slog.Bool("settle_failed", true))
	}
	attrs = append(attrs, slog.Float64("latency_ms", float64(x.end.Sub(x.start).Microseconds())/1000))
	m.cfg.AccessLog.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}
