package main

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenbudget/tokenbudget/alert"
	"github.com/tokenbudget/tokenbudget/usagehook"
)

const usageWebhookHelp = `Usage events: with --usage-webhook URL the proxy registers URL as a usage
hook in the database ('budget outbox ls' lists it) and POSTs every usage
event recorded from then on, by any process and any path (proxied
requests, 'budget record', 'commit', 'import'), as a CloudEvents JSON
batch (Content-Type application/cloudevents-batch+json; each event's id
is stable, type dev.tokenbudget.usage.v1, subject the key, data the
fields of 'budget export'), signed as alerts are with --alert-secret-env.
A non-2xx answer or none is tried again 1s later, doubling, at most 5
minutes apart; a key's events arrive in the order they were recorded.
The hook stays registered when the proxy stops: what is recorded
meanwhile is delivered when a proxy with the same URL runs again, until
'budget outbox rm URL'. A receiver deduplicates on the events' ids.
The backlog shows in 'budget outbox ls' and in /metrics as
tokenbudget_outbox_pending, _oldest_age_seconds and _attempts {kind,
destination} (alerts' too, kind alert).
`

// usageInterval is how often the proxy's --usage-webhook looks for
// events due: a retry, or an event recorded by another process, is late
// by at most this.
const usageInterval = time.Second

// startUsageHook registers the metrics of the outbox backlog and, with
// --usage-webhook, registers the webhook as a usage hook before the proxy
// records anything, then delivers its events in the background until
// stop (usagehook.Deliverer). A failing webhook is logged and tried again
// later; a store error is logged; neither stops the proxy.
func (p *runningProxy) startUsageHook(ctx context.Context, o proxyOptions, reg prometheus.Registerer) error {
	reg.MustRegister(usagehook.Collector(p.tracker))
	if o.usageWebhook == "" {
		return nil
	}
	d := &usagehook.Deliverer{Tracker: p.tracker, Dest: o.usageWebhook, Send: &usagehook.Webhook{URL: o.usageWebhook,
		Secret: o.alertSecret, Client: alert.NewClient(webhookLog{http.DefaultTransport, o.log, "usage"})}}
	if err := d.Register(ctx); err != nil {
		return err
	}
	p.stopUsage = background(ctx, o.usageTicks, usageInterval, func(ctx context.Context, ticks <-chan time.Time) {
		d.Run(ctx, ticks, func(err error) {
			o.log.Error("usage hook: reading or settling the outbox failed; tried again", "err", err)
		})
	})
	return nil
}
