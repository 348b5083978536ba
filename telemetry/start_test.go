package telemetry

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
	"github.com/tokenbudget/tokenbudget/telemetry/otlptest"
)

// otelVars are the variables the tests set; setenv clears them all first.
var otelVars = []string{"OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_PROPAGATORS", "OTEL_SERVICE_NAME"}

// setenv makes env the test's OTEL_* environment (the process's: the SDK
// reads it).
func setenv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, k := range otelVars {
		t.Setenv(k, env[k])
	}
}

// TestStartIsOffWithoutAnEndpoint: no OTLP endpoint, OTEL_SDK_DISABLED, or
// both exporters none: nothing starts (and no observer to call).
func TestStartIsOffWithoutAnEndpoint(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, env := range []map[string]string{
		{},
		{"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
	} {
		setenv(t, env)
		tel, err := Start(context.Background(), Config{Gatherer: reg})
		if err != nil || tel != nil {
			t.Errorf("Start with %v = %v, %v; want nil, nil", env, tel, err)
		}
		if obs := tel.Observer(); obs != nil {
			t.Errorf("Start with %v: an observer", env)
		}
	}
}

// TestStartPicksEachSignalsProtocol: the signal's own variables win over
// the general ones, the default protocol is http/protobuf, and a signal
// without an endpoint or with exporter none is off.
func TestStartPicksEachSignalsProtocol(t *testing.T) {
	rcv := otlptest.Start(t)
	const ep = "OTEL_EXPORTER_OTLP_ENDPOINT"
	for _, c := range []struct {
		env             map[string]string
		traces, metrics string
	}{
		{map[string]string{ep: rcv.HTTPEndpoint}, "http/protobuf", "http/protobuf"},
		{map[string]string{ep: rcv.GRPCEndpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": rcv.HTTPEndpoint + "/v1/metrics"},
			"grpc", "http/protobuf"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rcv.HTTPEndpoint + "/v1/traces"}, "http/protobuf", ""},
		{map[string]string{ep: rcv.HTTPEndpoint, "OTEL_METRICS_EXPORTER": "none"}, "http/protobuf", ""},
		{map[string]string{ep: rcv.GRPCEndpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_EXPORTER": "none"}, "", "grpc"},
	} {
		setenv(t, c.env)
		tel, err := Start(context.Background(), Config{Gatherer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatalf("Start with %v: %v", c.env, err)
		}
		if tel.Traces != c.traces || tel.Metrics != c.metrics || (tel.Observer() != nil) != (c.traces != "") {
			t.Errorf("Start with %v: traces %q metrics %q observer %v; want %q, %q", c.env, tel.Traces, tel.Metrics, tel.Observer() != nil, c.traces, c.metrics)
		}
		// The last collection goes to the receiver, over the protocol picked.
		if err := tel.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown with %v: %v", c.env, err)
		}
	}
}

// TestStartRefusesWhatItCannotHonour: an unknown protocol, exporter or
// propagator is invalid input naming the variable and the value.
func TestStartRefusesWhatItCannotHonour(t *testing.T) {
	const ep = "OTEL_EXPORTER_OTLP_ENDPOINT"
	for _, c := range []struct {
		env        map[string]string
		name, word string
	}{
		{map[string]string{ep: "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
		{map[string]string{ep: "http://x", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift"},
		{map[string]string{ep: "http://x", "OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER", "zipkin"},
		{map[string]string{ep: "http://x", "OTEL_PROPAGATORS": "tracecontext,b3"}, "OTEL_PROPAGATORS", "b3"},
	} {
		setenv(t, c.env)
		_, err := Start(context.Background(), Config{Gatherer: prometheus.NewRegistry()})
		if !errors.Is(err, budget.ErrInvalid) || !strings.Contains(err.Error(), c.name) || !strings.Contains(err.Error(), c.word) {
			t.Errorf("Start with %v: %v; want invalid input naming %s and %q", c.env, err, c.name, c.word)
		}
	}
}

// TestStartExportsOverGRPC: with protocol grpc and the endpoint in the
// process environment (which the SDK reads), a request's span and the
// proxy's metrics reach a collector's gRPC services, under the
// OTEL_SERVICE_NAME given; Shutdown flushes both.
func TestStartExportsOverGRPC(t *testing.T) {
	rcv := otlptest.Start(t)
	setenv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.GRPCEndpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_SERVICE_NAME": "budget-grpc-test"})
	ctx := context.Background()
	var tel *Telemetry
	h := newHarness(t, proxy.ModeReserve, 1_000_000, func(h *harness) proxy.Observer {
		var err error
		if tel, err = Start(ctx, Config{Gatherer: h.reg, Tracker: h.db.Tracker}); err != nil {
			t.Fatal(err)
		}
		return tel.Observer()
	})
	if tel.Traces != "grpc" || tel.Metrics != "grpc" {
		t.Fatalf("traces %q metrics %q; want grpc", tel.Traces, tel.Metrics)
	}
	resp, body := h.post("/v1/chat/completions", chatBody, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s := rcv.WaitSpan(t, "the request's span", func(s *otlptest.Span) bool { return s.Name == "chat gpt-4o-mini" })
	if s.Resource["service.name"] != "budget-grpc-test" || s.Attrs["tokenbudget.key"] != "app" || s.Kind != "SPAN_KIND_SERVER" {
		t.Errorf("span %+v; want service budget-grpc-test, key app, server kind", s)
	}
	rcv.WaitPoint(t, "tokenbudget_proxy_requests_total", func(p *otlptest.Point) bool {
		return p.Attrs["outcome"] == proxy.OutcomeOK && p.Value == 1 && p.Monotonic
	})
}

// TestMetricsAreTheRegistrys: what the metric pipeline exports is what
// /metrics says: every counter and gauge series of the proxy's registry,
// same name, labels and value, counters as monotonic sums; the per-limit
// gauge reads the limit's usage.
func TestMetricsAreTheRegistrys(t *testing.T) {
	h := newHarness(t, proxy.ModeReserve, 1_000_000, nil)
	resp, body := h.post("/v1/chat/completions", chatBody, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	ev := h.event(resp.Header.Get("X-Tokenbudget-Request-Id"))

	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(producer(h.reg)))
	sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	type series struct{ name, labels string }
	got := map[series]float64{}
	monotonic := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[float64]:
				monotonic[m.Name] = d.IsMonotonic
				for _, dp := range d.DataPoints {
					got[series{m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder())}] = dp.Value
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					got[series{m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder())}] = dp.Value
				}
			}
		}
	}
	fams, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		if f.GetType() != dto.MetricType_COUNTER && f.GetType() != dto.MetricType_GAUGE {
			continue
		}
		for _, m := range f.GetMetric() {
			want := m.GetGauge().GetValue()
			if f.GetType() == dto.MetricType_COUNTER {
				want = m.GetCounter().GetValue()
				if !monotonic[f.GetName()] {
					t.Errorf("%s is no monotonic sum", f.GetName())
				}
			}
			s := series{f.GetName(), promLabels(m)}
			if v, ok := got[s]; !ok || v != want {
				t.Errorf("%s{%s} = %v (exported: %v); want %v", s.name, s.labels, v, ok, want)
			}
			n++
		}
	}
	if n < 20 {
		t.Errorf("compared %d series; the proxy's registry has more", n)
	}
	for _, c := range []struct {
		s    series
		want float64
	}{
		{series{"tokenbudget_proxy_requests_total", "outcome=ok"}, 1},
		{series{"tokenbudget_proxy_tokens_total", "kind=input,provider=openai"}, float64(ev.Input)},
		{series{"tokenbudget_limit_used", "level=key,limit_id=" + h.limit + ",metric=tokens,owner=app"}, float64(ev.Billable())},
	} {
		if got[c.s] != c.want {
			t.Errorf("%s{%s} = %v; want %v", c.s.name, c.s.labels, got[c.s], c.want)
		}
	}
}

// promLabels is m's labels as attribute.DefaultEncoder writes a set.
func promLabels(m *dto.Metric) string {
	var b strings.Builder
	for i, l := range m.GetLabel() { // sorted by name, as a set is
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.GetName() + "=" + l.GetValue())
	}
	return b.String()
}
