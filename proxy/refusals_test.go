package proxy_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
	"github.com/tokenbudget/tokenbudget/proxy/mock"
)

// TestRefusalsRing: the ring keeps the newest refusals, newest first, and
// drops the oldest when full.
func TestRefusalsRing(t *testing.T) {
	t.Parallel()
	rs := proxy.NewRefusals(3)
	if got := rs.List(); len(got) != 0 {
		t.Fatalf("empty ring lists %v; want nothing", got)
	}
	for i := 1; i <= 5; i++ {
		rs.Add(proxy.Refusal{Limit: fmt.Sprint("lim_", i)})
		want := []string{}
		for j := i; j > max(i-3, 0); j-- {
			want = append(want, fmt.Sprint("lim_", j))
		}
		var got []string
		for _, r := range rs.List() {
			got = append(got, r.Limit)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("after %d refusals: got %v; want %v", i, got, want)
		}
	}
}

// TestRefusalsWrap: a proxy handler wrapped by Refusals.Wrap records each
// budget refusal with the key's name, the limit and the instant, and
// nothing for admitted requests, unknown keys, an upstream's own 429 or a
// parked provider's.
func TestRefusalsWrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	at := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	db, err := tokenbudget.Open(ctx, filepath.Join(t.TempDir(), "budget.db"), tokenbudget.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	secret, err := proxy.AddKey(ctx, db.KeyStore(), "alice", at)
	if err != nil {
		t.Fatal(err)
	}
	max := int64(100)
	lim, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "alice", Window: "1h", Max: &max})
	if err != nil {
		t.Fatal(err)
	}
	keys := proxy.NewKeys(db.KeyStore())
	t.Cleanup(keys.Wait)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mw, err := proxy.New(db.Tracker, proxy.Config{Keys: keys, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	h, err := proxy.NewHandler(proxy.HandlerConfig{Middleware: mw, Upstream: &mock.Upstream{}})
	if err != nil {
		t.Fatal(err)
	}
	rs := proxy.NewRefusals(10)
	rs.Now = func() time.Time { return at }
	wrapped := rs.Wrap(h, keys)

	send := func(secret string, maxTokens int, header ...string) int {
		t.Helper()
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, maxTokens)
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		wrapped.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := send(secret, 10); code != http.StatusOK {
		t.Fatalf("a request that fits: status %d; want 200", code)
	}
	if code := send("tbk_unknown", 10); code != http.StatusUnauthorized {
		t.Fatalf("an unknown key: status %d; want 401", code)
	}
	if code := send(secret, 10, "X-Mock-Status", "429"); code != http.StatusTooManyRequests {
		t.Fatalf("the upstream's 429: status %d; want 429", code)
	}
	if code := send(secret, 10); code != http.StatusTooManyRequests { // the upstream's 429 parked it
		t.Fatalf("a request to the parked provider: status %d; want 429", code)
	}
	if got := rs.List(); len(got) != 0 {
		t.Fatalf("refusals after no budget refusal: %+v", got)
	}
	if _, err := db.Unpark(ctx, "openai"); err != nil {
		t.Fatal(err)
	}
	if code := send(secret, 500); code != http.StatusTooManyRequests {
		t.Fatalf("a request over the limit: status %d; want 429", code)
	}
	got := rs.List()
	want := proxy.Refusal{At: at, Key: "alice", Limit: lim.ID, Scope: "global", Level: "key", Code: proxy.CodeBudgetExceeded}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("refusals: got %+v; want [%+v]", got, want)
	}
}
