package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// webhook is a test alert receiver: it answers the statuses given, in
// turn (200 once they run out), and sends what it received on got.
type webhook struct {
	mu       sync.Mutex
	statuses []int
	got      chan delivery
}

type delivery struct {
	id, sig, contentType string
	body                 []byte
}

func newWebhook(t *testing.T, statuses ...int) (*webhook, string) {
	h := &webhook{statuses: statuses, got: make(chan delivery, 16)}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv.URL + "/hook"
}

func (h *webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	status := http.StatusOK
	if len(h.statuses) > 0 {
		status, h.statuses = h.statuses[0], h.statuses[1:]
	}
	h.mu.Unlock()
	h.got <- delivery{r.Header.Get("X-Budget-Alert-Id"), r.Header.Get("X-Budget-Signature"), r.Header.Get("Content-Type"), body}
	w.WriteHeader(status)
}

// next is the next delivery, failing after 20s.
func (h *webhook) next(t *testing.T) delivery {
	t.Helper()
	select {
	case d := <-h.got:
		return d
	case <-time.After(20 * time.Second):
		t.Fatal("no alert reached the webhook in 20s")
		return delivery{}
	}
}

// check fails unless d is one signed alert whose id header is its own.
func (d delivery) check(t *testing.T, secret string) map[string]any {
	t.Helper()
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(d.body)
	if want := "sha256=" + hex.EncodeToString(m.Sum(nil)); d.sig != want {
		t.Errorf("X-Budget-Signature %q; want %q (HMAC-SHA256 of the body)", d.sig, want)
	}
	var v map[string]any
	if err := json.Unmarshal(d.body, &v); err != nil {
		t.Fatalf("alert body is not a JSON object: %v\n%s", err, d.body)
	}
	wantKeys(t, "the webhook's alert", v, alertFields...)
	if v["id"] != d.id || d.contentType != "application/json" {
		t.Errorf("X-Budget-Alert-Id %q, Content-Type %q; want the body's id %v and application/json", d.id, d.contentType, v["id"])
	}
	return v
}

// testProxyOptions are the options of a proxy on db with the mock
// upstream, on a free port, logging to log.
func testProxyOptions(db string, log *slog.Logger) proxyOptions {
	return proxyOptions{dsn: db, listen: "127.0.0.1:0", mock: true, mode: "reserve", leases: true,
		maxBody: 1 << 20, maxOutput: 100, reservationTTL: time.Minute, bodyTimeout: time.Second, headerTimeout: time.Second,
		idleTimeout: time.Second, maxInflight: 1 << 20, log: log}
}

// TestProxyAlertFlags: bad --alert-webhook and --alert-secret-env exit 2
// naming the flag, before a database is created.
func TestProxyAlertFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--alert-webhook", "ftp://hooks.example.com"}, "alert-webhook"},
		{[]string{"--alert-webhook", "not a url"}, "alert-webhook"},
		{[]string{"--alert-secret-env", "HOOK_SECRET"}, "--alert-secret-env needs --alert-webhook"},
		{[]string{"--alert-webhook", "http://127.0.0.1:1/h", "--alert-secret-env", "UNSET"}, "alert-secret-env"},
		{[]string{"--alert-webhook", "http://127.0.0.1:1/h", "--alert-secret-env", "EMPTY"}, "alert-secret-env"},
		{[]string{"--alert-webhook", "http://127.0.0.1:1/h", "--alert-secret-env", "A=B"}, "alert-secret-env"},
	} {
		db := tempDB(t)
		var out, errb strings.Builder
		m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return map[string]string{"EMPTY": ""}[k] }}
		err := m.Run(context.Background(), append([]string{"proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0"}, tc.args...))
		if code := exitCode(err); code != 2 || !strings.Contains(errb.String(), tc.want) || exists(db) {
			t.Errorf("proxy %v: exit %d, stderr %q; want exit 2 naming %s, no database", tc.args, code, errb.String(), tc.want)
		}
	}
	help := mustRun(t, 0, "proxy", "-h").stdout
	for _, want := range []string{"-alert-webhook URL", "-alert-secret-env variable", "-metrics-limits ids", "X-Budget-Signature", "GET /v1/budget"} {
		if !strings.Contains(help, want) {
			t.Errorf("proxy -h lacks %q", want)
		}
	}
}

