package proxy_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// TestProxyPricesOneHourCacheWrites: an Anthropic response whose cache
// writes went partly to a 1-hour cache (usage.cache_creation; the captures'
// counts changed from a real response's shape) is charged the 1-hour part
// at the row's 1-hour cache-write price and the rest at the cache-write
// price, whole and streamed (the stream's message_delta repeats the writes
// without the split).
func TestProxyPricesOneHourCacheWrites(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ file, body string }{
		{"anthropic-messages-json-1h.json", `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`},
		{"anthropic-messages-stream-1h.txt", `{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(c.file, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(filepath.Join(capturesDir, c.file))
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, envOptions{mode: proxy.ModeReserve}, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if filepath.Ext(c.file) == ".txt" {
					w.Header().Set("Content-Type", "text/event-stream")
				}
				w.WriteHeader(http.StatusOK)
				writeChunked(w, data)
			})
			ctx := context.Background()
			max := int64(100 * budget.MicrosPerUSD)
			l, _, err := e.db.SetLimit(ctx, budget.LimitSpec{Key: "team", Metric: "usd", Window: "monthly", Max: &max})
			if err != nil {
				t.Fatal(err)
			}
			fiveMin, oneHour := "3.75", "6"
			if _, err := e.db.SetPrices(ctx, budget.PriceSpec{Provider: "anthropic", Model: "claude-sonnet-4-5", Input: "3", Output: "15",
				CacheWrite: &fiveMin, CacheWrite1h: &oneHour}); err != nil {
				t.Fatal(err)
			}
			r := e.send("/v1/messages", c.body, "Authorization", "", "X-Api-Key", e.secret)
			e.wait(1)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			// 17 uncached at $3, 1500 5-minute writes at $3.75, 1000 1-hour
			// writes at $6, 10 out at $15 (all at $3.75: 9576).
			if used, _ := e.used(l.ID); used != 51+5625+6000+150 {
				t.Errorf("charged %d micro-dollars; want 11826", used)
			}
		})
	}
}
