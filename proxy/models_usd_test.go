package proxy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// Every spelling of a model counts against its limit through the proxy.
func TestProxyNormalisesModels(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: mode}, okUpstream)
			id := e.limit("model", "gpt-4o", "requests", "1h", 1000)
			for _, m := range []string{"gpt-4o-2024-08-06", "GPT-4o", "openai/gpt-4o", "gpt-4o-mini"} {
				if r := e.do("/v1/chat/completions", chatBody(m, 10, false)); r.status != 200 {
					t.Fatalf("%s: status %d\n%s", m, r.status, r.body)
				}
			}
			if used, _ := e.used(id); used != 3 {
				t.Fatalf("gpt-4o requests counted %d; want 3 (not gpt-4o-mini)", used)
			}
		})
	}
}

// A dollar budget with no price for the requested model is a gateway
// configuration error, not a rate limit: 403 unpriced_model in the API's
// permission-error shape (an SDK's PermissionDeniedError, never retried),
// x-should-retry: false, before any upstream call.
func TestProxyUnpricedModel(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: mode}, okUpstream)
			ctx := context.Background()
			max := int64(1_000_000)
			if _, _, err := e.db.SetLimit(ctx, budget.LimitSpec{Key: "team", Metric: "usd", Window: "monthly", Max: &max}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.db.SetPrices(ctx, budget.PriceSpec{Provider: "openai", Model: "gpt-4o", Input: "2.5", Output: "10"}); err != nil {
				t.Fatal(err)
			}
			r := e.do("/v1/chat/completions", chatBody("o9-mystery", 10, false))
			eo := errorObject(t, r.body)
			if r.status != http.StatusForbidden || r.header.Get("X-Should-Retry") != "false" || eo["code"] != proxy.CodeUnpriced ||
				eo["type"] != "invalid_request_error" || r.header.Get("Retry-After") != "" {
				t.Fatalf("unpriced model: %d %q %s; want 403 invalid_request_error unpriced_model, not retried, no Retry-After", r.status, r.header.Get("X-Should-Retry"), r.body)
			}
			// Anthropic's shape: permission_error.
			r = e.send("/v1/messages", `{"model":"claude-mystery","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, "X-Api-Key", e.secret)
			e.wait(1)
			v := jsonBody(t, r.body)
			ao, _ := v["error"].(map[string]any)
			if r.status != http.StatusForbidden || r.header.Get("X-Should-Retry") != "false" || ao["type"] != "permission_error" || ao["code"] != proxy.CodeUnpriced {
				t.Fatalf("unpriced model on /v1/messages: %d %q %s; want 403 permission_error unpriced_model", r.status, r.header.Get("X-Should-Retry"), r.body)
			}
			if n := e.hits.Load(); n != 0 {
				t.Fatalf("upstream called %d times; want 0", n)
			}
			if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 10, false)); r.status != 200 {
				t.Fatalf("priced model: status %d\n%s", r.status, r.body)
			}
		})
	}
}

// A dollar breach speaks dollars and sends no token rate-limit headers.
func TestProxyDollarBreach(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mode: proxy.ModeReserve}, okUpstream)
	ctx := context.Background()
	max := int64(100) // $0.0001
	if _, _, err := e.db.SetLimit(ctx, budget.LimitSpec{Key: "team", Metric: "usd", Window: "monthly", Max: &max}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.SetPrices(ctx, budget.PriceSpec{Provider: "openai", Model: "gpt-4o", Input: "2.5", Output: "10"}); err != nil {
		t.Fatal(err)
	}
	r := e.do("/v1/chat/completions", chatBody("gpt-4o", 100, false)) // 100 output tokens at $10/M: $0.001
	msg, _ := errorObject(t, r.body)["message"].(string)
	if r.status != http.StatusTooManyRequests || !strings.Contains(msg, "dollar budget exceeded") || !strings.Contains(msg, "$0.0001") {
		t.Fatalf("dollar breach: %d %s; want 429 in dollars", r.status, r.body)
	}
	if h := r.header.Get("X-Ratelimit-Limit-Tokens"); h != "" {
		t.Errorf("dollar breach sent X-Ratelimit-Limit-Tokens %q; want none", h)
	}
}

// A request without max_tokens is admitted with the largest output a
// dollar limit leaves room for: a per-user $0.10 daily limit on gpt-4o
// ($2.50/$10 per million) lets alice spend the whole $0.10, each request
// capped at what is left, rather than refusing her once less than the
// default max output ($0.04) is left.
func TestProxyCapFitsDollarLimit(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			caps := make(chan float64, 16)
			upstream := func(w http.ResponseWriter, r *http.Request) {
				var body map[string]any
				json.NewDecoder(r.Body).Decode(&body)
				c, _ := body["max_completion_tokens"].(float64)
				caps <- c
				writeJSON(w, http.StatusOK, chatUsageJSON(1000, 2000)) // $0.0225
			}
			e := newEnv(t, envOptions{mode: mode}, upstream)
			ctx := context.Background()
			max := int64(100_000) // $0.10
			l, _, err := e.db.SetLimit(ctx, budget.LimitSpec{Key: "team", Scope: "user", ScopeValue: "*", Metric: "usd", Window: "daily", Max: &max})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.db.SetPrices(ctx, budget.PriceSpec{Provider: "openai", Model: "gpt-4o", Input: "2.5", Output: "10"}); err != nil {
				t.Fatal(err)
			}
			body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}` // 5 input tokens: 13 micro-dollars
			// Used 0, 22500, 45000, 67500, 90000: the room left less the
			// input, at $10 per million output tokens.
			for i, want := range []float64{4096, 4096, 4096, 3248, 998} {
				r := e.do("/v1/chat/completions", body, proxy.UserHeader, "alice")
				if r.status != http.StatusOK {
					t.Fatalf("request %d: %d %s; want 200 with a cap of %v", i+1, r.status, r.body, want)
				}
				if got := <-caps; got != want {
					t.Fatalf("request %d sent max_completion_tokens %v; want %v", i+1, got, want)
				}
			}
			r := e.do("/v1/chat/completions", body, proxy.UserHeader, "alice")
			if r.status != http.StatusTooManyRequests || !strings.Contains(r.header.Get("X-Tokenbudget-Limit"), l.ID) {
				t.Fatalf("after $0.1125 used: %d %s; want 429 by %s", r.status, r.body, l.ID)
			}
		})
	}
}

