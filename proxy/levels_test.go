package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// TestRefusalNamesLevel: a refusal says whose limit refused, in the
// message ("team eng limit lim_...") and in the limit object (level and
// owner, null for a default), on both routes' shapes and in both modes;
// the existing fields and headers stay. Key "team" is in team eng of org
// acme, and each case has one limit, with 70 of 100 used.
func TestRefusalNamesLevel(t *testing.T) {
	t.Parallel()
	cases := []struct {
		level   string
		spec    budget.LimitSpec
		msg     string // before the id
		suffix  string // after the id
		owner   any    // nil: null
		wantKey string
	}{
		{"key", budget.LimitSpec{Key: "team"}, "key team limit ", "", "team", "team"},
		{"team", budget.LimitSpec{Team: "eng"}, "team eng limit ", "", "eng", ""},
		{"org", budget.LimitSpec{Org: "acme"}, "org acme limit ", "", "acme", ""},
		{"default", budget.LimitSpec{Default: true}, "default limit ", " for key team", nil, ""},
	}
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		for _, c := range cases {
			t.Run(string(mode)+"/"+c.level, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, envOptions{mode: mode, clock: true}, okUpstream)
				ctx := context.Background()
				if _, err := e.db.SetTeam(ctx, "eng", "acme"); err != nil {
					t.Fatal(err)
				}
				if err := e.db.SetKeyTeam(ctx, "team", "eng"); err != nil {
					t.Fatal(err)
				}
				max := int64(100)
				spec := c.spec
				spec.Window, spec.Max = "1h", &max
				l, _, err := e.db.SetLimit(ctx, spec)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := e.db.RecordSync(ctx, budget.Usage{Key: "team", Provider: "openai", Model: "gpt-4o", Input: 70, At: testNow}); err != nil {
					t.Fatal(err)
				}
				for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
					body := chatBody("gpt-4o", 50, false)
					if path == "/v1/messages" {
						body = `{"model":"gpt-4o","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`
					}
					r := e.do(path, body)
					if r.status != http.StatusTooManyRequests {
						t.Fatalf("%s: status %d %s; want 429", path, r.status, r.body)
					}
					if got := r.header.Get("X-Tokenbudget-Limit"); got != l.ID {
						t.Errorf("%s: X-Tokenbudget-Limit %q; want %q", path, got, l.ID)
					}
					eo := errorObject(t, r.body)
					msg, _ := eo["message"].(string)
					if want := c.msg + l.ID + c.suffix + " (scope global, tokens per 1h) used 70 of limit 100"; !strings.Contains(msg, want) {
						t.Errorf("%s: message %q; want it to contain %q", path, msg, want)
					}
					lim, _ := eo["limit"].(map[string]any)
					if lim["level"] != c.level || lim["owner"] != c.owner || lim["key"] != c.wantKey || lim["id"] != l.ID ||
						lim["limit"] != 100.0 || lim["used"] != 70.0 || lim["retryable"] != true || lim["reset_at"] != "2026-03-02T10:00:00Z" {
						t.Errorf("%s: limit object %v; want level %s, owner %v, key %q", path, lim, c.level, c.owner, c.wantKey)
					}
					if _, ok := lim["owner"]; !ok {
						t.Errorf("%s: the limit object has no owner (want null for a default)", path)
					}
				}
			})
		}
	}
}

// TestOnceLimit: a limit that never resets (window once, a prepaid
// balance) is refused for good: x-should-retry false, and nothing that
// promises a reset (Retry-After, x-ratelimit-reset-tokens, RateLimit's t,
// RateLimit-Policy's w, reset_at); a raise tops it up, and the headers
// then show the limit in force, raise included.
func TestOnceLimit(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: mode, clock: true}, okUpstream)
			ctx := context.Background()
			id := e.limit("", "", "tokens", "once", 100)
			if _, err := e.db.RecordSync(ctx, budget.Usage{Key: "team", Provider: "openai", Model: "gpt-4o", Input: 70, At: testNow}); err != nil {
				t.Fatal(err)
			}
			r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false))
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("status %d %s; want 429", r.status, r.body)
			}
			for k, want := range map[string]string{
				"Retry-After":                  "",
				"X-Should-Retry":               "false",
				"X-Ratelimit-Limit-Tokens":     "100",
				"X-Ratelimit-Remaining-Tokens": "30",
				"X-Ratelimit-Reset-Tokens":     "",
				"Ratelimit-Policy":             fmt.Sprintf(`%q;q=100;qu="tokens"`, id),
				"Ratelimit":                    fmt.Sprintf(`%q;r=30`, id),
				"X-Tokenbudget-Limit":          id,
			} {
				if got := r.header.Get(k); got != want {
					t.Errorf("%s: got %q; want %q", k, got, want)
				}
			}
			eo := errorObject(t, r.body)
			msg, _ := eo["message"].(string)
			for _, want := range []string{"key team limit " + id, "tokens, never resets", "ask the gateway's operator to raise it"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q lacks %q", msg, want)
				}
			}
			lim, _ := eo["limit"].(map[string]any)
			if lim["window"] != "once" || lim["reset_at"] != nil || lim["retryable"] != false || lim["retry_after_seconds"] != 0.0 {
				t.Errorf("limit object %v; want window once, reset_at null, not retryable, no wait", lim)
			}

			// Waiting does not help; a raise does.
			e.advance(48 * time.Hour)
			if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false)); r.status != http.StatusTooManyRequests {
				t.Errorf("two days later: status %d; want 429", r.status)
			}
			if _, _, err := e.db.RaiseLimit(ctx, id, 100, time.Time{}); err != nil {
				t.Fatal(err)
			}
			r = e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false))
			if r.status != http.StatusOK {
				t.Fatalf("after a raise of 100: status %d %s; want 200", r.status, r.body)
			}
			// 200 in force; 70 used, and this request's 56 held (reserve) or
			// estimated (check).
			for k, want := range map[string]string{
				"X-Ratelimit-Limit-Tokens":     "200",
				"X-Ratelimit-Remaining-Tokens": "74",
				"X-Ratelimit-Reset-Tokens":     "",
				"Ratelimit-Policy":             fmt.Sprintf(`%q;q=200;qu="tokens"`, id),
			} {
				if got := r.header.Get(k); got != want {
					t.Errorf("after the raise: %s: got %q; want %q", k, got, want)
				}
			}
		})
	}
}
