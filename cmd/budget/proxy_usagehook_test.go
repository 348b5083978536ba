package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/alert"
	"github.com/tokenbudget/tokenbudget/budget"
)

// Receiver behaviours, one per POST (receiver.script), then recvOK.
const (
	recvOK   = iota // keeps the batch, answers 200
	recvFail        // keeps nothing, answers 500
	recvLose        // keeps the batch, answers 500: the answer is lost
)

// receiver is a billing system: it keeps the CloudEvents it is sent,
// deduplicated by id, in the order it first saw them, per subject (key).
type receiver struct {
	t         *testing.T
	secret    string
	mu        sync.Mutex
	script    []int
	posts     int
	failed    int
	received  int // events in kept batches, duplicates included
	seen      map[string]map[string]any
	bySubject map[string][]string // request ids, first sightings, in order
}

func newReceiver(t *testing.T, secret string, script ...int) (*receiver, string) {
	r := &receiver{t: t, secret: secret, script: script, seen: map[string]map[string]any{}, bySubject: map[string][]string{}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv.URL + "/usage"
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if ct := req.Header.Get("Content-Type"); ct != "application/cloudevents-batch+json" {
		r.t.Errorf("Content-Type %q; want application/cloudevents-batch+json", ct)
	}
	if sig := req.Header.Get("X-Budget-Signature"); sig != alert.Sign([]byte(r.secret), body) {
		r.t.Errorf("X-Budget-Signature %q; want the body's HMAC under the secret", sig)
	}
	var batch []map[string]any
	if err := json.Unmarshal(body, &batch); err != nil {
		r.t.Errorf("body is not a JSON array of events: %v\n%s", err, body)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.posts++
	mode := recvOK
	if len(r.script) > 0 {
		mode, r.script = r.script[0], r.script[1:]
	}
	if mode != recvFail {
		for _, e := range batch {
			r.received++
			id, _ := e["id"].(string)
			if _, dup := r.seen[id]; dup {
				continue
			}
			r.seen[id] = e
			sub, _ := e["subject"].(string)
			data, _ := e["data"].(map[string]any)
			rid, _ := data["request_id"].(string)
			r.bySubject[sub] = append(r.bySubject[sub], rid)
		}
	}
	if mode != recvOK {
		r.failed++
		w.WriteHeader(http.StatusInternalServerError)
	}
}

// has reports whether the receiver kept every request id of want, by key.
func (r *receiver) has(want map[string][]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, ids := range want {
		for _, id := range ids {
			if !slices.Contains(r.bySubject[k], id) {
				return false
			}
		}
	}
	return true
}

func (r *receiver) fail(script ...int) {
	r.mu.Lock()
	r.script = script
	r.mu.Unlock()
}

// TestProxyUsageWebhookExactlyOnce: budget proxy --usage-webhook delivers
// every usage event recorded from its start, by the proxy, by 'budget
// record' and 'budget import' in other processes, while it runs and while
// it is down, to a receiver that first keeps nothing and fails, then keeps
// a batch and fails (the answer lost), then succeeds; a proxy restarted
// on the database delivers what the first left. After deduplication by
// id the receiver holds each event exactly once, per key in the order it
// was recorded, each the CloudEvent of its export line; the event from
// before the hook is not delivered.
func TestProxyUsageWebhookExactlyOnce(t *testing.T) {
	for _, target := range moveTargets {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			testUsageWebhookExactlyOnce(t, target.fresh(t))
		})
	}
}

