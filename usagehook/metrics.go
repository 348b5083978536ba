package usagehook

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenbudget/tokenbudget/alert"
	"github.com/tokenbudget/tokenbudget/budget"
)

// scrapeTimeout bounds the store read of one scrape.
const scrapeTimeout = 2 * time.Second

// Collector reports the outbox backlog of t's store at scrape time:
//
//	tokenbudget_outbox_pending{kind,destination}          events (kind usage) or alerts (kind alert) not delivered yet
//	tokenbudget_outbox_oldest_age_seconds{kind,destination}   how long the oldest of them has waited (0: none)
//	tokenbudget_outbox_attempts{kind,destination}         the most failed deliveries of one of them
//
// destination is the usage hook's name (a webhook's URL, as Label shows
// it), "" for alerts. The backlog is the database's: every process
// reports the same.
func Collector(t *budget.Tracker) prometheus.Collector {
	labels := []string{"kind", "destination"}
	return &collector{t: t,
		pending: prometheus.NewDesc("tokenbudget_outbox_pending",
			"Usage events (kind usage, per usage hook) and alerts (kind alert) queued and not delivered yet.", labels, nil),
		age: prometheus.NewDesc("tokenbudget_outbox_oldest_age_seconds",
			"How long the oldest undelivered one has waited; 0 when none.", labels, nil),
		attempts: prometheus.NewDesc("tokenbudget_outbox_attempts",
			"The most failed deliveries of one undelivered event or alert.", labels, nil),
	}
}

type collector struct {
	t                      *budget.Tracker
	pending, age, attempts *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.age
	ch <- c.attempts
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	bl, err := c.t.OutboxBacklog(ctx)
	if err != nil {
		// As the per-limit gauges: a store that cannot say leaves the
		// series out rather than failing the whole scrape.
		return
	}
	now := c.t.Now()
	for _, b := range bl {
		age := 0.0
		if !b.Oldest.IsZero() {
			age = max(now.Sub(b.Oldest).Seconds(), 0)
		}
		dest := Label(b.Dest)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(b.Pending), b.Kind, dest)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, age, b.Kind, dest)
		ch <- prometheus.MustNewConstMetric(c.attempts, prometheus.GaugeValue, float64(b.Attempts), b.Kind, dest)
	}
}

// Label is dest as metrics and logs show it: alert.RedactURL, a URL with
// credentials or a query (where webhooks often carry a token) loses both,
// and gains "#" and 8 hex digits of its SHA-256 so that two such URLs stay
// apart. Any other name is itself.
func Label(dest string) string { return alert.RedactURL(dest) }
