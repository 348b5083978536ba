package proxy

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Per-limit gauges, read from the store at scrape time:
//
//	tokenbudget_limit_used{limit_id,level,owner,metric}          usage in the current window
//	tokenbudget_limit_max{limit_id,level,owner,metric}           the limit in force, raises included
//	tokenbudget_limit_utilization{limit_id,level,owner,metric}   used / max (1 is the limit)
//
// Only for limits with alert thresholds (budget.Limit.Alerts) and those
// named by GaugeLimits, so that the series stay as few as the limits an
// operator chose: one set per limit, never one per key or end user. A
// limit counted per key (a default limit), per end user (user=*) or per
// tag value (tag NAME=*) reports its most used counter in the current window; a concurrent limit
// its live leases, unless it counts per key or user (not reported).
// level is key, team, org or default; owner the key, team or org ("" for
// a default limit); metric the limit's (tokens, input, output, usd,
// requests, concurrent), so that a dashboard can tell micro-dollars from
// tokens. Amounts are in the limit's unit (micro-dollars for usd
// limits); reservations are not counted, as alert thresholds do not count
// them.

// gaugeScrapeTimeout bounds the store read of one scrape.
const gaugeScrapeTimeout = 2 * time.Second

// GaugeLimits names limits, by id, to report in the per-limit gauges
// besides those with alert thresholds. An id no limit has reports nothing
// (a limit created later with it will).
func (m *Metrics) GaugeLimits(ids []string) {
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		if id = strings.TrimSpace(id); id != "" {
			set[id] = true
		}
	}
	m.gauged.Store(&set)
}

// limitCollector reports the per-limit gauges of the tracker's store.
type limitCollector struct {
	m                      *Metrics
	used, max, utilization *prometheus.Desc
}

func newLimitCollector(m *Metrics) limitCollector {
	labels := []string{"limit_id", "level", "owner", "metric"}
	return limitCollector{m: m,
		used: prometheus.NewDesc("tokenbudget_limit_used",
			"Usage of the limit's current window (its most used counter for a limit counted per key or end user); limits with alerts or named by --metrics-limits.", labels, nil),
		max: prometheus.NewDesc("tokenbudget_limit_max",
			"The limit in force, raises included; limits with alerts or named by --metrics-limits.", labels, nil),
		utilization: prometheus.NewDesc("tokenbudget_limit_utilization",
			"tokenbudget_limit_used / tokenbudget_limit_max (1 is the limit); limits with alerts or named by --metrics-limits.", labels, nil),
	}
}

func (c limitCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.used
	ch <- c.max
	ch <- c.utilization
}

func (c limitCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.m.tracker.Load()
	if t == nil {
		return
	}
	var named map[string]bool
	if p := c.m.gauged.Load(); p != nil {
		named = *p
	}
	ctx, cancel := context.WithTimeout(context.Background(), gaugeScrapeTimeout)
	defer cancel()
	// The limits with alerts, and those a config names.
	keep := func(l *budget.Limit) bool { return len(l.Alerts) > 0 || named[l.ID] }
	gs, err := t.Gauges(ctx, keep, t.Now())
	if err != nil {
		return // the store's health shows on /healthz; the other metrics still answer
	}
	for _, g := range gs {
		lv := []string{g.Limit.ID, string(g.Limit.Level()), g.Limit.Owner(), string(g.Limit.Metric)}
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(g.Used), lv...)
		ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(g.Max), lv...)
		ch <- prometheus.MustNewConstMetric(c.utilization, prometheus.GaugeValue, float64(g.Used)/float64(g.Max), lv...)
	}
}