func testUsageWebhookExactlyOnce(t *testing.T, db string) {
	cli := func(args ...string) string { return mustRun(t, 0, append(args, "--db", db)...).stdout }
	secrets := map[string]string{}
	for _, k := range []string{"a", "b"} {
		secrets[k] = strings.TrimSpace(cli("key", "add", k))
	}
	cli("record", "--key", "c", "--provider", "openai", "--model", "m", "--input", "1", "--request-id", "before-hook", "--at", ts(testNow))
	recv, url := newReceiver(t, "s3cret", recvFail, recvLose)

	var clock atomic.Int64
	clock.Store(testNow.UnixNano())
	m := &Main{Now: func() time.Time { return time.Unix(0, clock.Load()).UTC() },
		Getenv: func(k string) string { return map[string]string{"HOOK_SECRET": "s3cret"}[k] }}
	var logs lockedBuffer
	sent := map[string][]string{} // request ids by key, in the order recorded
	start := func(ticks chan time.Time) *runningProxy {
		t.Helper()
		o := testProxyOptions(db, slog.New(slog.NewTextHandler(&logs, nil)))
		o.usageWebhook, o.usageTicks = url, ticks
		return startChecked(t, m, o, "HOOK_SECRET")
	}
	request := func(p *runningProxy, key string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, p.url+"/v1/chat/completions", strings.NewReader(`{"model":"m","max_tokens":20,"messages":[]}`))
		req.Header.Set("Authorization", "Bearer "+secrets[key])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("proxied request for %s: %d %s", key, resp.StatusCode, body)
		}
		sent[key] = append(sent[key], resp.Header.Get("X-Tokenbudget-Request-Id"))
	}
	record := func(key, id string) {
		cli("record", "--key", key, "--provider", "openai", "--model", "m", "--input", "3", "--output", "4", "--request-id", id,
			"--at", ts(time.Unix(0, clock.Load())))
		sent[key] = append(sent[key], id)
	}
	// pending is what the outbox holds for the webhook.
	pending := func(p *runningProxy) int64 {
		t.Helper()
		bl, err := p.tracker.OutboxBacklog(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bl {
			if b.Dest == url {
				return b.Pending
			}
		}
		t.Fatalf("outbox backlog %+v; want a line for %s", bl, url)
		return 0
	}
	// deliver runs delivery rounds, a minute apart (past every retry
	// delay so far), until the receiver holds everything sent and the
	// outbox nothing; a tick is taken only once the round before it
	// reported.
	deliver := func(p *runningProxy, ticks chan time.Time) {
		t.Helper()
		p.inflight.Wait()
		if _, err := p.tracker.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := 0; !recv.has(sent) || pending(p) > 0; i++ {
			if i == 20 {
				t.Fatalf("after 20 rounds the receiver has %v; want %v\nlog: %s", recv.bySubject, sent, logs.String())
			}
			clock.Add(int64(time.Minute))
			ticks <- time.Time{}
			ticks <- time.Time{} // that round has reported
		}
	}

	ticks := make(chan time.Time)
	p := start(ticks)
	for _, k := range []string{"a", "b", "a", "a", "b"} {
		request(p, k)
	}
	record("c", "c-1") // another process, while the proxy runs
	deliver(p, ticks)
	if recv.failed < 2 || recv.received <= len(recv.seen) {
		t.Errorf("receiver: %d failed posts, %d events kept for %d ids; want 2 failures and duplicates kept", recv.failed, recv.received, len(recv.seen))
	}

	// The receiver fails again: what the proxy records now is queued,
	// tried, and left when it stops; what is recorded while it is down
	// waits for the next.
	recv.fail(recvFail, recvFail, recvFail, recvFail, recvFail, recvFail)
	request(p, "b")
	request(p, "a")
	p.inflight.Wait()
	if _, err := p.tracker.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	ticks <- time.Time{}
	ticks <- time.Time{}
	if err := p.stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	bl := decode(t, cli("outbox", "ls", "--json"))["outbox"].([]any)
	if h := bl[0].(map[string]any); h["destination"] != url || h["pending"] != 2.0 || h["attempts"] != 1.0 ||
		!strings.Contains(h["last_error"].(string), "500") || h["kind"] != "usage" {
		t.Errorf("outbox ls --json while the proxy is down: %v; want 2 pending for %s, 1 attempt, the 500", h, url)
	}
	record("c", "c-2")
	imported := `{"request_id":"c-3","key":"c","provider":"openai","model":"m","input":5,"output":1,"at":"` + ts(time.Unix(0, clock.Load())) + `"}`
	if r := runStdin(t, imported+"\n", "import", "--db", db, "-"); r.code != 0 {
		t.Fatalf("import: %v", r)
	}
	sent["c"] = append(sent["c"], "c-3")
	recv.fail()

	ticks = make(chan time.Time)
	p = start(ticks)
	request(p, "b")
	deliver(p, ticks)
	if err := p.stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Exactly once after deduplication, in order per key, as exported.
	recv.mu.Lock()
	defer recv.mu.Unlock()
	for k, ids := range sent {
		if got := recv.bySubject[k]; !slices.Equal(got, ids) {
			t.Errorf("key %s: received %v; want %v, once each, in the order recorded", k, got, ids)
		}
	}
	if _, ok := recv.seen[budget.EventID("c", "before-hook")]; ok {
		t.Errorf("the event recorded before the hook was delivered")
	}
	lines := strings.Split(strings.TrimSpace(cli("export")), "\n")
	if len(lines) != len(recv.seen)+1 {
		t.Errorf("export has %d events; want the %d delivered and the one from before the hook", len(lines), len(recv.seen))
	}
	for _, line := range lines {
		var u map[string]any
		if err := json.Unmarshal([]byte(line), &u); err != nil {
			t.Fatal(err)
		}
		key, rid := u["key"].(string), u["request_id"].(string)
		if rid == "before-hook" {
			continue
		}
		e, ok := recv.seen[budget.EventID(key, rid)]
		if !ok {
			t.Errorf("event %s/%s was never delivered", key, rid)
			continue
		}
		if got, _ := json.Marshal(e["data"]); string(got) != string(mustJSON(t, u)) {
			t.Errorf("event %s/%s data %s; want its export line %s", key, rid, got, mustJSON(t, u))
		}
		if e["specversion"] != "1.0" || e["type"] != "dev.tokenbudget.usage.v1" || e["source"] != "tokenbudget" || e["subject"] != key ||
			e["time"] != u["at"] || e["datacontenttype"] != "application/json" {
			t.Errorf("event %s/%s attributes %v; want CloudEvents 1.0, type dev.tokenbudget.usage.v1, subject the key, time its at", key, rid, e)
		}
	}
	bl = decode(t, cli("outbox", "ls", "--json"))["outbox"].([]any)
	if h := bl[0].(map[string]any); h["pending"] != 0.0 || h["oldest"] != nil || h["next_attempt"] != nil {
		t.Errorf("outbox ls --json after delivery: %v; want nothing pending", h)
	}
}

