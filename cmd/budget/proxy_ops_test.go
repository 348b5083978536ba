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
	// A forwarded request's line follows its settlement's write, which
	// follows its response: the lines are in no set order.
	lines := map[string]map[string]any{}
	for _, l := range access {
		lines[l["method"].(string)+" "+l["path"].(string)+" "+l["key"].(string)] = l
	}
	for _, want := range []struct {
		line, outcome string
		status        float64
		charged       float64
	}{
		{"POST /v1/chat/completions bare", "no_budget", 403, 0},
		{"GET /v1/models app", "ok", 200, 0},
	} {
		if l := lines[want.line]; l == nil || l["status"] != want.status || l["outcome"] != want.outcome || l["charged_tokens"] != want.charged {
			t.Errorf("access line %q: %v; want status %v outcome %s charged %v", want.line, l, want.status, want.outcome, want.charged)
		}
	}
	// Key app's two chat lines share a path: the answered one charged 5 + 25.
	var ok, refused int
	for _, l := range access {
		switch {
		case l["key"] == "app" && l["path"] == "/v1/chat/completions" && l["status"] == 200.0 && l["outcome"] == "ok" && l["charged_tokens"] == 30.0:
			ok++
		case l["key"] == "app" && l["path"] == "/v1/chat/completions" && l["status"] == 429.0 && l["outcome"] == "refused":
			refused++
		}
	}
	if ok != 1 || refused != 1 {
		t.Errorf("chat lines of key app: %d answered with 30 charged, %d refused; want 1 and 1:\n%s", ok, refused, stderr.String())
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