// A dollar refusal states the priced estimate (message and JSON), and one
// whose estimate alone is over the limit says so, with the max_tokens that
// would fit, rather than blaming another limit that does not refuse it.
func TestProxyDollarRefusalEstimate(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: mode}, okUpstream)
			ctx := context.Background()
			max := int64(100) // $0.0001
			l, _, err := e.db.SetLimit(ctx, budget.LimitSpec{Key: "team", Metric: "usd", Window: "monthly", Max: &max})
			if err != nil {
				t.Fatal(err)
			}
			e.limit("", "", "tokens", "1h", 1_000_000) // a roomy token limit: it refuses nothing
			if _, err := e.db.SetPrices(ctx, budget.PriceSpec{Provider: "openai", Model: "gpt-4o", Input: "2.5", Output: "10"}); err != nil {
				t.Fatal(err)
			}
			// 6 input at $2.50/M + 100 output at $10/M: $0.001015; 8 output
			// tokens ($0.000095) are the most that fit $0.0001.
			r := e.do("/v1/chat/completions", chatBody("gpt-4o", 100, false))
			eo := errorObject(t, r.body)
			msg, _ := eo["message"].(string)
			if r.status != http.StatusTooManyRequests || r.header.Get("X-Should-Retry") != "false" {
				t.Fatalf("status %d x-should-retry %q; want 429 false\n%s", r.status, r.header.Get("X-Should-Retry"), r.body)
			}
			for _, want := range []string{"needs about $0.001015", "more than the limit itself", "max_tokens", "at most 8 output tokens"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q lacks %q", msg, want)
				}
			}
			if strings.Contains(msg, "another limit") {
				t.Errorf("message %q blames another limit; none refuses", msg)
			}
			if lim, _ := eo["limit"].(map[string]any); lim["id"] != l.ID || lim["estimate"] != 1015.0 {
				t.Errorf("error.limit = %v; want %s with estimate 1015 micro-dollars", lim, l.ID)
			}
		})
	}
}

