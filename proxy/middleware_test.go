package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

func okUpstream(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	writeJSON(w, http.StatusOK, chatUsageJSON(10, 20))
}

// TestRefusal: a request over the budget gets 429 with the rate-limit
// headers clients read and an OpenAI-shaped body naming the limit, scope,
// used, limit and reset; nothing reaches the upstream.
func TestRefusal(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: mode, clock: true}, okUpstream)
			id := e.limit("", "", "tokens", "1h", 100)
			if _, err := e.db.RecordSync(context.Background(), budget.Usage{Key: "team", Provider: "openai", Model: "gpt-4o",
				Input: 60, Output: 10, At: testNow}); err != nil {
				t.Fatal(err)
			}
			// estimate: ceil(len("user")+len("hi") / 4) + 4 = 6 input + 50 output = 56 > 30 left.
			r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false))
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("status %d; want 429\n%s", r.status, r.body)
			}
			h := r.header
			for k, want := range map[string]string{
				"Retry-After":                  "3600",
				"X-Ratelimit-Limit-Tokens":     "100",
				"X-Ratelimit-Remaining-Tokens": "30",
				"X-Ratelimit-Reset-Tokens":     "1h0m0s",
				"Ratelimit-Policy":             fmt.Sprintf(`%q;q=100;qu="tokens";w=3600`, id),
				"Ratelimit":                    fmt.Sprintf(`%q;r=30;t=3600`, id),
				"X-Should-Retry":               "false", // an hour is longer than the default max client wait
				"X-Tokenbudget-Limit":          id,
				"X-Tokenbudget-Limit-Scope":    "global",
				"Content-Type":                 "application/json",
			} {
				if got := h.Get(k); got != want {
					t.Errorf("%s: got %q; want %q", k, got, want)
				}
			}
			eo := errorObject(t, r.body)
			if eo["type"] != "rate_limit_error" || eo["code"] != "token_budget_exceeded" {
				t.Errorf("error type/code: got %v/%v", eo["type"], eo["code"])
			}
			msg, _ := eo["message"].(string)
			for _, want := range []string{id, "key team", "scope global", "used 70", "of limit 100", "needs about 56",
				"resets at 2026-03-02T10:00:00Z"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q lacks %q", msg, want)
				}
			}
			lim, _ := eo["limit"].(map[string]any)
			if lim["id"] != id || lim["scope"] != "global" || lim["used"] != 70.0 || lim["limit"] != 100.0 ||
				lim["reset_at"] != "2026-03-02T10:00:00Z" || lim["retry_after_seconds"] != 3600.0 || lim["retryable"] != true {
				t.Errorf("error.limit: got %v", lim)
			}
			// Anthropic routes answer in Anthropic's shape; a request that can
			// never fit says so.
			r = e.send("/v1/messages", `{"model":"claude","max_tokens":500,"messages":[{"role":"user","content":"hi"}]}`,
				"X-Api-Key", e.secret)
			e.wait(1)
			if r.status != http.StatusTooManyRequests || r.header.Get("X-Should-Retry") != "false" {
				t.Errorf("never-fitting request: status %d x-should-retry %q; want 429 false", r.status, r.header.Get("X-Should-Retry"))
			}
			v := jsonBody(t, r.body)
			eo, _ = v["error"].(map[string]any)
			if v["type"] != "error" || eo["type"] != "rate_limit_error" || !strings.Contains(fmt.Sprint(eo["message"]), "more than the limit itself") {
				t.Errorf("anthropic refusal body: %s", r.body)
			}
			if n := e.hits.Load(); n != 0 {
				t.Errorf("upstream called %d times; want 0", n)
			}
			if used, reserved := e.used(id); used != 70 || reserved != 0 {
				t.Errorf("after refusals: used %d reserved %d; want 70 0", used, reserved)
			}
		})
	}
}

// TestSuccessHeaders: a successful response carries the remaining-tokens
// headers: the room left with this request's estimate held.
func TestSuccessHeaders(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		e := newEnv(t, envOptions{mode: mode, clock: true}, okUpstream)
		id := e.limit("", "", "tokens", "1h", 1000)
		rq := e.limit("model", "gpt-4o", "requests", "1m", 10)
		r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false))
		if r.status != http.StatusOK {
			t.Fatalf("%s: status %d\n%s", mode, r.status, r.body)
		}
		for k, want := range map[string]string{
			"X-Ratelimit-Limit-Tokens":       "1000",
			"X-Ratelimit-Remaining-Tokens":   "944",
			"X-Ratelimit-Reset-Tokens":       "1h0m0s",
			"X-Ratelimit-Limit-Requests":     "10",
			"X-Ratelimit-Remaining-Requests": "9",
			"X-Ratelimit-Reset-Requests":     "1m0s",
			"Ratelimit":                      fmt.Sprintf(`%q;r=944;t=3600, %q;r=9;t=60`, id, rq),
		} {
			if got := r.header.Get(k); got != want {
				t.Errorf("%s: %s: got %q; want %q", mode, k, got, want)
			}
		}
		if r.header.Get("X-Tokenbudget-Request-Id") == "" {
			t.Errorf("%s: no X-Tokenbudget-Request-Id", mode)
		}
		if used, _ := e.used(id); used != 30 {
			t.Errorf("%s: used %d; want 30", mode, used)
		}
	}
}

