// Package telemetry exports what `budget proxy` does over OpenTelemetry,
// with the official Go SDK, so that the collector an operator already
// runs takes it like any other service's:
//
//   - traces: a span per request the proxy middleware answers (Observer,
//     the proxy.Observer the middleware calls), with the GenAI semantic
//     conventions' attributes (gen_ai.provider.name, gen_ai.request.model,
//     gen_ai.usage.*) and tokenbudget's own under "tokenbudget." (the key,
//     its team and org, the end user, the limit that decided, the
//     admitted estimate, the tokens and dollars charged); W3C trace
//     context is taken from the client's request and handed on to the
//     upstream's, so the proxy's span sits between the caller's and the
//     provider's;
//   - metrics: the proxy's Prometheus registry (the /metrics counters and
//     the per-limit gauges) read at each export through the OpenTelemetry
//     Prometheus bridge, under the same names, so a dashboard reads the
//     same series from either.
//
// Both go out over OTLP (gRPC or HTTP/protobuf), configured only by the
// standard OTEL_* environment variables, which the SDK reads itself
// (endpoints, headers, timeouts, compression, TLS, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, OTEL_BSP_*,
// OTEL_METRIC_EXPORT_INTERVAL); Start only decides which signals are on
// and which protocol each speaks. Without an OTLP endpoint nothing is
// started and the proxy pays nothing: its Config.Observer stays nil.
//
// The library (budget, the stores) knows nothing of this package; the
// proxy package knows only its Observer seam.
//
// Concurrency: an Observer is safe for concurrent use; its Begin and End
// run on the request's goroutine and never wait for an export (spans are
// batched and exported by the SDK's own goroutine). Shutdown is called
// once, after the last request.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	promclient "github.com/prometheus/client_golang/prometheus"
	promBridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/tokenbudget/tokenbudget/budget"
)

// DefaultServiceName is the service.name of the proxy's telemetry when
// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) names
// none.
const DefaultServiceName = "tokenbudget-proxy"

// Config configures Start. The OTEL_* variables are no part of it: Start
// reads them from the process environment, where the SDK reads the
// endpoints, headers, sampler and resource, so that the two always agree.
type Config struct {
	// Gatherer is the Prometheus registry whose metrics are exported as
	// OTel metrics (the proxy's /metrics). (Optional; nil: no metrics.)
	Gatherer promclient.Gatherer
	// Tracker places a span's key in its team and org when the request's
	// reservation did not (check mode). (Optional.)
	Tracker *budget.Tracker
	// ServiceVersion is the resource's service.version. (Optional.)
	ServiceVersion string
}

// Telemetry is the OpenTelemetry pipeline Start set up.
type Telemetry struct {
	observer *Observer
	tp       *sdktrace.TracerProvider
	mp       *sdkmetric.MeterProvider
	// Traces and Metrics say which signals are exported, and over which
	// protocol ("grpc", "http/protobuf"; "" when off).
	Traces, Metrics string
}

// Start sets up the exporters the environment asks for, or returns nil
// (and no error) when it names no OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT
// or a signal's own), when OTEL_SDK_DISABLED is true, or when both signals'
// exporters are "none". A value it cannot honour (a protocol or exporter
// other than OTLP over grpc or http/protobuf, a propagator other than
// tracecontext, baggage or none) is an error naming the variable.
func Start(ctx context.Context, cfg Config) (*Telemetry, error) {
	env := os.Getenv
	if strings.EqualFold(strings.TrimSpace(env("OTEL_SDK_DISABLED")), "true") { // as the SDK reads it
		return nil, nil
	}
	tproto, err := signal(env, "TRACES")
	if err != nil {
		return nil, err
	}
	mproto, err := signal(env, "METRICS")
	if err != nil {
		return nil, err
	}
	if cfg.Gatherer == nil {
		mproto = ""
	}
	if tproto == "" && mproto == "" {
		return nil, nil
	}
	prop, err := propagators(env("OTEL_PROPAGATORS"))
	if err != nil {
		return nil, err
	}
	// The default name first: OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES, detected after it, win.
	attrs := []resource.Option{resource.WithAttributes(semconv.ServiceName(DefaultServiceName))}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersion(cfg.ServiceVersion)))
	}
	res, err := resource.New(ctx, append(attrs, resource.WithTelemetrySDK(), resource.WithFromEnv())...)
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tel := &Telemetry{Traces: tproto, Metrics: mproto}
	if tproto != "" {
		exp, err := traceExporter(ctx, tproto)
		if err != nil {
			return nil, err
		}
		tel.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		tel.observer = NewObserver(tel.tp, prop)
		if cfg.Tracker != nil {
			tel.observer.Placement = cachedPlacement(cfg.Tracker)
		}
	}
	if mproto != "" {
		exp, err := metricExporter(ctx, mproto)
		if err != nil {
			tel.Shutdown(ctx)
			return nil, err
		}
		reader := sdkmetric.NewPeriodicReader(exp, sdkmetric.WithProducer(producer(cfg.Gatherer)))
		tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
	}
	return tel, nil
}