// TestProxyAlertWebhook: budget proxy --alert-webhook delivers an alert
// logged before it started, at once, signed with the secret of
// --alert-secret-env, one that a proxied request logs, and the exhausted
// one its first refusal logs.
func TestProxyAlertWebhook(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "100", "--window", "daily", "--alert", "50,80", "--id", "lim")
	mustRun(t, 0, "record", "--db", db, "--key", "app", "--provider", "openai", "--model", "m", "--input", "60", "--at", ts(testNow))
	hook, url := newWebhook(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	line, done := startCLI(t, ctx, map[string]string{"HOOK_SECRET": "s3cret"}, "proxy", "--db", db, "--mock-upstream",
		"--listen", "127.0.0.1:0", "--alert-webhook", url, "--alert-secret-env", "HOOK_SECRET")
	if a := hook.next(t).check(t, "s3cret"); a["threshold"] != 50.0 || a["used"] != 60.0 || a["limit_id"] != "lim" {
		t.Errorf("first alert: %v; want 50%% of lim at 60", a)
	}
	// A request through the proxy crosses 80: the mock charges the input
	// estimate and max_tokens of output.
	if code, body := post(t, listenURL(t, line)+"/v1/chat/completions", secret, `{"model":"m","max_tokens":30,"messages":[]}`); code != 200 {
		t.Fatalf("proxied request: %d %s", code, body)
	}
	if a := hook.next(t).check(t, "s3cret"); a["threshold"] != 80.0 || a["used"].(float64) < 80 || a["kind"] != "threshold" || a["metric"] != "tokens" {
		t.Errorf("second alert: %v; want 80%% of lim", a)
	}
	// One that no longer fits is refused: the window is exhausted.
	if code, body := post(t, listenURL(t, line)+"/v1/chat/completions", secret, `{"model":"m","max_tokens":30,"messages":[]}`); code != 429 {
		t.Fatalf("proxied request past the limit: %d %s; want 429", code, body)
	}
	if a := hook.next(t).check(t, "s3cret"); a["kind"] != "exhausted" || a["threshold"] != nil || a["limit_id"] != "lim" || a["limit"] != 100.0 {
		t.Errorf("third alert: %v; want lim exhausted, threshold null", a)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v", err)
	}
}