// TestKeys: no, unknown or revoked key: 401 and no upstream call; the
// gateway secret never reaches the upstream, which gets its own credential
// in the header of the route's family; the log never shows the secret.
func TestKeys(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var dumps []string
	e := newEnv(t, envOptions{}, func(w http.ResponseWriter, r *http.Request) {
		d, _ := httputil.DumpRequest(r, true)
		mu.Lock()
		dumps = append(dumps, string(d))
		mu.Unlock()
		if r.URL.Path == "/v1/messages" {
			if r.Header.Get("X-Api-Key") != upstreamAnthropicKey || r.Header.Get("Authorization") != "" {
				t.Errorf("anthropic route: upstream got x-api-key %q authorization %q", r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
			}
		} else if r.Header.Get("Authorization") != "Bearer "+upstreamOpenAIKey || r.Header.Get("X-Api-Key") != "" {
			t.Errorf("openai route: upstream got authorization %q x-api-key %q", r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
		}
		if r.Header.Get("Accept-Encoding") != "" && r.Header.Get("Accept-Encoding") != "gzip" {
			t.Errorf("upstream got the client's Accept-Encoding %q", r.Header.Get("Accept-Encoding"))
		}
		okUpstream(w, r)
	})
	chat := chatBody("gpt-4o", 10, false)
	for _, c := range []struct {
		name string
		hdr  []string
	}{
		{"no key", nil},
		{"unknown bearer", []string{"Authorization", "Bearer tbk_unknown"}},
		{"unknown x-api-key", []string{"X-Api-Key", "tbk_unknown"}},
		{"not bearer", []string{"Authorization", "Basic " + e.secret}},
	} {
		r := e.send("/v1/chat/completions", chat, c.hdr...)
		e.wait(1)
		if r.status != http.StatusUnauthorized || errorObject(t, r.body)["code"] != "invalid_api_key" {
			t.Errorf("%s: got %d %s; want 401 invalid_api_key", c.name, r.status, r.body)
		}
	}
	if n := e.hits.Load(); n != 0 {
		t.Fatalf("upstream called %d times for bad keys", n)
	}
	ok := func(what, path, body string, hdr ...string) {
		t.Helper()
		r := e.send(path, body, append(hdr, "Accept-Encoding", "br")...)
		e.wait(1)
		if r.status != http.StatusOK {
			t.Errorf("%s: status %d %s", what, r.status, r.body)
		}
	}
	ok("bearer", "/v1/chat/completions", chat, "Authorization", "Bearer "+e.secret)
	ok("x-api-key on an openai route", "/v1/chat/completions", chat, "X-Api-Key", e.secret)
	ok("x-api-key", "/v1/messages", `{"model":"c","max_tokens":10,"messages":[]}`, "X-Api-Key", e.secret, "Anthropic-Version", "2023-06-01")
	ok("both", "/v1/messages", `{"model":"c","max_tokens":10,"messages":[]}`, "X-Api-Key", e.secret, "Authorization", "Bearer "+e.secret)
	mu.Lock()
	for _, d := range dumps {
		if strings.Contains(d, e.secret) {
			t.Errorf("the gateway secret reached the upstream:\n%s", d)
		}
	}
	mu.Unlock()
	if strings.Contains(e.logs.String(), e.secret) {
		t.Errorf("the gateway secret is in the log")
	}

	// Revoked: refused within the key cache's TTL (its clock is real here,
	// so a fresh middleware stands in for the TTL passing).
	if _, err := e.db.KeyStore().RevokeKey(context.Background(), "team", testNow); err != nil {
		t.Fatal(err)
	}
	keys := proxy.NewKeys(e.db.KeyStore())
	if _, err := keys.Lookup(context.Background(), e.secret); err != proxy.ErrUnknownKey {
		t.Errorf("revoked key: lookup got %v; want ErrUnknownKey", err)
	}
}

// TestKeyCacheTTL: a lookup is trusted for the TTL; a revocation takes
// effect once it has passed.
func TestKeyCacheTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{}, okUpstream)
	now := testNow
	keys := proxy.NewKeys(e.db.KeyStore())
	keys.Now = func() time.Time { return now }
	keys.TTL = 5 * time.Second
	ctx := context.Background()
	if name, err := keys.Lookup(ctx, e.secret); name != "team" || err != nil {
		t.Fatalf("lookup: got %q %v", name, err)
	}
	if _, err := e.db.KeyStore().RevokeKey(ctx, "team", now); err != nil {
		t.Fatal(err)
	}
	now = now.Add(4 * time.Second)
	if name, err := keys.Lookup(ctx, e.secret); name != "team" || err != nil {
		t.Errorf("within the TTL: got %q %v; want the cached answer", name, err)
	}
	now = now.Add(time.Second)
	if _, err := keys.Lookup(ctx, e.secret); err != proxy.ErrUnknownKey {
		t.Errorf("after the TTL: got %v; want ErrUnknownKey", err)
	}
	if _, err := keys.Lookup(ctx, ""); err != proxy.ErrUnknownKey {
		t.Errorf("empty secret: got %v", err)
	}
}

