package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestCountTokens: Anthropic's /v1/messages/count_tokens, which coding
// agents call before many turns, is forwarded for a valid gateway key with
// the upstream's own credential, body and answer unchanged, and costs no
// budget: it is served even when the budget is spent, and records nothing.
func TestCountTokens(t *testing.T) {
	t.Parallel()
	const body = `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hello"}]}`
	e := newEnv(t, envOptions{}, func(w http.ResponseWriter, r *http.Request) {
		got, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/messages/count_tokens" || r.Method != http.MethodPost || string(got) != body {
			t.Errorf("upstream got %s %s %s", r.Method, r.URL.Path, got)
		}
		if r.Header.Get("X-Api-Key") != upstreamAnthropicKey || r.Header.Get("Authorization") != "" {
			t.Errorf("upstream credential: x-api-key %q authorization %q", r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
		}
		writeJSON(w, http.StatusOK, `{"input_tokens":14}`)
	})
	req := e.limit("", "", "requests", "1h", 1)
	tok := e.limit("", "", "tokens", "1h", 1)
	if r := e.send("/v1/messages/count_tokens", body, "Anthropic-Version", "2023-06-01"); r.status != http.StatusUnauthorized || e.hits.Load() != 0 {
		t.Errorf("no key: status %d, %d upstream calls; want 401 and none", r.status, e.hits.Load())
	} else {
		e.wait(1)
	}
	for range 3 { // more calls than the requests limit allows
		r := e.do("/v1/messages/count_tokens", body, "X-Api-Key", e.secret, "Authorization", "", "Anthropic-Version", "2023-06-01")
		if r.status != http.StatusOK || strings.TrimSpace(r.body) != `{"input_tokens":14}` {
			t.Fatalf("count_tokens: %d %s", r.status, r.body)
		}
	}
	for _, id := range []string{req, tok} {
		if used, reserved := e.used(id); used != 0 || reserved != 0 {
			t.Errorf("limit %s: used %d reserved %d; want 0 0", id, used, reserved)
		}
	}
	if r := e.do("/v1/messages/count_tokens", body); r.status != http.StatusOK {
		t.Errorf("bearer gateway key: %d %s", r.status, r.body)
	}
	if r := e.do("/v1/messages/count_tokens?beta=true", body, "X-Api-Key", e.secret); r.status != http.StatusOK {
		t.Errorf("with a query: %d %s", r.status, r.body)
	}
}