// TestProxyAlertRetryRestart: an alert the webhook refuses is tried again
// when its retry is due (1s later), the same document; once acknowledged
// it is never sent again, by this proxy or by the next one on the
// database. The clock and the deliverer's ticks are the test's.
func TestProxyAlertRetryRestart(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "100", "--window", "daily", "--alert", "50", "--id", "lim")
	mustRun(t, 0, "record", "--db", db, "--key", "app", "--provider", "openai", "--model", "m", "--input", "60", "--at", ts(testNow))
	hook, url := newWebhook(t, http.StatusInternalServerError)
	var clock atomic.Int64
	clock.Store(testNow.UnixNano())
	m := &Main{Now: func() time.Time { return time.Unix(0, clock.Load()).UTC() },
		Getenv: func(k string) string { return map[string]string{"HOOK_SECRET": "s3cret"}[k] }}
	var logs lockedBuffer
	start := func(ticks chan time.Time) *runningProxy {
		t.Helper()
		o := testProxyOptions(db, slog.New(slog.NewTextHandler(&logs, nil)))
		o.alertWebhook, o.alertTicks = url, ticks
		return startChecked(t, m, o, "HOOK_SECRET")
	}
	// A tick is taken only between rounds: sending one waits for the
	// round before it, with its reports, to finish.
	ticks := make(chan time.Time)
	p := start(ticks)
	first := hook.next(t) // the round at start: refused
	first.check(t, "s3cret")
	ticks <- testNow // a round at the same instant: not due yet
	if !strings.Contains(logs.String(), "webhook refused") {
		t.Errorf("log: %q; want the refusal", logs.String())
	}
	clock.Add(int64(time.Second))
	ticks <- testNow // a round 1s later: due
	second := hook.next(t)
	second.check(t, "s3cret")
	if second.id != first.id || string(second.body) != string(first.body) {
		t.Errorf("retry: %s %s; want the same alert %s %s", second.id, second.body, first.id, first.body)
	}
	ticks <- testNow // the round that delivered it has reported it
	if err := p.stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := decode(t, mustRun(t, 0, "alerts", "ls", "--db", db, "--json").stdout)["alerts"].([]any)[0].(map[string]any)
	if a["delivered_at"] != ts(testNow.Add(time.Second)) {
		t.Errorf("alerts ls after delivery: delivered_at %v; want %s", a["delivered_at"], ts(testNow.Add(time.Second)))
	}

	// A restart, ten minutes later: nothing more is sent.
	ticks = make(chan time.Time)
	p = start(ticks)
	clock.Add(int64(10 * time.Minute))
	ticks <- testNow
	ticks <- testNow
	if err := p.stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-hook.got:
		t.Errorf("after a restart the webhook got %s again", d.id)
	default:
	}
}

// TestProxyGaugesAndSelfService: /metrics reports the per-limit gauges of
// the limits with alerts and those --metrics-limits names, no other; GET
// /v1/budget answers the limits of inspect --key --json, the same objects.
func TestProxyGaugesAndSelfService(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	for _, a := range [][]string{
		{"--limit", "100", "--window", "daily", "--alert", "80", "--id", "alerted"},
		{"--limit", "10", "--metric", "requests", "--window", "1h", "--id", "named"},
		{"--limit", "1000", "--window", "1h", "--id", "plain"},
	} {
		mustRun(t, 0, append([]string{"limit", "set", "--db", db, "--key", "app"}, a...)...)
	}
	mustRun(t, 0, "record", "--db", db, "--key", "app", "--provider", "openai", "--model", "m", "--input", "30", "--at", ts(testNow.Add(-time.Minute)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	line, done := startCLI(t, ctx, nil, "proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0", "--metrics-limits", "named,missing")
	base := listenURL(t, line)
	_, text := getURL(http.DefaultClient, base+"/metrics")
	for _, c := range []struct {
		id, metric string
		want       bool
	}{{"alerted", "tokens", true}, {"named", "requests", true}, {"plain", "tokens", false}} {
		id, want := c.id, c.want
		if got := strings.Contains(text, `tokenbudget_limit_used{level="key",limit_id="`+id+`",metric="`+c.metric+`",owner="app"}`); got != want {
			t.Errorf("/metrics reports %s: %v; want %v", id, got, want)
		}
	}
	if !strings.Contains(text, `tokenbudget_limit_utilization{level="key",limit_id="alerted",metric="tokens",owner="app"} 0.3`) {
		t.Errorf("/metrics: no utilization 0.3 of alerted:\n%s", text)
	}

	req, _ := http.NewRequest(http.MethodGet, base+"/v1/budget", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v", err)
	}
	got := decode(t, string(body))
	want := decode(t, mustRun(t, 0, "inspect", "--db", db, "--key", "app", "--json").stdout)
	g, _ := json.Marshal(got["limits"])
	w, _ := json.Marshal(want["limits"])
	if resp.StatusCode != 200 || got["key"] != "app" || string(g) != string(w) {
		t.Errorf("GET /v1/budget: %d %s\nwant key app and inspect's limits %s", resp.StatusCode, body, w)
	}
}
