package proxy

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Request outcomes, the values of the outcome label of
// tokenbudget_proxy_requests_total.
const (
	OutcomeOK            = "ok"             // forwarded, answered 2xx, usage settled
	OutcomeRefused       = "refused"        // a budget limit refused it (429)
	OutcomeParked        = "parked"         // its provider is parked (429/503)
	OutcomeUnauthorized  = "unauthorized"   // no, unknown or revoked gateway key (401)
	OutcomeTooLarge      = "too_large"      // body over the size cap (413)
	OutcomeBadRequest    = "bad_request"    // not a JSON object, wrong method
	OutcomeNotFound      = "not_found"      // a path the proxy does not serve
	OutcomeUpstreamError = "upstream_error" // the upstream answered non-2xx or failed
	OutcomeClientClosed  = "client_closed"  // the client went away before the end
	OutcomeError         = "error"          // the budget store failed (503)
	OutcomeBusy          = "busy"           // request bytes in flight over the bound (503)
	OutcomeTimeout       = "timeout"        // the request body came too slowly (408)
	OutcomeNoBudget      = "no_budget"      // no limit applies and RequireLimits is set (403)
)

// Metrics are the proxy's Prometheus metrics. Create them with NewMetrics,
// hand them to the middleware's Config, and call SetTracker once the
// tracker exists. Safe for concurrent use.
type Metrics struct {
	requests     *prometheus.CounterVec
	tokens       *prometheus.CounterVec
	refusals     *prometheus.CounterVec
	withoutUsage *prometheus.CounterVec
	parks        *prometheus.CounterVec
	settleErrs   prometheus.Counter
	storeWrite   prometheus.Histogram
	tracker      atomic.Pointer[budget.Tracker]
	gauged       atomic.Pointer[map[string]bool] // GaugeLimits
	// commits counts the events the middleware's commits wrote: they are
	// written on the tracker's transaction, not by its recorder, so the
	// tracker's Stats.Written leaves them out.
	commits atomic.Int64

	queueDepth, parked          *prometheus.Desc
	written, duplicates, failed *prometheus.Desc
	unpriced                    *prometheus.Desc
}

// NewMetrics creates the metrics and registers them with reg:
//
//	tokenbudget_proxy_requests_total{outcome}
//	tokenbudget_proxy_tokens_total{provider,kind}   kind: input, output, reasoning, cache_read, cache_write
//	tokenbudget_proxy_refusals_total{scope}         scope: global, provider, model
//	tokenbudget_proxy_responses_without_usage_total{provider}   no usage, or an invalid one: charged the estimate
//	tokenbudget_proxy_parks_total{provider,kind}
//	tokenbudget_proxy_settle_errors_total
//	tokenbudget_recorder_queue_depth
//	tokenbudget_recorder_flush_seconds              write transactions (InstrumentStore)
//	tokenbudget_recorder_events_written_total       recorded and committed (reserve mode) events
//	tokenbudget_recorder_duplicates_total, _failures_total
//	tokenbudget_parked_providers                    providers refusing now
//	tokenbudget_limit_used, _max, _utilization{limit_id,level,owner}
//	                                                limits with alerts or named by GaugeLimits (gauges.go)
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenbudget_proxy_requests_total",
			Help: "Requests handled by the budget middleware, by outcome."}, []string{"outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenbudget_proxy_tokens_total",
			Help: "Tokens recorded (committed or recorded usage), by provider and kind; input includes the cache counts."},
			[]string{"provider", "kind"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenbudget_proxy_refusals_total",
			Help: "Requests refused by a budget limit, by the scope of the limit that tripped."}, []string{"scope"}),
		withoutUsage: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenbudget_proxy_responses_without_usage_total",
			Help: "Successful responses that reported no usage, or an invalid one, and were recorded at the estimate."}, []string{"provider"}),
		parks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenbudget_proxy_parks_total",
			Help: "Providers parked by this proxy after an upstream answer, by kind."}, []string{"provider", "kind"}),
		settleErrs: prometheus.NewCounter(prometheus.CounterOpts{Name: "tokenbudget_proxy_settle_errors_total",
			Help: "Commits, releases and records that failed (logged)."}),
		storeWrite: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tokenbudget_recorder_flush_seconds",
			Help:    "Duration of the store's write transactions: recorder batches, reservations, commits.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		queueDepth: prometheus.NewDesc("tokenbudget_recorder_queue_depth", "Operations waiting for the recorder's writer.", nil, nil),
		written: prometheus.NewDesc("tokenbudget_recorder_events_written_total",
			"Usage events written to the history by this process: recorded ones (check mode) and reservations committed (reserve mode).", nil, nil),
		duplicates: prometheus.NewDesc("tokenbudget_recorder_duplicates_total", "Usage events ignored as duplicates.", nil, nil),
		failed:     prometheus.NewDesc("tokenbudget_recorder_failures_total", "Failed write attempts (each is retried).", nil, nil),
		parked:     prometheus.NewDesc("tokenbudget_parked_providers", "Providers refusing requests now (parked, before resume-at).", nil, nil),
		unpriced: prometheus.NewDesc("tokenbudget_unpriced_events_total",
			"Usage events written with no price for their model while a dollar limit applied (stored at $0, counted).", nil, nil),
	}
	for _, o := range []string{OutcomeOK, OutcomeRefused, OutcomeParked, OutcomeUnauthorized, OutcomeTooLarge,
		OutcomeBadRequest, OutcomeNotFound, OutcomeUpstreamError, OutcomeClientClosed, OutcomeError, OutcomeBusy, OutcomeTimeout, OutcomeNoBudget} {
		m.requests.WithLabelValues(o)
	}
	for _, s := range []budget.Scope{budget.ScopeGlobal, budget.ScopeProvider, budget.ScopeModel} {
		m.refusals.WithLabelValues(string(s))
	}
	reg.MustRegister(m.requests, m.tokens, m.refusals, m.withoutUsage, m.parks, m.settleErrs, m.storeWrite, trackerCollector{m}, newLimitCollector(m))
	return m
}

