package proxy_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// TestRefusalShouldRetry: a refusal whose wait is longer than the max
// client wait (60 s by default) says x-should-retry: false, so SDKs give
// up at once instead of sleeping until the window resets; a short wait (a
// one-minute window, a concurrency lease, a short park) stays retryable.
// The 429 keeps its Retry-After and rate-limit headers either way.
func TestRefusalShouldRetry(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		maxWait   time.Duration // 0: the default
		metric    string
		window    string
		used      int64 // recorded before the request
		lease     bool  // a live reservation holds the concurrency lease
		wantRetry string
		wantAfter string
	}{
		{"daily window", 0, "tokens", "daily", 990, false, "false", "54000"},
		{"hourly window", 0, "tokens", "1h", 990, false, "false", "3600"},
		{"one-minute window", 0, "tokens", "1m", 990, false, "", "60"},
		{"requests per minute", 0, "requests", "1m", 1, false, "", "60"},
		{"concurrency lease", 0, "concurrent", "", 0, true, "", "5"},
		{"hourly window, max wait 2h", 2 * time.Hour, "tokens", "1h", 990, false, "", "3600"},
		{"one-minute window, max wait 30s", 30 * time.Second, "tokens", "1m", 990, false, "false", "60"},
		{"lease, negative max wait: never retry", -1, "concurrent", "", 0, true, "false", "5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: proxy.ModeReserve, clock: true, cfg: func(pc *proxy.Config) { pc.MaxClientWait = c.maxWait }}, okUpstream)
			max := int64(1000)
			if c.metric != "tokens" {
				max = 1
			}
			id := e.limit("", "", c.metric, c.window, max)
			ctx := context.Background()
			if c.used > 0 {
				if _, err := e.db.RecordSync(ctx, budget.Usage{Key: "team", Provider: "openai", Model: "gpt-4o", Input: c.used, At: testNow}); err != nil {
					t.Fatal(err)
				}
			}
			if c.lease {
				res, err := e.db.Reserve(ctx, budget.Request{Key: "team", Provider: "openai", Model: "gpt-4o", Estimate: budget.Estimate{Input: 1}}, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer e.db.Release(ctx, res.ID)
			}
			r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false))
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("status %d; want 429\n%s", r.status, r.body)
			}
			if got := r.header.Get("X-Should-Retry"); got != c.wantRetry {
				t.Errorf("x-should-retry %q; want %q", got, c.wantRetry)
			}
			if got := r.header.Get("Retry-After"); got != c.wantAfter {
				t.Errorf("retry-after %q; want %q", got, c.wantAfter)
			}
			if r.header.Get("Ratelimit-Policy") == "" || r.header.Get("X-Tokenbudget-Limit") != id {
				t.Errorf("rate-limit headers: policy %q limit %q; want them, naming %s", r.header.Get("Ratelimit-Policy"), r.header.Get("X-Tokenbudget-Limit"), id)
			}
			if eo := errorObject(t, r.body); eo["code"] != proxy.CodeBudgetExceeded {
				t.Errorf("code %v", eo["code"])
			}
		})
	}
}

// TestParkedShouldRetry: a parked provider's refusal follows the same
// rule: a wait over the max client wait is not to be retried.
func TestParkedShouldRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{clock: true}, okUpstream)
	ctx := context.Background()
	for _, c := range []struct {
		wait      time.Duration
		wantRetry string
	}{{30 * time.Second, ""}, {10 * time.Minute, "false"}} {
		if _, err := e.db.Park(ctx, "openai", budget.RateLimited, c.wait, nil); err != nil {
			t.Fatal(err)
		}
		r := e.do("/v1/chat/completions", chatBody("gpt-4o", 5, false))
		if r.status != http.StatusTooManyRequests || r.header.Get("X-Should-Retry") != c.wantRetry {
			t.Errorf("parked for %s: status %d x-should-retry %q; want 429 %q", c.wait, r.status, r.header.Get("X-Should-Retry"), c.wantRetry)
		}
	}
}

