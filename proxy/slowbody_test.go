package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/proxy"
)

// sizedChat is a chat request of exactly n bytes.
func sizedChat(n int) string {
	b := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"`
	return b + strings.Repeat("x", n-len(b)-4) + `"}]}`
}

// TestSlowBodiesDoNotStarveOtherKeys: eight connections of one key that
// declare a large Content-Length and then stall hold only what arrived
// (plus a small read-ahead), not what they declared: another key's
// request is served, not refused 503.
func TestSlowBodiesDoNotStarveOtherKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: func(c *proxy.Config) {
		c.MaxBody, c.MaxInflightBytes = 1000, 3000
		// Neither deadline cuts the stalled bodies while the test runs:
		// what they hold is the point.
		c.BodyTimeout, c.MinBodyRate = 20*time.Second, -1
	}}, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		writeJSON(w, 200, chatUsageJSON(10, 20))
	})
	e.limit("", "", "tokens", "1h", 1_000_000)
	other, err := proxy.AddKey(context.Background(), e.db.KeyStore(), "other", testNow)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		conn := e.rawRequest("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nExpect: 100-continue", "")
		// net/http sends 100 Continue on the handler's first read of the
		// body: once it is here, the proxy is reading this body.
		line, err := textproto.NewReader(bufio.NewReader(conn)).ReadLine()
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
			t.Fatalf("slow connection %d: got %q (%v); want 100 Continue", i, line, err)
		}
		if _, err := io.WriteString(conn, `{"model":"m"`); err != nil {
			t.Fatal(err)
		}
	}
	r := e.send("/v1/chat/completions", sizedChat(900), "Authorization", "Bearer "+other)
	e.wait(1)
	if r.status != http.StatusOK {
		t.Errorf("another key's request beside 8 stalled bodies: got %d %s; want 200", r.status, r.body)
	}
}

// TestInflightSharePerKey: one key holds at most
// MaxInflightBytesPerKey of request bodies; past it that key gets 503
// while another key is served.
func TestInflightSharePerKey(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, envOptions{cfg: func(c *proxy.Config) {
		c.MaxBody, c.MaxInflightBytes, c.MaxInflightBytesPerKey = 1000, 4000, 1500
	}}, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Test") == "hold" {
			arrived <- struct{}{}
			<-release
		}
		writeJSON(w, 200, chatUsageJSON(10, 20))
	})
	e.limit("", "", "tokens", "1h", 1_000_000)
	other, err := proxy.AddKey(context.Background(), e.db.KeyStore(), "other", testNow)
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, e.proxy.URL+"/v1/chat/completions", strings.NewReader(sizedChat(900)))
		req.Header.Set("Authorization", "Bearer "+e.secret)
		req.Header.Set("X-Test", "hold")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			held <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	<-arrived
	if r := e.do("/v1/chat/completions", sizedChat(900)); r.status != http.StatusServiceUnavailable || errorObject(t, r.body)["code"] != proxy.CodeBusy {
		t.Errorf("the same key past its share: got %d %s; want 503 %s", r.status, r.body, proxy.CodeBusy)
	}
	r := e.send("/v1/chat/completions", sizedChat(900), "Authorization", "Bearer "+other)
	e.wait(1)
	if r.status != http.StatusOK {
		t.Errorf("another key: got %d %s; want 200", r.status, r.body)
	}
	close(release)
	if code := <-held; code != http.StatusOK {
		t.Errorf("the held request: got %d; want 200", code)
	}
	e.wait(1)
}

// TestMinBodyRate: a body arriving slower than MinBodyRate (after
// MinBodyRateGrace) is cut with 408 in the route's shape, naming the rate,
// long before BodyTimeout; nothing reaches the upstream.
func TestMinBodyRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: func(c *proxy.Config) {
		c.BodyTimeout = 20 * time.Second
		c.MinBodyRate, c.MinBodyRateGrace = 1000, 100*time.Millisecond
	}}, okUpstream)
	e.limit("", "", "tokens", "1h", 1000)
	body := chatBody("gpt-4o", 5, false)
	start := time.Now()
	conn := e.rawRequest(fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d", len(body)), body[:10])
	// The proxy answers once the rate fell behind: this read waits for it.
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	e.wait(1)
	if resp.StatusCode != http.StatusRequestTimeout || errorObject(t, string(b))["code"] != proxy.CodeTimeout ||
		!strings.Contains(string(b), "1000 bytes/s") || !resp.Close {
		t.Errorf("got %d close=%v %s; want 408 %s naming 1000 bytes/s, the connection closed", resp.StatusCode, resp.Close, b, proxy.CodeTimeout)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("cut after %v; want well before the body timeout", d)
	}
	if n := e.hits.Load(); n != 0 {
		t.Errorf("upstream called %d times", n)
	}
	// A body sent at once is served.
	if r := e.do("/v1/chat/completions", body); r.status != http.StatusOK {
		t.Errorf("a whole body: got %d %s; want 200", r.status, r.body)
	}
}
