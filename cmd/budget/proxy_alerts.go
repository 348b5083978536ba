package main

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/alert"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/usagehook"
)

// alertInterval is how often the proxy's --alert-webhook looks for alerts
// due: a retry is late by at most this.
const alertInterval = time.Second

// alertOptions checks --alert-webhook, --usage-webhook and
// --alert-secret-env and reads the secret from the environment: a missing
// or empty variable is invalid input naming the flag, so a proxy never
// delivers unsigned by mistake.
func (m *Main) alertOptions(o *proxyOptions, secretEnv string) error {
	o.alertWebhook = strings.TrimSpace(o.alertWebhook)
	o.usageWebhook = strings.TrimSpace(o.usageWebhook)
	secretEnv = strings.TrimSpace(secretEnv)
	for _, f := range []struct{ name, url string }{{"alert-webhook", o.alertWebhook}, {"usage-webhook", o.usageWebhook}} {
		if f.url != "" {
			if err := budget.CheckWebhookURL(f.name, f.url); err != nil {
				return err
			}
		}
	}
	if secretEnv == "" {
		return nil
	}
	if o.alertWebhook == "" && o.usageWebhook == "" {
		return usagef("proxy", "--alert-secret-env needs --alert-webhook or --usage-webhook")
	}
	if strings.ContainsAny(secretEnv, "= \t") {
		return budget.Invalid("alert-secret-env", secretEnv, "want an environment variable name")
	}
	secret := m.Getenv(secretEnv)
	if secret == "" {
		return budget.Invalid("alert-secret-env", secretEnv, "the environment variable is missing or empty")
	}
	o.alertSecret = []byte(secret)
	return nil
}

// parseIDs splits a comma-separated list of ids, dropping blanks.
func parseIDs(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// startAlerts delivers the alerts to o.alertWebhook in the background
// until stop: every alertInterval (or o.alertTicks) it claims the alerts
// due and POSTs them (alert.Deliverer). A webhook that fails is logged
// and tried again later; a store error is logged; neither stops the
// proxy.
func (p *runningProxy) startAlerts(ctx context.Context, o proxyOptions) {
	d := &alert.Deliverer{Tracker: p.tracker, URL: o.alertWebhook, Secret: o.alertSecret,
		Client: alert.NewClient(webhookLog{http.DefaultTransport, o.log, "alert"})}
	p.stopAlerts = background(ctx, o.alertTicks, alertInterval, func(ctx context.Context, ticks <-chan time.Time) {
		d.Run(ctx, ticks, func(err error) { o.log.Error("alerts: reading or settling alerts failed; tried again", "err", err) })
	})
}

// webhookLog logs each webhook answer that is not a 2xx: the deliverer
// counts it as failed and tries again later. what names the deliveries:
// "alert" or "usage".
type webhookLog struct {
	rt   http.RoundTripper
	log  *slog.Logger
	what string
}

func (w webhookLog) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.rt.RoundTrip(r)
	prefix := "alerts: webhook"
	attrs := []any{"alert", r.Header.Get("X-Budget-Alert-Id")}
	if w.what == "usage" {
		prefix, attrs = "usage hook: webhook", []any{"url", usagehook.Label(r.URL.String())}
	}
	switch {
	case err != nil && r.Context().Err() == nil:
		w.log.Warn(prefix+" failed; tried again later", append(attrs, "err", err)...)
	case err == nil && resp.StatusCode/100 != 2:
		w.log.Warn(prefix+" refused; tried again later", append(attrs, "status", resp.Status)...)
	}
	return resp, err
}

// background runs run with ticks (every interval when ticks is nil) on a
// goroutine until the stop it returns, which waits for it.
func background(ctx context.Context, ticks <-chan time.Time, interval time.Duration,
	run func(context.Context, <-chan time.Time)) (stop func()) {
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var ticker *time.Ticker
	if ticks == nil {
		ticker = time.NewTicker(interval)
		ticks = ticker.C
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(bctx, ticks)
	}()
	return func() {
		cancel()
		<-done
		if ticker != nil {
			ticker.Stop()
		}
	}
}