// TestMatchedLimitHeaders: an answer names the limit that bound it, the
// tightest applicable one (least room left as a share of the limit), with
// its scope and value: a model pattern or a default limit shows as such.
func TestMatchedLimitHeaders(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: mode, clock: true}, okUpstream)
			ctx := context.Background()
			r := e.do("/v1/chat/completions", chatBody("gpt-4o-2024-08-06", 50, false))
			if r.status != 200 || r.header.Get("X-Tokenbudget-Limit") != "" {
				t.Errorf("no limit: status %d, limit header %q; want 200 and none", r.status, r.header.Get("X-Tokenbudget-Limit"))
			}
			max := int64(100_000)
			def, _, err := e.db.SetLimit(ctx, budget.LimitSpec{Default: true, Window: "daily", Max: &max})
			if err != nil {
				t.Fatal(err)
			}
			r = e.do("/v1/chat/completions", chatBody("gpt-4o-2024-08-06", 50, false))
			if r.header.Get("X-Tokenbudget-Limit") != def.ID || r.header.Get("X-Tokenbudget-Limit-Scope") != "global" {
				t.Errorf("default limit: headers %q %q; want %s global", r.header.Get("X-Tokenbudget-Limit"), r.header.Get("X-Tokenbudget-Limit-Scope"), def.ID)
			}
			pat := e.limit("model", "gpt-4o*", "tokens", "1h", 1000)
			e.limit("provider", "openai", "tokens", "1h", 5000)
			r = e.do("/v1/chat/completions", chatBody("gpt-4o-2024-08-06", 50, false))
			if r.status != 200 || r.header.Get("X-Tokenbudget-Limit") != pat || r.header.Get("X-Tokenbudget-Limit-Scope") != "model=gpt-4o*" {
				t.Errorf("pattern: status %d headers %q %q; want 200 %s model=gpt-4o*", r.status,
					r.header.Get("X-Tokenbudget-Limit"), r.header.Get("X-Tokenbudget-Limit-Scope"), pat)
			}
			// Refused: the breach is named.
			r = e.do("/v1/chat/completions", chatBody("gpt-4o", 990, false))
			if r.status != http.StatusTooManyRequests || r.header.Get("X-Tokenbudget-Limit") != pat {
				t.Errorf("refusal: status %d limit %q; want 429 %s", r.status, r.header.Get("X-Tokenbudget-Limit"), pat)
			}
		})
	}
}

// TestRequireLimits: with RequireLimits, a key that no enabled limit
// applies to gets 403 no_budget and nothing reaches the upstream or is
// charged; a default limit, or one of its own for the request's model,
// lets it through. Both modes.
func TestRequireLimits(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: mode, cfg: func(pc *proxy.Config) { pc.RequireLimits = true }}, okUpstream)
			ctx := context.Background()
			for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
				body := chatBody("gpt-4o", 10, false)
				if path == "/v1/messages" {
					body = `{"model":"claude-x","max_tokens":10,"messages":[]}`
				}
				r := e.do(path, body)
				if r.status != http.StatusForbidden || r.header.Get("X-Should-Retry") != "false" || errorObject(t, r.body)["code"] != proxy.CodeNoBudget {
					t.Errorf("%s without limits: %d %q %s; want 403 no_budget, not retried", path, r.status, r.header.Get("X-Should-Retry"), r.body)
				}
			}
			// A limit for another model does not apply to gpt-4o; a disabled
			// one applies to nothing.
			e.limit("model", "claude-*", "tokens", "1h", 1000)
			off := false
			max := int64(1000)
			if _, _, err := e.db.SetLimit(ctx, budget.LimitSpec{Key: "team", Window: "daily", Max: &max, Enabled: &off}); err != nil {
				t.Fatal(err)
			}
			if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 10, false)); r.status != http.StatusForbidden {
				t.Errorf("only a claude limit: status %d; want 403", r.status)
			}
			if r := e.do("/v1/messages", `{"model":"claude-x","max_tokens":10,"messages":[]}`); r.status != 200 {
				t.Errorf("claude with a claude limit: status %d; want 200\n%s", r.status, r.body)
			}
			if n := e.hits.Load(); n != 1 {
				t.Errorf("upstream called %d times; want 1", n)
			}
			if _, _, err := e.db.SetLimit(ctx, budget.LimitSpec{Default: true, Window: "daily", Max: &max}); err != nil {
				t.Fatal(err)
			}
			if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 10, false)); r.status != 200 {
				t.Errorf("gpt-4o with a default limit: status %d; want 200\n%s", r.status, r.body)
			}
		})
	}
}

