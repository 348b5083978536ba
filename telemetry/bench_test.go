package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// BenchmarkProxyLatencyOTel is what tracing adds to a request through the
// proxy: one sequential client sends the same chat request through two
// reserve-mode proxies alike (SQLite in a temp dir, the mock upstream on
// loopback), one without an observer and one whose Observer exports every
// span (always sampled) with the SDK's batch processor over OTLP/HTTP to a
// loopback receiver that discards them, as a collector elsewhere would.
// Both serve the same database, key and limit. The two take turns in 10 rounds of b.N/10 requests each, so a change in
// the machine's load falls on both alike:
//
//	go test -run '^$' -bench ProxyLatencyOTel -benchtime 4000x ./telemetry/
//
// It reports each one's median and 90th percentile (the time until the
// proxy's handler returned), and added-otel-µs, the difference of the
// medians. The span's End runs after the response, on the goroutine that
// waits for the settlement's store write (proxy.Observer), so the latency
// counts Begin (starting the span, the trace context in and out) on the
// request's path, and End's, the batch processor's and the exporter's
// work only as they compete for the same cores.
func BenchmarkProxyLatencyOTel(b *testing.B) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(collector.URL+"/v1/traces"))
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer tp.Shutdown(context.Background())

	// Two proxies on one database, one key, one limit: only the observer
	// differs.
	h := newHarness(b, proxy.ModeReserve, 1<<50, nil)
	obs := NewObserver(tp, nil)
	obs.Placement = cachedPlacement(h.db.Tracker)
	type target struct {
		name string
		srv  *httptest.Server
		lat  []time.Duration
	}
	targets := []*target{{name: "off", srv: h.proxy}, {name: "on", srv: h.serve(proxy.ModeReserve, prometheus.NewRegistry(), obs)}}
	send := func(t *target) {
		resp, body := h.postTo(t.srv, "/v1/chat/completions", chatBody, nil)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: status %d: %s", t.name, resp.StatusCode, body)
		}
	}
	for _, t := range targets {
		t.lat = make([]time.Duration, 0, b.N)
		for range 50 { // warm the connections and the caches
			send(t)
		}
	}
	const rounds = 10
	b.ResetTimer()
	for r := range rounds {
		n := b.N / rounds
		if r < b.N%rounds {
			n++
		}
		for i := range targets {
			t := targets[(i+r)%len(targets)] // each goes first in every other round
			for range n {
				start := time.Now()
				send(t)
				t.lat = append(t.lat, time.Since(start))
			}
		}
	}
	b.StopTimer()
	p50 := map[string]float64{}
	for _, t := range targets {
		slices.Sort(t.lat)
		p50[t.name] = float64(t.lat[len(t.lat)/2].Nanoseconds()) / 1e3
		b.ReportMetric(p50[t.name], t.name+"-p50-µs")
		b.ReportMetric(float64(t.lat[len(t.lat)*9/10].Nanoseconds())/1e3, t.name+"-p90-µs")
	}
	b.ReportMetric(p50["on"]-p50["off"], "added-otel-µs")
}

// BenchmarkObserverSpan is one span's own cost on the request's goroutine,
// without the network: Begin and End of an admitted chat request's
// Observation, every span sampled and handed to a processor that drops
// it. What BenchmarkProxyLatencyOTel adds beyond this is the batch
// processor's and the exporter's work on their own goroutine, competing
// for the same cores:
//
//	go test -run '^$' -bench ObserverSpan -benchmem ./telemetry/
func BenchmarkObserverSpan(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter())))
	obs := NewObserver(tp, nil)
	info := &proxy.Info{RequestID: "res_0123456789abcdef", Key: "app", Team: "eng", Org: "acme", User: "alice",
		Route:    proxy.Route{Format: proxy.OpenAIChat, Provider: "openai"},
		Estimate: budget.Estimate{Input: 40, Output: 4096}, InjectedCap: 4096}
	u := &budget.Usage{Input: 40, Output: 22, Cost: 57, CostKnown: true}
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	const client = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	b.ReportAllocs()
	for b.Loop() {
		r.Header.Set("Traceparent", client) // Begin put its own there
		ctx := obs.Begin(r)
		obs.End(ctx, &proxy.Observation{Method: r.Method, Path: r.URL.Path, Status: 200, Outcome: proxy.OutcomeOK,
			Key: "app", Provider: "openai", Model: "gpt-4o-mini", User: "alice", Info: info, Limit: "lim_app_daily", Charged: u})
	}
}