// startChecked starts an in-process proxy with o, its webhook flags
// checked and the secret of secretEnv read as budget proxy does.
func startChecked(t *testing.T, m *Main, o proxyOptions, secretEnv string) *runningProxy {
	t.Helper()
	if err := m.alertOptions(&o, secretEnv); err != nil {
		t.Fatal(err)
	}
	p, err := m.startProxy(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mustJSON is v re-encoded: maps encode with sorted keys, so two decoded
// objects compare as their encodings.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProxyUsageWebhookFlags: a bad --usage-webhook exits 2 naming the
// flag, before a database is created; --alert-secret-env goes with it
// alone; -h documents it.
func TestProxyUsageWebhookFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--usage-webhook", "ftp://billing.example.com"}, "usage-webhook"},
		{[]string{"--usage-webhook", "not a url"}, "usage-webhook"},
		{[]string{"--usage-webhook", "http://127.0.0.1:1/u", "--alert-secret-env", "UNSET"}, "alert-secret-env"},
	} {
		db := tempDB(t)
		var out, errb strings.Builder
		m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
		err := m.Run(context.Background(), append([]string{"proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0"}, tc.args...))
		if code := exitCode(err); code != 2 || !strings.Contains(errb.String(), tc.want) || exists(db) {
			t.Errorf("proxy %v: exit %d, stderr %q; want exit 2 naming %s, no database", tc.args, code, errb.String(), tc.want)
		}
	}
	var o proxyOptions
	o.usageWebhook = "http://127.0.0.1:1/u"
	m := &Main{Getenv: func(k string) string { return map[string]string{"HOOK_SECRET": "s"}[k] }}
	if err := m.alertOptions(&o, "HOOK_SECRET"); err != nil || string(o.alertSecret) != "s" {
		t.Errorf("--usage-webhook with --alert-secret-env alone: %v, secret %q; want the secret read", err, o.alertSecret)
	}
	help := mustRun(t, 0, "proxy", "-h").stdout
	for _, want := range []string{"-usage-webhook URL", "application/cloudevents-batch+json", "budget outbox rm URL"} {
		if !strings.Contains(help, want) {
			t.Errorf("proxy -h lacks %q", want)
		}
	}
}
