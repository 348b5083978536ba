package proxy_test

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// gaugeLine is one per-limit gauge in the /metrics text (labels sorted).
var gaugeLine = regexp.MustCompile(`(?m)^tokenbudget_limit_(used|max|utilization)\{level="([^"]*)",limit_id="([^"]*)",metric="([^"]*)",owner="([^"]*)"\} (\S+)$`)

// gauge is what /metrics says of one limit.
type gauge struct {
	level, metric, owner   string
	used, max, utilization float64
}

func gauges(t *testing.T, text string) map[string]gauge {
	t.Helper()
	out := map[string]gauge{}
	for _, m := range gaugeLine.FindAllStringSubmatch(text, -1) {
		v, err := strconv.ParseFloat(m[6], 64)
		if err != nil {
			t.Fatalf("gauge %q: %v", m[0], err)
		}
		g := out[m[3]]
		g.level, g.metric, g.owner = m[2], m[4], m[5]
		switch m[1] {
		case "used":
			g.used = v
		case "max":
			g.max = v
		case "utilization":
			g.utilization = v
		}
		out[m[3]] = g
	}
	return out
}

// TestLimitGauges: the per-limit gauges report the limits with alert
// thresholds and those named, and no other; a limit counted per key or
// end user reports its most used counter; a limit that loses its
// thresholds leaves them.
func TestLimitGauges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mode: proxy.ModeReserve, clock: true, cfg: func(c *proxy.Config) {
		c.Metrics.GaugeLimits([]string{"lim-named", " lim-conc", "lim-none"})
	}}, okUpstream)
	ctx := context.Background()
	for _, s := range []budget.LimitSpec{
		{ID: "lim-alerted", Key: "team", Window: "1h", Max: ptr(int64(100)), Alerts: &[]int{80}},
		{ID: "lim-named", Key: "team", Metric: "requests", Window: "1h", Max: ptr(int64(10))},
		{ID: "lim-plain", Key: "team", Window: "daily", Max: ptr(int64(1000))},
		{ID: "lim-default", Default: true, Metric: "input", Window: "1h", Max: ptr(int64(200)), Alerts: &[]int{50}},
		{ID: "lim-users", Key: "team", Scope: "user", ScopeValue: budget.AllUsers, Window: "1h", Max: ptr(int64(50)), Alerts: &[]int{90}},
		{ID: "lim-conc", Key: "team", Metric: "concurrent", Max: ptr(int64(4))},
		{ID: "lim-eng", Team: "eng", Window: "1h", Max: ptr(int64(1000))},
	} {
		if s.Team != "" {
			if _, err := e.db.SetTeam(ctx, s.Team, ""); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := e.db.SetLimit(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := e.db.RaiseLimit(ctx, "lim-alerted", 50, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.RecordSync(ctx,
		budget.Usage{RequestID: "u1", Key: "team", Provider: "openai", Model: "gpt-4o", Input: 30, At: testNow},
		budget.Usage{RequestID: "u2", Key: "other", Provider: "openai", Model: "gpt-4o", Input: 70, At: testNow},
		budget.Usage{RequestID: "u3", Key: "team", User: "alice", Provider: "openai", Model: "gpt-4o", Input: 5, At: testNow},
		budget.Usage{RequestID: "u4", Key: "team", User: "bob", Provider: "openai", Model: "gpt-4o", Input: 12, At: testNow},
	); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Reserve(ctx, budget.Request{Key: "team", Provider: "openai", Model: "gpt-4o", Estimate: budget.Estimate{Tokens: 1}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	e.advance(time.Minute)
	got := gauges(t, e.metrics())
	want := map[string]gauge{
		"lim-alerted": {"key", "tokens", "team", 47, 150, 47.0 / 150}, // raise included; the reservation is not usage
		"lim-named":   {"key", "requests", "team", 3, 10, 0.3},
		"lim-default": {"default", "input", "", 70, 200, 0.35},   // other's counter, the larger
		"lim-users":   {"key", "tokens", "team", 12, 50, 0.24},   // bob's
		"lim-conc":    {"key", "concurrent", "team", 1, 4, 0.25}, // the reservation's lease
	}
	if !maps.Equal(got, want) {
		t.Errorf("gauges:\n got %v\nwant %v", got, want)
	}
	// Thresholds removed: the limit is no longer reported.
	if _, _, err := e.db.SetLimit(ctx, budget.LimitSpec{ID: "lim-alerted", Key: "team", Window: "1h", Alerts: &[]int{}}); err != nil {
		t.Fatal(err)
	}
	got = gauges(t, e.metrics())
	if ids := slices.Sorted(maps.Keys(got)); !slices.Equal(ids, []string{"lim-conc", "lim-default", "lim-named", "lim-users"}) {
		t.Errorf("gauges after lim-alerted lost its thresholds: %v", ids)
	}
}

func ptr[T any](v T) *T { return &v }
