package proxy

import (
	"context"
	"net/http"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Observer sees every request the middleware answers (Config.Observer):
// the seam for tracing and metrics this package knows nothing of, such as
// the telemetry package's OpenTelemetry spans. Begin runs on the
// request's goroutine, so a slow one slows every request; End runs once
// the response is complete and the settlement written, on the goroutine
// that waited for that write (the request's own when nothing was
// settled). An implementation must be safe for concurrent use.
type Observer interface {
	// Begin is called when a request arrives, before anything of it is
	// read. The context it returns is the request's from then on (a span
	// in it). It may set headers on r: they go upstream with the request
	// (W3C trace context), while the middleware's own gateway headers are
	// still removed.
	Begin(r *http.Request) context.Context
	// End is called once the request is answered and its usage settled
	// (or its reservation released) and written, with the context Begin
	// returned. o is valid only during the call.
	End(ctx context.Context, o *Observation)
}

// Observation is what the middleware decided about one request: what its
// access log line says, with the route and the placement.
type Observation struct {
	Start   time.Time // when the request arrived
	Method  string
	Path    string
	Status  int    // the status the client got (0: it left before any)
	Outcome string // one of the Outcome constants
	// Key, Provider, Model and User are set once the request got that far
	// (authenticated, routed, its model and end user validated).
	Key, Provider, Model, User string
	// Info is the middleware's Info of a request that reached admission
	// (admitted or refused); nil for one answered before (401, 404, 400,
	// 413...). Its Route says the API spoken (Format, Kind).
	Info *Info
	// Limit is the id of the limit that decided: the one that refused a
	// refused request, else the applicable limit with the least room left
	// (the X-Tokenbudget-Limit header); "" when none applied. LimitLevel
	// and Code are a refusal's level and error code.
	Limit, LimitLevel, Code string
	// Charged is what was committed or recorded; nil when nothing was
	// charged (a refusal, an upstream error, a release).
	Charged *budget.Usage
	// SettleErr is the store's answer to the request's settlement (its
	// commit, release or record), written before End: nil when it was
	// written or nothing needed writing. The access log's settle_failed.
	SettleErr error
}

// begin hands r to the observer (Begin) and returns the request to serve
// and the call that reports its end (End).
func (m *Middleware) begin(r *http.Request) (*http.Request, func(*Observation)) {
	ctx := m.cfg.Observer.Begin(r)
	return r.WithContext(ctx), func(o *Observation) { m.cfg.Observer.End(ctx, o) }
}

// observation is the Observation of the request x answered.
func (x *exchange) observation(r *http.Request) *Observation {
	o := &Observation{Start: x.start, Method: r.Method, Path: r.URL.Path, Status: x.status, Outcome: x.outcome,
		Key: x.key, Provider: x.provider, Model: x.model, User: x.user, Info: x.info,
		Limit: x.refusedLimit, LimitLevel: x.refusedLevel, Code: x.refusedCode, Charged: x.chargedUsage()}
	if o.Limit == "" && x.info != nil {
		o.Limit = x.Header().Get(limitHeader)
	}
	return o
}
