package proxy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// healthz is the status and body of GET /healthz on h.
func healthz(h http.Handler) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

// waitHealthz polls /healthz until its status is want, for at most 20s: the
// tracker's writer retries on its own schedule.
func waitHealthz(t *testing.T, h http.Handler, want int) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := healthz(h)
		if code == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz: got %d %q for 20s; want %d", code, body, want)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// TestHealthzDeletedDatabase: /healthz answers 503 with the reason once the
// database file is deleted under the running proxy (its writes would go to
// a file nobody reads again).
func TestHealthzDeletedDatabase(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{}, okUpstream)
	resp, err := http.Get(e.proxy.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	e.wait(1)
	if resp.StatusCode != 200 || string(b) != "ok\n" {
		t.Fatalf("/healthz before: %d %q", resp.StatusCode, b)
	}
	if err := os.Remove(e.path); err != nil {
		t.Fatal(err)
	}
	resp, err = http.Get(e.proxy.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	e.wait(1)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "deleted") ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("/healthz after the file was deleted: %d %q (%s); want 503 text naming the deletion",
			resp.StatusCode, b, resp.Header.Get("Content-Type"))
	}
}

// failingStore fails every write transaction while fail is set, as a full
// disk does.
type failingStore struct {
	budget.Store
	fail atomic.Bool
}

var errDiskFull = errors.New("test.db: disk full: no space left on device")

func (s *failingStore) Update(ctx context.Context, fn func(budget.Tx) error) error {
	if s.fail.Load() {
		return errDiskFull
	}
	return s.Store.Update(ctx, fn)
}

// TestHealthzWriterFailing: while the tracker's writer fails, /healthz
// answers 503 with the store's reason; the writer keeps retrying, and once
// writes succeed again the usage is written and /healthz is 200.
func TestHealthzWriterFailing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := tokenbudget.OpenStore(ctx, filepath.Join(t.TempDir(), "budget.db"), tokenbudget.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fs := &failingStore{Store: s}
	tr, err := budget.New(ctx, fs, budget.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctx)
	mw, err := proxy.New(tr, proxy.Config{Keys: proxy.KeyFunc(func(context.Context, string) (string, error) { return "team", nil })})
	if err != nil {
		t.Fatal(err)
	}
	h, err := proxy.NewHandler(proxy.HandlerConfig{Middleware: mw, Upstream: http.HandlerFunc(okUpstream), Health: proxy.TrackerHealth(tr)})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := healthz(h); code != 200 {
		t.Fatalf("/healthz before: %d %q", code, body)
	}
	fs.fail.Store(true)
	if err := tr.Record(ctx, budget.Usage{RequestID: "r1", Key: "team", Provider: "openai", Model: "m", Input: 5}); err != nil {
		t.Fatal(err)
	}
	if body := waitHealthz(t, h, http.StatusServiceUnavailable); !strings.Contains(body, "disk full") {
		t.Errorf("/healthz while writes fail: %q; want the reason (disk full)", body)
	}
	fs.fail.Store(false)
	waitHealthz(t, h, http.StatusOK)
	if _, err := tr.Flush(ctx); err != nil || tr.Stats().Written != 1 {
		t.Errorf("after writes succeed again: flush %v, %d events written; want 1", err, tr.Stats().Written)
	}
}
