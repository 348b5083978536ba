package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// testNow is the fixed clock of tests that read retry-after or reset times:
// 09:00:00 UTC, so a 1h window resets in exactly 3600 s.
var testNow = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

const (
	upstreamOpenAIKey    = "sk-upstream-openai-credential"
	upstreamAnthropicKey = "sk-ant-upstream-credential"
)

// env is a proxy in front of an httptest upstream, on a fresh database.
type env struct {
	t        testing.TB
	o        envOptions
	path     string // the SQLite file
	db       *tokenbudget.DB
	mw       *proxy.Middleware
	proxy    *httptest.Server
	upstream *httptest.Server
	secret   string // the gateway key "team"'s secret
	hits     atomic.Int64
	served   chan struct{} // one per request the proxy finished
	logs     *syncBuffer
	reg      *prometheus.Registry
	now      atomic.Int64 // the tracker's clock with envOptions.clock, Unix ns
	renewals *renewals    // the proxy's renewal timers with envOptions.renewals
}

// advance moves the tracker's clock (envOptions.clock) by d.
func (e *env) advance(d time.Duration) { e.now.Add(int64(d)) }

type envOptions struct {
	mode  proxy.Mode
	clock bool // the tracker's clock starts at testNow and moves by advance
	// storePath takes every reservation through the store (budget proxy
	// --leases=false). Without it reserve mode decides reservations in
	// memory from leases (budget.Config.Leases, the journal beside the
	// database), as budget proxy does by default.
	storePath bool
	// renewals: the proxy's reservation renewals wait for the test to fire
	// them (e.renewal), instead of going off every third of the TTL.
	renewals bool
	// unsignalled: the proxy does not count its requests on served
	// (benchmarks, which wait for no request).
	unsignalled bool
	cfg         func(*proxy.Config)
	up          func(*proxy.UpstreamConfig)
	// around wraps the proxy's handler, to watch what the client is sent
	// and when. (Optional.)
	around func(http.Handler) http.Handler
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (the log).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newEnv starts a proxy whose upstream is upstream (counted in e.hits).
func newEnv(t testing.TB, o envOptions, upstream http.HandlerFunc) *env {
	t.Helper()
	ctx := context.Background()
	cfg := budget.DefaultConfig()
	e := &env{t: t, o: o, served: make(chan struct{}, 1024), logs: &syncBuffer{}, reg: prometheus.NewRegistry()}
	if o.clock {
		e.now.Store(testNow.UnixNano())
		cfg.Now = func() time.Time { return time.Unix(0, e.now.Load()).UTC() }
	}
	cfg.Leases = o.mode != proxy.ModeCheck && !o.storePath
	e.path = filepath.Join(t.TempDir(), "budget.db")
	db, err := tokenbudget.Open(ctx, e.path, tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	e.db = db
	t.Cleanup(func() {
		if err := db.Close(context.Background()); err != nil {
			t.Errorf("close database: %v", err)
		}
	})
	e.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		upstream(w, r)
	}))
	t.Cleanup(e.upstream.Close)
	if e.secret, err = proxy.AddKey(ctx, db.KeyStore(), "team", testNow); err != nil {
		t.Fatal(err)
	}
	metrics := proxy.NewMetrics(e.reg)
	metrics.SetTracker(db.Tracker)
	// Its own key lookup, so that the cleanup waits for the key uses it
	// records before the database closes.
	keys := proxy.NewKeys(db.KeyStore())
	t.Cleanup(keys.Wait)
	pc := proxy.Config{Mode: o.mode, Keys: keys, Metrics: metrics, Logger: slog.New(slog.NewTextHandler(e.logs, nil))}
	if o.renewals {
		e.renewals = newRenewals()
		proxy.SetRenewTimers(&pc, e.renewals.after)
	}
	if o.cfg != nil {
		o.cfg(&pc)
	}
	if e.mw, err = proxy.New(db.Tracker, pc); err != nil {
		t.Fatal(err)
	}
	// After the server's close (registered later, run earlier), before the
	// database's: no settlement is dropped.
	t.Cleanup(func() {
		if err := e.mw.Close(context.Background()); err != nil {
			t.Errorf("close the middleware: %v", err)
		}
	})
	u, _ := url.Parse(e.upstream.URL)
	uc := proxy.UpstreamConfig{URL: u, OpenAIKey: upstreamOpenAIKey, AnthropicKey: upstreamAnthropicKey, Logger: pc.Logger}
	if o.up != nil {
		o.up(&uc)
	}
	up, err := proxy.NewUpstream(uc)
	if err != nil {
		t.Fatal(err)
	}
	h, err := proxy.NewHandler(proxy.HandlerConfig{Middleware: e.mw, Upstream: up, Registry: e.reg, Health: proxy.TrackerHealth(db.Tracker)})
	if err != nil {
		t.Fatal(err)
	}
	if o.around != nil {
		h = o.around(h)
	}
	e.proxy = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.unsignalled {
			h.ServeHTTP(w, r)
			return
		}
		// Its store write follows the response, which must not wait for
		// it: a test reads the store once the request is over, write
		// included. (Deferred: an aborted handler panics.)
		defer func() {
			go func() {
				e.mw.WaitSettled()
				e.served <- struct{}{}
			}()
		}()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(e.proxy.Close)
	return e
}