// TestParking: an upstream 429 parks the provider with its retry-after;
// the next request is refused (provider_parked) without reaching the
// upstream. 529 and repeated 503 park it as overloaded (503 to clients);
// 401 as auth_missing, and the client is told the gateway's credential is
// the problem, not its key.
func TestParking(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		status     int
		header     []string
		repeat     int // upstream answers before the park
		wantKind   budget.ParkKind
		wantRetry  time.Duration
		wantFirst  int // what the client gets from the upstream's answer
		wantParked int // what the next request gets
	}{
		{"429 retry-after", 429, []string{"Retry-After", "30"}, 1, budget.RateLimited, 30 * time.Second, 429, 429},
		{"429 retry-after-ms", 429, []string{"Retry-After-Ms", "1500", "Retry-After", "9"}, 1, budget.RateLimited, 1500 * time.Millisecond, 429, 429},
		{"429 no retry-after", 429, nil, 1, budget.RateLimited, budget.DefaultParkRetryAfter, 429, 429},
		{"529", 529, []string{"Retry-After", "20"}, 1, budget.Overloaded, 20 * time.Second, 529, 503},
		{"503 thrice", 503, nil, 3, budget.Overloaded, budget.DefaultParkRetryAfter, 503, 503},
		{"401", 401, nil, 1, budget.AuthMissing, budget.DefaultParkRetryAfter, 502, 429},
		{"403", 403, nil, 1, budget.AuthMissing, budget.DefaultParkRetryAfter, 502, 429},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{clock: true}, func(w http.ResponseWriter, r *http.Request) {
				for i := 0; i+1 < len(c.header); i += 2 {
					w.Header().Set(c.header[i], c.header[i+1])
				}
				writeJSON(w, c.status, `{"error":{"message":"upstream says no: sk-proj-****abcd","type":"x"}}`)
			})
			id := e.limit("", "", "tokens", "1h", 1000)
			for i := range c.repeat {
				r := e.do("/v1/chat/completions", chatBody("gpt-4o", 10, false))
				if r.status != c.wantFirst {
					t.Fatalf("answer %d: status %d; want %d\n%s", i+1, r.status, c.wantFirst, r.body)
				}
				if c.wantFirst == 502 && (strings.Contains(r.body, "sk-proj") || errorObject(t, r.body)["code"] != "upstream_auth_failed") {
					t.Errorf("upstream auth failure passed to the client: %s", r.body)
				}
				if i < c.repeat-1 {
					if _, err := e.db.ProviderState(context.Background(), "openai"); err == nil {
						t.Fatalf("parked after %d answers; want %d", i+1, c.repeat)
					}
				}
			}
			p, err := e.db.ProviderState(context.Background(), "openai")
			if err != nil {
				t.Fatalf("provider not parked: %v", err)
			}
			if p.Kind != c.wantKind || p.RetryAfter != c.wantRetry {
				t.Errorf("parked %s for %s; want %s for %s", p.Kind, p.RetryAfter, c.wantKind, c.wantRetry)
			}
			hits := e.hits.Load()
			r := e.do("/v1/chat/completions", chatBody("gpt-4o", 10, false))
			if r.status != c.wantParked || errorObject(t, r.body)["code"] != "provider_parked" {
				t.Errorf("next request: %d %s; want %d provider_parked", r.status, r.body, c.wantParked)
			}
			if want := fmt.Sprint(int64((c.wantRetry + time.Second - 1) / time.Second)); r.header.Get("Retry-After") != want {
				t.Errorf("next request: Retry-After %q; want %q", r.header.Get("Retry-After"), want)
			}
			if e.hits.Load() != hits {
				t.Errorf("the refused request reached the upstream")
			}
			// Anthropic is another provider: not parked.
			if r := e.send("/v1/messages", `{"model":"c","max_tokens":5,"messages":[]}`, "X-Api-Key", e.secret); r.status == 429 &&
				strings.Contains(r.body, "provider_parked") {
				t.Errorf("anthropic was refused as parked")
			}
			e.wait(1)
			if used, _ := e.used(id); used != 0 {
				t.Errorf("failed requests were charged: used %d", used)
			}
			if used, reserved := e.settled(id); used != 0 || reserved != 0 {
				t.Errorf("failed requests were charged: used %d reserved %d once leases idled", used, reserved)
			}
		})
	}
}

