package telemetry

import (
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
	"github.com/tokenbudget/tokenbudget/proxy/mock"
)

// harness is a budget proxy on loopback in front of the mock upstream,
// on SQLite in a temp dir: gateway key "app" in team "eng" of org "acme",
// with a daily token limit (its id in limit).
type harness struct {
	t      testing.TB
	db     *tokenbudget.DB
	secret string
	limit  string
	reg    *prometheus.Registry
	proxy  *httptest.Server
	// upstream gets the headers of each request the mock upstream saw.
	upstream chan http.Header
	// access is the access log: its line of a request is written once the
	// request's settlement is (in the store, and in the metrics).
	access    *accessLog
	accessLog *slog.Logger
	upURL     *url.URL // the mock upstream
	// served gets a value once the proxy's handler returned: the span has
	// ended and the access log line is written (a client may have its
	// whole answer before).
	served chan struct{}
	// beforeUpstream, when set, runs as the upstream gets a request.
	beforeUpstream atomic.Pointer[func()]
}

// newHarness starts the proxy in mode with a daily limit of max tokens on
// key app, and the observer observe returns, called once the database and
// the registry exist (nil, or returning nil: none).
func newHarness(t testing.TB, mode proxy.Mode, max int64, observe func(*harness) proxy.Observer) *harness {
	t.Helper()
	ctx := context.Background()
	h := &harness{t: t, reg: prometheus.NewRegistry(), upstream: make(chan http.Header, 1<<16), access: &accessLog{},
		served: make(chan struct{}, 1<<16)}
	h.accessLog = slog.New(slog.NewJSONHandler(h.access, nil))
	db, err := tokenbudget.Open(ctx, filepath.Join(t.TempDir(), "budget.db"), tokenbudget.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	h.db = db
	t.Cleanup(func() {
		if err := db.Close(context.Background()); err != nil {
			t.Errorf("close database: %v", err)
		}
	})
	if _, err := db.SetTeam(ctx, "eng", "acme"); err != nil {
		t.Fatal(err)
	}
	if h.secret, err = proxy.AddKey(ctx, db.KeyStore(), "app", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := db.SetKeyTeam(ctx, "app", "eng"); err != nil {
		t.Fatal(err)
	}
	alerts := []int{90} // so the per-limit gauges report it
	l, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "app", Window: "daily", Max: &max, Alerts: &alerts})
	if err != nil {
		t.Fatal(err)
	}
	h.limit = l.ID

	mu := &mock.Upstream{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := h.beforeUpstream.Load(); f != nil {
			(*f)()
		}
		select {
		case h.upstream <- r.Header.Clone():
		default: // a benchmark's: nobody reads them
		}
		mu.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	h.upURL, _ = url.Parse(up.URL)
	var obs proxy.Observer
	if observe != nil {
		obs = observe(h)
	}
	h.proxy = h.serve(mode, h.reg, obs)
	return h
}

// serve starts another proxy in mode on the harness's database and
// upstream, with its metrics in reg and obs as its observer (nil: none).
func (h *harness) serve(mode proxy.Mode, reg *prometheus.Registry, obs proxy.Observer) *httptest.Server {
	t := h.t
	t.Helper()
	metrics := proxy.NewMetrics(reg)
	metrics.SetTracker(h.db.Tracker)
	keys := proxy.NewKeys(h.db.KeyStore())
	t.Cleanup(keys.Wait)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pc := proxy.Config{Mode: mode, Keys: keys, Metrics: metrics, Logger: log,
		AccessLog: h.accessLog, Observer: obs}
	mw, err := proxy.New(h.db.Tracker, pc)
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := proxy.NewUpstream(proxy.UpstreamConfig{URL: h.upURL, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	handler, err := proxy.NewHandler(proxy.HandlerConfig{Middleware: mw, Upstream: upstream, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { h.served <- struct{}{} }()
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// chatBody is a chat request without an output cap: the proxy injects one.
const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"How many tokens is this sentence?"}]}`

// post sends body to path with the gateway key and hdr, and returns the
// response with its body read, once the proxy's handler has returned and
// (for a request that got a request id) its settlement is written.
func (h *harness) post(path, body string, hdr map[string]string) (*http.Response, string) {
	h.t.Helper()
	resp, b := h.postTo(h.proxy, path, body, hdr)
	if id := resp.Header.Get("X-Tokenbudget-Request-Id"); id != "" {
		h.access.line(h.t, id) // written after the settlement
	}
	return resp, b
}

// postTo is post to the proxy srv (one of serve's), returning once its
// handler has returned, without waiting for the settlement's write.
func (h *harness) postTo(srv *httptest.Server, path, body string, hdr map[string]string) (*http.Response, string) {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.secret)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	<-h.served
	return resp, string(b)
}

// event is the usage event stored under request id id.
func (h *harness) event(id string) budget.Usage {
	h.t.Helper()
	ctx := context.Background()
	if _, err := h.db.Flush(ctx); err != nil {
		h.t.Fatal(err)
	}
	var found []budget.Usage
	_, err := h.db.Export(ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "app", func(u budget.Usage) error {
		if u.RequestID == id {
			found = append(found, u)
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if len(found) != 1 {
		h.t.Fatalf("%d usage events with request id %s; want 1", len(found), id)
	}
	return found[0]
}

// accessLine is the access log's line of request id id.
func (h *harness) accessLine(id string) map[string]any {
	h.t.Helper()
	return h.access.line(h.t, id)
}

// accessLog collects the access log's JSON lines and wakes those waiting
// for one.
type accessLog struct {
	mu    sync.Mutex
	lines []map[string]any
	wrote chan struct{} // closed (and replaced) by each Write
}

// Write takes one line: slog's handler writes each in one call.
func (l *accessLog) Write(p []byte) (int, error) {
	var m map[string]any
	if err := json.Unmarshal(p, &m); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, m)
	if l.wrote != nil {
		close(l.wrote)
		l.wrote = nil
	}
	return len(p), nil
}

// line waits (at most a minute) for the line of request id id.
func (l *accessLog) line(t testing.TB, id string) map[string]any {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		l.mu.Lock()
		for _, m := range l.lines {
			if m["request_id"] == id {
				l.mu.Unlock()
				return m
			}
		}
		if l.wrote == nil {
			l.wrote = make(chan struct{})
		}
		wrote := l.wrote
		l.mu.Unlock()
		select {
		case <-wrote:
		case <-deadline:
			t.Fatalf("no access log line with request_id %s within a minute", id)
		}
	}
}
