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

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
	"github.com/tokenbudget/tokenbudget/proxy/mock"
)

// TestAccessLogRefusal: the access log line of a refused request names
// the limit that refused, its level and the error code, right after the
// outcome: a budget refusal and an unpriced model alike, in both modes.
func TestAccessLogRefusal(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			log := &syncBuffer{}
			e := newEnv(t, envOptions{mode: mode, cfg: func(pc *proxy.Config) {
				pc.AccessLog = slog.New(slog.NewTextHandler(log, nil))
			}}, okUpstream)
			tok := e.limit("", "", "tokens", "1h", 80)
			usd := e.limit("", "", "usd", "monthly", 1_000_000)
			if _, err := e.db.SetPrices(context.Background(), budget.PriceSpec{Provider: "openai", Model: "gpt-4o", Input: "2.5", Output: "10"}); err != nil {
				t.Fatal(err)
			}
			if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 500, false)); r.status != http.StatusTooManyRequests {
				t.Fatalf("over the token limit: %d %s; want 429", r.status, r.body)
			}
			e.do("/v1/chat/completions", chatBody("o9-mystery", 10, false))
			s := log.String()
			for _, want := range []string{
				"outcome=refused limit=" + tok + " level=key code=" + proxy.CodeBudgetExceeded,
				"outcome=refused limit=" + usd + " level=key code=" + proxy.CodeUnpriced,
			} {
				if !strings.Contains(s, want) {
					t.Errorf("the access log lacks %q:\n%s", want, s)
				}
			}
		})
	}
}

// TestRefusalsUnpriced: the recent refusals keep an unpriced model's
// refusal too, with the dollar limit that applies, its level and the code;
// a budget refusal carries its code as well.
func TestRefusalsUnpriced(t *testing.T) {
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
	max := int64(1_000_000)
	lim, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "alice", Metric: "usd", Window: "monthly", Max: &max})
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
	body := fmt.Sprintf(`{"model":"o9-mystery","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, 10)
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	rec := httptest.NewRecorder()
	rs.Wrap(h, keys).ServeHTTP(rec, req)
	if !strings.Contains(rec.Body.String(), proxy.CodeUnpriced) {
		t.Fatalf("an unpriced model: %d %s; want %s", rec.Code, rec.Body, proxy.CodeUnpriced)
	}
	got := rs.List()
	want := proxy.Refusal{At: at, Key: "alice", Limit: lim.ID, Scope: "global", Level: "key", Code: proxy.CodeUnpriced}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("refusals: got %+v; want [%+v]", got, want)
	}
}