// TestUnparkOnSuccess: past resume-at a request goes through; its success
// unparks the provider the proxy had parked.
func TestUnparkOnSuccess(t *testing.T) {
	t.Parallel()
	var fail sync.Once
	e := newEnv(t, envOptions{clock: true}, func(w http.ResponseWriter, r *http.Request) {
		failed := false
		fail.Do(func() {
			failed = true
			w.Header().Set("Retry-After", "2")
			writeJSON(w, 429, `{}`)
		})
		if !failed {
			okUpstream(w, r)
		}
	})
	if r := e.do("/v1/chat/completions", chatBody("m", 5, false)); r.status != 429 {
		t.Fatalf("status %d", r.status)
	}
	if _, err := e.db.ProviderState(context.Background(), "openai"); err != nil {
		t.Fatalf("not parked: %v", err)
	}
	if r := e.do("/v1/chat/completions", chatBody("m", 5, false)); r.status != 429 || !strings.Contains(r.body, "provider_parked") {
		t.Fatalf("before resume-at: %d %s", r.status, r.body)
	}
	e.advance(2 * time.Second)
	if r := e.do("/v1/chat/completions", chatBody("m", 5, false)); r.status != http.StatusOK {
		t.Fatalf("at resume-at: %d %s", r.status, r.body)
	}
	if _, err := e.db.ProviderState(context.Background(), "openai"); err == nil {
		t.Errorf("still parked after a success")
	}
}

// TestTooLarge: a body over the cap gets 413 before any upstream call,
// with or without a Content-Length.
func TestTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: func(c *proxy.Config) { c.MaxBody = 100 }}, okUpstream)
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 200) + `"}]}`
	if r := e.do("/v1/chat/completions", big); r.status != http.StatusRequestEntityTooLarge || errorObject(t, r.body)["code"] != "request_too_large" {
		t.Errorf("with Content-Length: got %d %s", r.status, r.body)
	}
	req, _ := http.NewRequest(http.MethodPost, e.proxy.URL+"/v1/chat/completions", io.MultiReader(strings.NewReader(big)))
	req.Header.Set("Authorization", "Bearer "+e.secret)
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	e.wait(1)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked: got %d", resp.StatusCode)
	}
	if r := e.do("/v1/chat/completions", `{"model":"m"}`); r.status != http.StatusOK {
		t.Errorf("small body: got %d", r.status)
	}
	if n := e.hits.Load(); n != 1 {
		t.Errorf("upstream called %d times; want 1", n)
	}
}

// TestRoutes: other paths 404, other methods 405, a body that is not a
// JSON object 400, all without an upstream call; /healthz and /metrics.
func TestRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{}, okUpstream)
	if r := e.do("/v1/completions", `{}`); r.status != http.StatusNotFound {
		t.Errorf("unknown path: %d", r.status)
	}
	if r := e.do("/v1/chat/completions", `[1,2]`); r.status != http.StatusBadRequest {
		t.Errorf("array body: %d", r.status)
	}
	if r := e.do("/v1/chat/completions", `{"model":`); r.status != http.StatusBadRequest {
		t.Errorf("broken body: %d", r.status)
	}
	resp, err := http.Get(e.proxy.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	e.wait(1)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET: %d allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if n := e.hits.Load(); n != 0 {
		t.Errorf("upstream called %d times", n)
	}
	resp, err = http.Get(e.proxy.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	e.wait(1)
	if resp.StatusCode != 200 || string(b) != "ok\n" {
		t.Errorf("/healthz: %d %s", resp.StatusCode, b)
	}
	e.do("/v1/chat/completions", chatBody("m", 5, false))
	resp, err = http.Get(e.proxy.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	e.wait(1)
	for _, want := range []string{
		`tokenbudget_proxy_requests_total{outcome="ok"} 1`,
		`tokenbudget_proxy_requests_total{outcome="not_found"} 1`,
		`tokenbudget_proxy_requests_total{outcome="bad_request"} 3`,
		`tokenbudget_proxy_tokens_total{kind="input",provider="openai"} 10`,
		`tokenbudget_proxy_tokens_total{kind="output",provider="openai"} 20`,
		`tokenbudget_proxy_refusals_total{scope="global"} 0`,
		"tokenbudget_proxy_responses_without_usage_total",
		"tokenbudget_recorder_queue_depth",
		"tokenbudget_parked_providers 0",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