// A refusal names the limit whose reset decides when the request could
// pass: of an hourly limit with less room and a daily one that is full
// too, waiting for the hour does not help, so the message, reset_at,
// Retry-After and the x-ratelimit-* fields all speak of the daily one.
func TestRefusalNamesTheLimitItWaitsFor(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: mode, clock: true}, okUpstream)
			hourly := e.limit("", "", "tokens", "1h", 100)
			daily := e.limit("", "", "tokens", "daily", 10000)
			ctx := context.Background()
			// hourly: 90 of 100; daily: 9980 of 10000. The estimate of 56
			// leaves hourly 46 short and daily 36: the ranking's breach is
			// the hourly limit, but the request waits for midnight.
			if _, err := e.db.RecordSync(ctx, budget.Usage{Key: "team", Provider: "openai", Model: "gpt-4o", Input: 9890, At: testNow.Add(-2 * time.Hour)},
				budget.Usage{Key: "team", Provider: "openai", Model: "gpt-4o", Input: 90, At: testNow}); err != nil {
				t.Fatal(err)
			}
			d, err := e.db.CheckAt(ctx, budget.Request{Key: "team", Provider: "openai", Model: "gpt-4o", Estimate: budget.Estimate{Input: 6, Output: 50}}, testNow)
			if err != nil || d.Breach == nil || d.Breach.Limit.ID != hourly {
				t.Fatalf("Check = %+v, %v; want the contract's breach, the hourly limit %s", d.Breach, err, hourly)
			}
			r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false))
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("status %d; want 429\n%s", r.status, r.body)
			}
			for k, want := range map[string]string{
				"Retry-After":                  "54000",
				"X-Ratelimit-Limit-Tokens":     "10000",
				"X-Ratelimit-Remaining-Tokens": "20",
				"X-Ratelimit-Reset-Tokens":     "15h0m0s",
				"X-Tokenbudget-Limit":          daily,
			} {
				if got := r.header.Get(k); got != want {
					t.Errorf("%s: got %q; want %q", k, got, want)
				}
			}
			eo := errorObject(t, r.body)
			msg, _ := eo["message"].(string)
			if !strings.Contains(msg, daily) || strings.Contains(msg, hourly) || !strings.Contains(msg, "resets at 2026-03-03T00:00:00Z (in 15h0m0s)") {
				t.Errorf("message %q; want it to name the daily limit %s and its reset", msg, daily)
			}
			lim, _ := eo["limit"].(map[string]any)
			if lim["id"] != daily || lim["reset_at"] != "2026-03-03T00:00:00Z" || lim["retry_after_seconds"] != 54000.0 || lim["used"] != 9980.0 {
				t.Errorf("error.limit: got %v; want the daily limit's", lim)
			}
		})
	}
}

// A requests-per-minute refusal speaks of requests, not tokens.
func TestRequestLimitRefusalMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mode: proxy.ModeReserve, clock: true}, okUpstream)
	id := e.limit("", "", "requests", "1m", 1)
	if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 10, false)); r.status != http.StatusOK {
		t.Fatalf("first request: %d %s", r.status, r.body)
	}
	r := e.do("/v1/chat/completions", chatBody("gpt-4o", 10, false))
	msg, _ := errorObject(t, r.body)["message"].(string)
	if r.status != http.StatusTooManyRequests || !strings.HasPrefix(msg, "request limit exceeded: key team limit "+id) || strings.Contains(msg, "token") {
		t.Fatalf("requests refusal: %d %q; want 429 \"request limit exceeded: key team limit %s ...\" without tokens", r.status, msg, id)
	}
}