// Observer is the proxy.Observer that traces each request; nil when
// traces are off (Config.Observer must then stay nil, not a nil pointer
// in an interface).
func (t *Telemetry) Observer() *Observer {
	if t == nil {
		return nil
	}
	return t.observer
}

// Shutdown exports what is still buffered (the last spans, a last
// collection of the metrics) and stops the exporters. Call it after the
// last request has ended and before the tracker closes: the last
// collection reads its gauges.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	if t.tp != nil {
		errs = append(errs, t.tp.Shutdown(ctx))
	}
	if t.mp != nil {
		errs = append(errs, t.mp.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// signal is the OTLP protocol signal ("TRACES", "METRICS") is exported
// with, "" when it is off: no endpoint for it, or its exporter is none.
func signal(env func(string) string, signal string) (string, error) {
	exporter := "OTEL_" + signal + "_EXPORTER"
	switch v := strings.TrimSpace(env(exporter)); v {
	case "", "otlp":
	case "none":
		return "", nil
	default:
		return "", budget.Invalid(exporter, v, "want otlp or none")
	}
	if strings.TrimSpace(env("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT")) == "" && strings.TrimSpace(env("OTEL_EXPORTER_OTLP_ENDPOINT")) == "" {
		return "", nil
	}
	name := "OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"
	v := strings.TrimSpace(env(name))
	if v == "" {
		name = "OTEL_EXPORTER_OTLP_PROTOCOL"
		v = strings.TrimSpace(env(name))
	}
	switch v {
	case "":
		return "http/protobuf", nil // the specification's default
	case "grpc", "http/protobuf":
		return v, nil
	}
	return "", budget.Invalid(name, v, "want grpc or http/protobuf (the Go SDK has no http/json exporter)")
}

// propagators is the propagator OTEL_PROPAGATORS names (default W3C
// trace context and baggage).
func propagators(v string) (propagation.TextMapPropagator, error) {
	if strings.TrimSpace(v) == "" {
		return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}), nil
	}
	var ps []propagation.TextMapPropagator
	for _, name := range strings.Split(v, ",") {
		switch name = strings.TrimSpace(name); name {
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage":
			ps = append(ps, propagation.Baggage{})
		case "none":
		default:
			return nil, budget.Invalid("OTEL_PROPAGATORS", v, "want tracecontext, baggage or none (comma-separated)")
		}
	}
	return propagation.NewCompositeTextMapPropagator(ps...), nil
}

// producer reads g at each collection, as a scrape of /metrics would:
// counters become monotonic sums, gauges gauges, histograms histograms,
// under the same names and labels.
func producer(g promclient.Gatherer) sdkmetric.Producer {
	return promBridge.NewMetricProducer(promBridge.WithGatherer(g))
}

func traceExporter(ctx context.Context, proto string) (sdktrace.SpanExporter, error) {
	// Endpoint, headers, timeout, compression and TLS: the exporter reads
	// OTEL_EXPORTER_OTLP_[TRACES_]* itself.
	if proto == "grpc" {
		return otlptracegrpc.New(ctx)
	}
	return otlptracehttp.New(ctx)
}

func metricExporter(ctx context.Context, proto string) (sdkmetric.Exporter, error) {
	if proto == "grpc" {
		return otlpmetricgrpc.New(ctx)
	}
	return otlpmetrichttp.New(ctx)
}
