package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"

	"github.com/tokenbudget/tokenbudget/proxy"
	"github.com/tokenbudget/tokenbudget/telemetry"
)

// telemetryShutdownTimeout bounds the last export when the proxy stops: a
// collector that is gone must not hold the exit.
const telemetryShutdownTimeout = 10 * time.Second

// startTelemetry starts the OpenTelemetry export the OTEL_* environment
// asks for (telemetry.Start: nothing without an OTLP endpoint), with the
// proxy's registry as its metrics, and sets pc.Observer when traces are
// on. The stop it leaves in p runs after the last request and before the
// tracker closes (the last metrics collection reads its gauges).
func (p *runningProxy) startTelemetry(ctx context.Context, log *slog.Logger, reg *prometheus.Registry, pc *proxy.Config) error {
	tel, err := telemetry.Start(ctx, telemetry.Config{Gatherer: reg, Tracker: p.tracker, ServiceVersion: version()})
	if err != nil || tel == nil {
		return err
	}
	// The SDK reports failed exports through its global handler: onto
	// the proxy's log, never stopping a request.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("opentelemetry: export failed", "err", err)
	}))
	if obs := tel.Observer(); obs != nil {
		pc.Observer = obs
	}
	log.Info("opentelemetry: exporting over OTLP", "traces", tel.Traces, "metrics", tel.Metrics)
	p.stopTelemetry = func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), telemetryShutdownTimeout)
		defer cancel()
		if err := tel.Shutdown(ctx); err != nil {
			log.Warn("opentelemetry: the last export failed", "err", err)
		}
	}
	return nil
}