// Dollar limits stay out of the token rate-limit fields: RateLimit-Policy
// and RateLimit carry no qu="tokens" entry in micro-dollars, and the
// x-ratelimit-*-tokens fields are the token limit's even when the dollar
// limit has less room, on a success and on a dollar refusal.
func TestProxyRateLimitHeadersLeaveOutDollars(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: mode}, okUpstream)
			ctx := context.Background()
			max := int64(1100) // $0.0011: one request of $0.000515 fits, with room for a second
			usd, _, err := e.db.SetLimit(ctx, budget.LimitSpec{Key: "team", Metric: "usd", Window: "monthly", Max: &max})
			if err != nil {
				t.Fatal(err)
			}
			tok := e.limit("", "", "tokens", "1h", 1_000_000)
			if _, err := e.db.SetPrices(ctx, budget.PriceSpec{Provider: "openai", Model: "gpt-4o", Input: "2.5", Output: "10"}); err != nil {
				t.Fatal(err)
			}
			check := func(what string, r response) {
				t.Helper()
				for _, k := range []string{"Ratelimit-Policy", "Ratelimit"} {
					if v := r.header.Get(k); strings.Contains(v, usd.ID) || !strings.Contains(v, tok) {
						t.Errorf("%s: %s %q; want the token limit %s only, not the dollar limit %s", what, k, v, tok, usd.ID)
					}
				}
				if v := r.header.Get("X-Ratelimit-Limit-Tokens"); v != "" && v != "1000000" {
					t.Errorf("%s: X-Ratelimit-Limit-Tokens %q; want the token limit's 1000000 (or none)", what, v)
				}
			}
			r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false)) // $0.000515
			if r.status != http.StatusOK || r.header.Get("X-Ratelimit-Limit-Tokens") != "1000000" {
				t.Fatalf("success: %d, X-Ratelimit-Limit-Tokens %q; want 200 with the token limit's\n%s", r.status, r.header.Get("X-Ratelimit-Limit-Tokens"), r.body)
			}
			check("success", r)
			r = e.do("/v1/chat/completions", chatBody("gpt-4o", 500, false)) // $0.005015
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("refusal: %d; want 429\n%s", r.status, r.body)
			}
			check("refusal", r)
		})
	}
}

// TestProxyPricesServiceTier: a request asking for the flex tier is
// estimated at the flex row and charged at the tier the response says it
// was served at (flex, or default when the provider fell back); a Gemini
// prompt above a long-context row's threshold is charged at that row.
func TestProxyPricesServiceTier(t *testing.T) {
	t.Parallel()
	var reply string
	e := newEnv(t, envOptions{mode: proxy.ModeReserve}, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, reply) })
	ctx := context.Background()
	max := int64(100 * budget.MicrosPerUSD)
	l, _, err := e.db.SetLimit(ctx, budget.LimitSpec{Key: "team", Metric: "usd", Window: "monthly", Max: &max})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.SetPrices(ctx,
		budget.PriceSpec{Provider: "openai", Model: "o3", Input: "2", Output: "8"},
		budget.PriceSpec{Provider: "openai", Model: "o3", Tier: "flex", Input: "1", Output: "4"},
		budget.PriceSpec{Provider: "gemini", Model: "gemini-2.5-pro", Input: "1.25", Output: "10"},
		budget.PriceSpec{Provider: "gemini", Model: "gemini-2.5-pro", AboveInput: 200_000, Input: "2.50", Output: "15"},
	); err != nil {
		t.Fatal(err)
	}
	flex := `{"model":"o3","service_tier":"flex","max_completion_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`
	var spent int64
	for _, c := range []struct {
		name, path, body, reply string
		cost                    int64
	}{
		// 100k in at $1, 10k out at $4 (flex); the same at $2 and $8 (default).
		{"flex", "/v1/chat/completions", flex, `{"model":"o3","service_tier":"flex","usage":{"prompt_tokens":100000,"completion_tokens":10000}}`, 140_000},
		{"fell back to default", "/v1/chat/completions", flex, `{"model":"o3","service_tier":"default","usage":{"prompt_tokens":100000,"completion_tokens":10000}}`, 280_000},
		{"long context", geminiModelPath[:len("/v1beta/models/")] + "gemini-2.5-pro:generateContent", geminiBody("hi", `{"maxOutputTokens":100}`),
			`{"candidates":[{"content":{"parts":[{"text":"ok"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":300000,"candidatesTokenCount":1000}}`,
			750_000 + 15_000},
	} {
		reply = c.reply
		r := e.do(c.path, c.body)
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", c.name, r.status, r.body)
		}
		used, _ := e.used(l.ID)
		if used-spent != c.cost {
			t.Errorf("%s: charged %d micro-dollars; want %d", c.name, used-spent, c.cost)
		}
		spent = used
	}
	// The flex estimate: 1000 output at $4/M plus the prompt at $1/M.
	ri, _ := proxy.ParseRequest(proxy.OpenAIChat, []byte(flex))
	if ri.ServiceTier != "flex" {
		t.Errorf("ServiceTier %q; want flex", ri.ServiceTier)
	}
}
