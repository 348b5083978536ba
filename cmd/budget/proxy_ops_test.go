package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestProxyOperate: the proxy's operating flags end to end. With
// --require-limits a key without limits gets 403 no_budget; a request
// without max_tokens gets a cap that fits what is left; a refusal whose
// wait is over --max-client-wait says x-should-retry: false; GET /v1/models
// answers for a valid key; --log-format json writes one JSON line per
// request on stderr without secrets; key ls shows the key's last use.
func TestProxyOperate(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	bare := strings.TrimSpace(mustRun(t, 0, "key", "add", "bare", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "60", "--window", "daily")
	stderr := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	line, done := startCLIStderr(t, ctx, nil, stderr, "proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0",
		"--require-limits", "--max-client-wait", "30m", "--log-format", "json")
	base := listenURL(t, line)
	do := func(method, path, key, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	const noCap = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	if r := do("POST", "/v1/chat/completions", bare, noCap); r.StatusCode != http.StatusForbidden {
		t.Errorf("a key without limits: %d; want 403", r.StatusCode)
	}
	// 60 left, input estimate 6: the mock is told max_completion_tokens 54
	// and answers its 25-word reply; 5 + 25 are charged.
	if r := do("POST", "/v1/chat/completions", secret, noCap); r.StatusCode != 200 || r.Header.Get("X-Tokenbudget-Max-Output") != "54" {
		t.Errorf("no cap: %d, injected %q; want 200 54", r.StatusCode, r.Header.Get("X-Tokenbudget-Max-Output"))
	}
	if r := do("GET", "/v1/models", secret, ""); r.StatusCode != 200 {
		t.Errorf("GET /v1/models: %d", r.StatusCode)
	}
	// 30 left: a request for 100 output tokens waits for the daily reset,
	// 12 hours, more than 30m.
	r := do("POST", "/v1/chat/completions", secret, `{"model":"gpt-4o-mini","max_tokens":100,"messages":[]}`)
	if r.StatusCode != 429 || r.Header.Get("X-Should-Retry") != "false" || r.Header.Get("Retry-After") != "43200" {
		t.Errorf("over the budget: %d x-should-retry %q retry-after %q; want 429 false 43200", r.StatusCode, r.Header.Get("X-Should-Retry"), r.Header.Get("Retry-After"))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v", err)
	}
	var access []map[string]any
	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	for sc.Scan() {
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			continue // the drain notice is not a log record
		}
		if v["msg"] == "request" {
			access = append(access, v)
		}
	}
	if len(access) != 4 {
		t.Fatalf("%d access log lines; want 4:\n%s", len(access), stderr.String())
	}
	for i, want := range []struct {
		key     string
		status  float64
		outcome string
	}{{"bare", 403, "no_budget"}, {"app", 200, "ok"}, {"app", 200, "ok"}, {"app", 429, "refused"}} {
		if l := access[i]; l["key"] != want.key || l["status"] != want.status || l["outcome"] != want.outcome {
			t.Errorf("access line %d: %v; want %+v", i, l, want)
		}
	}
	if access[1]["charged_tokens"] != 30.0 {
		t.Errorf("charged: %v; want 30", access[1]["charged_tokens"])
	}
	if s := stderr.String(); strings.Contains(s, secret) || strings.Contains(s, bare) {
		t.Errorf("a secret on stderr:\n%s", s)
	}
	ks := decode(t, mustRun(t, 0, "key", "ls", "--db", db, "--json").stdout)["keys"].([]any)
	for _, k := range ks {
		if k := k.(map[string]any); k["last_used_at"] != ts(testNow) {
			t.Errorf("key ls: %v; want last used %s", k, ts(testNow))
		}
	}
}
