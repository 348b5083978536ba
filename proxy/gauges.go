package proxy

import (
	"context"
	"slices"
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
// limit counted per key (a default limit) or per end user (user=*)
// reports its most used counter in the current window; a concurrent limit
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
	gs, err := readGauges(ctx, t.Store(), named, t.Now())
	if err != nil {
		return // the store's health shows on /healthz; the other metrics still answer
	}
	for _, g := range gs {
		lv := []string{g.id, g.level, g.owner, g.metric}
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(g.used), lv...)
		ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(g.max), lv...)
		ch <- prometheus.MustNewConstMetric(c.utilization, prometheus.GaugeValue, float64(g.used)/float64(g.max), lv...)
	}
}

// limitGauge is what the gauges report of one limit.
type limitGauge struct {
	id, level, owner, metric string
	used, max                int64
}

// readGauges reads the gauges of the limits with alerts or named, at now,
// in one snapshot: the limits, and their windows at now (the counter, or
// the history's sum when it has none yet, and the leases); for a limit
// counted per key or end user, the counters of the subjects its current
// window has rows for.
func readGauges(ctx context.Context, s budget.Store, named map[string]bool, now time.Time) ([]limitGauge, error) {
	var out []limitGauge
	err := s.View(ctx, func(tx budget.Tx) error {
		out = out[:0]
		ls, err := tx.Limits(ctx, "")
		if err != nil {
			return err
		}
		ls = slices.DeleteFunc(ls, func(l budget.Limit) bool { return len(l.Alerts) == 0 && !named[l.ID] })
		if len(ls) == 0 {
			return nil
		}
		perSubject := func(l *budget.Limit) bool { return l.IsDefault() || l.EachUser() }
		used := make([]int64, len(ls))
		var refs []budget.WindowRef
		var of []int // refs[j] is a window of ls[of[j]]
		for i := range ls {
			l := &ls[i]
			switch {
			case perSubject(l) && l.Metric == budget.MetricConcurrent:
				used[i] = -1 // leases per key or user: not reported
			case perSubject(l):
				// The counters of this window only, each subject's.
				start, end := l.Window.Bounds(now)
				subs, err := tx.Subjects(ctx, l.ID, start)
				if err != nil {
					return err
				}
				for _, sub := range subs {
					c := *l
					c.Subject = sub
					refs, of = append(refs, budget.WindowRef{Limit: &c, Start: start, End: end, NoSeed: true}), append(of, i)
				}
			case l.Metric == budget.MetricConcurrent:
				refs, of = append(refs, budget.WindowRef{Limit: l}), append(of, i)
			default:
				start, end := l.Window.Bounds(now)
				refs, of = append(refs, budget.WindowRef{Limit: l, Start: start, End: end}), append(of, i)
			}
		}
		if len(refs) > 0 {
			ws, err := tx.Windows(ctx, refs, now)
			if err != nil {
				return err
			}
			for j := range ws {
				u := ws[j].Used
				if refs[j].Limit.Metric == budget.MetricConcurrent {
					u = int64(len(ws[j].Holds)) // those live at now
				}
				used[of[j]] = max(used[of[j]], u) // a subject's most used counter
			}
		}
		for i := range ls {
			if used[i] < 0 {
				continue
			}
			l := &ls[i]
			if m := l.MaxAt(now); m > 0 {
				out = append(out, limitGauge{id: l.ID, level: string(l.Level()), owner: l.Owner(), metric: string(l.Metric), used: used[i], max: m})
			}
		}
		return nil
	})
	return out, err
}