// limit sets a limit on key "team" and returns its id.
func (e *env) limit(scope, value, metric, window string, max int64) string {
	e.t.Helper()
	l, _, err := e.db.SetLimit(context.Background(), budget.LimitSpec{Key: "team", Scope: scope, ScopeValue: value,
		Metric: metric, Window: window, Max: &max})
	if err != nil {
		e.t.Fatal(err)
	}
	return l.ID
}

// used is a limit's used and reserved amounts as stored, after a flush.
func (e *env) used(id string) (used, reserved int64) {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.db.Flush(ctx); err != nil {
		e.t.Fatal(err)
	}
	r, err := e.db.Inspect(ctx, "team", e.db.Now(), 0)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range r.Limits {
		if s.Limit.ID == id {
			return s.Used, s.Reserved
		}
	}
	e.t.Fatalf("no limit %s", id)
	return 0, 0
}

// leased reports whether e's reservations come from leases: reserve mode
// without envOptions.storePath.
func (e *env) leased() bool { return e.o.mode != proxy.ModeCheck && !e.o.storePath }

// reserveModes are reserve mode's two paths: through the store
// (--leases=false) and from leases (the default).
var reserveModes = []struct {
	name      string
	storePath bool
}{{"store", true}, {"leases", false}}

// settled is used(id) once nothing but requests holds room: with leases
// the tracker's clock (envOptions.clock) first moves past budget.LeaseIdle,
// so that the flush gives back the free room of every idle lease, the room
// of a released request included; on the store path it is used(id) at once.
func (e *env) settled(id string) (used, reserved int64) {
	e.t.Helper()
	if e.leased() {
		if !e.o.clock {
			e.t.Fatal("settled with leases needs envOptions.clock")
		}
		e.advance(budget.LeaseIdle + time.Millisecond)
	}
	return e.used(id)
}

// response is what a client got.
type response struct {
	status  int
	header  http.Header
	body    string
	trailer http.Header // after the body (a stream's cost)
}

// do sends body to path with the gateway secret as a bearer token, waits
// for the proxy to finish the request, and returns the answer.
func (e *env) do(path, body string, header ...string) response {
	e.t.Helper()
	r := e.send(path, body, append([]string{"Authorization", "Bearer " + e.secret}, header...)...)
	e.wait(1)
	return r
}

// send is do without the default credential and without waiting.
func (e *env) send(path, body string, header ...string) response {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.proxy.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b), trailer: resp.Trailer}
}

// wait waits until the proxy has finished n more requests.
func (e *env) wait(n int) {
	e.t.Helper()
	for range n {
		select {
		case <-e.served:
		case <-time.After(20 * time.Second):
			e.t.Fatal("the proxy did not finish a request in 20s")
		}
	}
}

// jsonBody decodes a response body into a generic object.
func jsonBody(t testing.TB, s string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, s)
	}
	return v
}

// errorObject is the error object of an OpenAI- or Anthropic-shaped body.
func errorObject(t testing.TB, s string) map[string]any {
	t.Helper()
	e, _ := jsonBody(t, s)["error"].(map[string]any)
	if e == nil {
		t.Fatalf("body has no error object: %s", s)
	}
	return e
}

// chatBody is a small chat request.
func chatBody(model string, maxTokens int, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": model, "max_tokens": maxTokens, "stream": stream,
		"messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	return string(b)
}

// writeJSON answers a fixed JSON body.
func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// chatUsageJSON is a chat completion with the given usage.
func chatUsageJSON(prompt, completion int) string {
	b, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-2024-08-06",
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "ok"}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
	return string(b)
}
