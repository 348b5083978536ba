package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/proxy"
)

// BenchmarkProxyLatency measures what the proxy adds to a request: the same
// chat request sent to a fake upstream directly, through a bare
// httputil.ReverseProxy, and through the budget proxy in check and reserve
// mode (a key with a daily token limit and a per-minute request limit, on
// SQLite in a temp dir), all in this process over loopback. It reports the
// median and 90th percentile of the per-request wall time:
//
//	go test -run '^$' -bench BenchmarkProxyLatency -benchtime 3000x ./proxy/
//
// The proxy's added latency is p50(mode) - p50(reverseproxy).
func BenchmarkProxyLatency(b *testing.B) {
	const reply = `{"id":"chatcmpl-b","object":"chat.completion","model":"gpt-4o-2024-08-06","choices":[{"index":0,` +
		`"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":31,"completion_tokens":9,"total_tokens":40}}`
	body := `{"model":"gpt-4o","max_tokens":256,"messages":[{"role":"system","content":"You are a helpful assistant."},` +
		`{"role":"user","content":"` + strings.Repeat("Tell me something interesting about token budgets. ", 8) + `"}]}`
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, reply)
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	bare := httptest.NewServer(httputil.NewSingleHostReverseProxy(u))
	defer bare.Close()

	run := func(b *testing.B, base, secret string) {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		send := func() {
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if secret != "" {
				req.Header.Set("Authorization", "Bearer "+secret)
			}
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
		for range 50 { // warm the connections and the caches
			send()
		}
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			send()
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*9/10].Nanoseconds())/1e3, "p90-µs")
	}
	b.Run("direct", func(b *testing.B) { run(b, upstream.URL, "") })
	b.Run("reverseproxy", func(b *testing.B) { run(b, bare.URL, "") })
	for _, mode := range []proxy.Mode{proxy.ModeCheck, proxy.ModeReserve} {
		b.Run(string(mode), func(b *testing.B) {
			e := newEnv(b, envOptions{mode: mode}, func(w http.ResponseWriter, r *http.Request) {
				upstream.Config.Handler.ServeHTTP(w, r)
			})
			e.limit("", "", "tokens", "daily", 1<<50)
			e.limit("model", "gpt-4o", "requests", "1m", 1<<50)
			go func() { // the env counts finished requests; nobody waits here
				for range e.served {
				}
			}()
			run(b, e.proxy.URL, e.secret)
		})
	}
}