// SetTracker names the tracker whose queue, writes and parked providers
// the metrics report.
func (m *Metrics) SetTracker(t *budget.Tracker) { m.tracker.Store(t) }

// routes creates the per-provider series of the routes' providers, so
// they read 0 before anything happened.
func (m *Metrics) routes(rs map[string]Route) {
	if m == nil {
		return
	}
	for _, r := range rs {
		m.withoutUsage.WithLabelValues(r.Provider)
	}
}

func (m *Metrics) outcome(o string) {
	if m != nil {
		m.requests.WithLabelValues(o).Inc()
	}
}

func (m *Metrics) refused(s budget.Scope) {
	if m != nil {
		m.refusals.WithLabelValues(string(s)).Inc()
	}
}

func (m *Metrics) recorded(provider string, u *budget.Usage) {
	if m == nil {
		return
	}
	for _, kv := range [...]struct {
		kind string
		v    int64
	}{{"input", u.Input}, {"output", u.Output}, {"reasoning", u.Reasoning}, {"cache_read", u.CacheRead}, {"cache_write", u.CacheWrite}} {
		if kv.v > 0 {
			m.tokens.WithLabelValues(provider, kv.kind).Add(float64(kv.v))
		}
	}
}

func (m *Metrics) noUsage(provider string) {
	if m != nil {
		m.withoutUsage.WithLabelValues(provider).Inc()
	}
}

func (m *Metrics) parkedProvider(provider string, kind budget.ParkKind) {
	if m != nil {
		m.parks.WithLabelValues(provider, string(kind)).Inc()
	}
}

func (m *Metrics) committed() {
	if m != nil {
		m.commits.Add(1)
	}
}

func (m *Metrics) settleError() {
	if m != nil {
		m.settleErrs.Inc()
	}
}

// trackerCollector reads the tracker at scrape time.
type trackerCollector struct{ m *Metrics }

func (c trackerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.queueDepth
	ch <- c.m.written
	ch <- c.m.duplicates
	ch <- c.m.failed
	ch <- c.m.parked
	ch <- c.m.unpriced
}

func (c trackerCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.m.tracker.Load()
	if t == nil {
		return
	}
	s := t.Stats()
	ch <- prometheus.MustNewConstMetric(c.m.queueDepth, prometheus.GaugeValue, float64(s.QueueDepth))
	ch <- prometheus.MustNewConstMetric(c.m.written, prometheus.CounterValue, float64(s.Written+c.m.commits.Load()))
	ch <- prometheus.MustNewConstMetric(c.m.duplicates, prometheus.CounterValue, float64(s.Duplicates))
	ch <- prometheus.MustNewConstMetric(c.m.failed, prometheus.CounterValue, float64(s.Failures))
	ch <- prometheus.MustNewConstMetric(c.m.unpriced, prometheus.CounterValue, float64(s.Unpriced))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if ps, err := t.ParkedProviders(ctx); err == nil {
		now, n := t.Now(), 0
		for i := range ps {
			if ps[i].Refusing(now) {
				n++
			}
		}
		ch <- prometheus.MustNewConstMetric(c.m.parked, prometheus.GaugeValue, float64(n))
	}
}

// InstrumentStore wraps s so that the duration of every write transaction
// (the recorder's batches, reservations, commits, parks) is observed in
// tokenbudget_recorder_flush_seconds. Pass the result to budget.New.
func (m *Metrics) InstrumentStore(s budget.Store) budget.Store {
	return &timedStore{Store: s, h: m.storeWrite}
}

type timedStore struct {
	budget.Store
	h prometheus.Histogram
}

var _ budget.HealthChecker = (*timedStore)(nil)

// Unwrap is the store timed, so budget.StoreAs finds its optional roles.
func (s *timedStore) Unwrap() budget.Store { return s.Store }

// Health passes the store's own through: without it the tracker could not
// see its database file deleted or replaced under it.
func (s *timedStore) Health() error {
	if hc, ok := s.Store.(budget.HealthChecker); ok {
		return hc.Health()
	}
	return nil
}
