package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/proxy"
)

// rawRequest opens a connection to the proxy and sends head, the request
// line and headers without the blank line, then body, and leaves the
// connection open: the client stalls there.
func (e *env) rawRequest(head, body string) net.Conn {
	e.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.proxy.URL, "http://"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, head+"\r\nAuthorization: Bearer "+e.secret+"\r\n\r\n"+body); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// TestBodyTimeout: a client that does not send its whole body within
// BodyTimeout gets 408 and the connection is closed; nothing reaches the
// upstream or is written, with a Content-Length or chunked.
func TestBodyTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: func(c *proxy.Config) { c.BodyTimeout = 200 * time.Millisecond }}, okUpstream)
	id := e.limit("", "", "tokens", "1h", 1000)
	body := chatBody("gpt-4o", 5, false)
	for _, c := range []struct{ name, head, sent string }{
		{"content-length", fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d", len(body)), body[:10]},
		{"chunked", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked", "a\r\n" + body[:10] + "\r\n"},
	} {
		conn := e.rawRequest(c.head, c.sent)
		// The proxy answers once the timeout passed: this read waits for it.
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e.wait(1)
		if resp.StatusCode != http.StatusRequestTimeout || errorObject(t, string(b))["code"] != proxy.CodeTimeout || !resp.Close {
			t.Errorf("%s: got %d close=%v %s; want 408 %s and the connection closed", c.name, resp.StatusCode, resp.Close, b, proxy.CodeTimeout)
		}
	}
	if n := e.hits.Load(); n != 0 {
		t.Errorf("upstream called %d times", n)
	}
	if used, reserved := e.used(id); used != 0 || reserved != 0 {
		t.Errorf("used %d reserved %d; want 0 0", used, reserved)
	}
	if m := e.metrics(); !strings.Contains(m, `tokenbudget_proxy_requests_total{outcome="timeout"} 2`) {
		t.Errorf("/metrics does not count 2 timeouts")
	}
}

// TestBodyTimeoutNotOnResponse: the body deadline ends with the body: a
// response streaming for longer than BodyTimeout is not cut, and is
// charged its final usage.
func TestBodyTimeoutNotOnResponse(t *testing.T) {
	t.Parallel()
	const timeout = 100 * time.Millisecond
	release := make(chan struct{})
	e := newEnv(t, envOptions{cfg: func(c *proxy.Config) { c.BodyTimeout = timeout }},
		sseUpstream(chatChunk, chatChunk+chatUsageChunk+"data: [DONE]\n\n", release))
	id := e.limit("", "", "tokens", "1h", 1000)
	resp := e.openStream(context.Background(), "/v1/chat/completions", chatBody("gpt-4o", 50, true))
	br := bufio.NewReader(resp.Body)
	readEvent(t, br)
	<-time.After(5 * timeout) // time passing is the point: a stale deadline would fire now
	close(release)
	rest, err := io.ReadAll(br)
	resp.Body.Close()
	e.wait(1)
	if err != nil || string(rest) != chatChunk+"data: [DONE]\n\n" {
		t.Errorf("rest %q (%v); want the whole stream", rest, err)
	}
	if used, _ := e.used(id); used != 12 {
		t.Errorf("used %d; want the final usage 12", used)
	}
}

// TestMaxInflightBytes: while request bodies in progress hold
// MaxInflightBytes, another body gets 503 with Retry-After; a body over
// MaxBody gets 413 all the same; once the first request ends its bytes are
// free again.
func TestMaxInflightBytes(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, envOptions{cfg: func(c *proxy.Config) { c.MaxBody, c.MaxInflightBytes = 1000, 1500 }},
		func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if strings.Contains(r.Header.Get("X-Test"), "hold") {
				arrived <- struct{}{}
				<-release
			}
			writeJSON(w, 200, chatUsageJSON(10, 20))
		})
	e.limit("", "", "tokens", "1h", 1_000_000)
	body := func(n int) string { // a chat request of n bytes
		b := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"`
		return b + strings.Repeat("x", n-len(b)-4) + `"}]}`
	}
	held := make(chan int, 1) // the held request's status, 0 when it failed
	go func() {
		req, _ := http.NewRequest(http.MethodPost, e.proxy.URL+"/v1/chat/completions", strings.NewReader(body(900)))
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
	r := e.do("/v1/chat/completions", body(700))
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" || errorObject(t, r.body)["code"] != proxy.CodeBusy {
		t.Errorf("over the bound: got %d Retry-After %q %s; want 503 1 %s", r.status, r.header.Get("Retry-After"), r.body, proxy.CodeBusy)
	}
	if r := e.do("/v1/chat/completions", body(2000)); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over MaxBody: got %d; want 413", r.status)
	}
	req, _ := http.NewRequest(http.MethodPost, e.proxy.URL+"/v1/chat/completions", io.MultiReader(strings.NewReader(body(700))))
	req.Header.Set("Authorization", "Bearer "+e.secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	e.wait(1)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("chunked, over the bound: got %d; want 503", resp.StatusCode)
	}
	close(release)
	if code := <-held; code != http.StatusOK {
		t.Errorf("the held request: got %d; want 200", code)
	}
	e.wait(1)
	if r := e.do("/v1/chat/completions", body(900)); r.status != http.StatusOK {
		t.Errorf("after the held request ended: got %d %s; want 200", r.status, r.body)
	}
	if m := e.metrics(); !strings.Contains(m, `tokenbudget_proxy_requests_total{outcome="busy"} 2`) {
		t.Errorf("/metrics does not count 2 busy refusals")
	}
}

// TestUpstreamHeaderTimeout: an upstream that sends no response headers
// within HeaderTimeout gets its call cancelled; the client gets 504 in its
// route's shape with the request id, and the reservation is released.
func TestUpstreamHeaderTimeout(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{}, 2)
	e := newEnv(t, envOptions{up: func(u *proxy.UpstreamConfig) { u.HeaderTimeout = 100 * time.Millisecond }},
		func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
				cancelled <- struct{}{}
			case <-time.After(20 * time.Second):
			}
		})
	id := e.limit("", "", "tokens", "1h", 1000)
	r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false))
	if r.status != http.StatusGatewayTimeout || errorObject(t, r.body)["code"] != proxy.CodeUpstreamTime ||
		r.header.Get("X-Tokenbudget-Request-Id") == "" {
		t.Errorf("got %d %s (request id %q); want 504 %s with a request id", r.status, r.body, r.header.Get("X-Tokenbudget-Request-Id"), proxy.CodeUpstreamTime)
	}
	r = e.send("/v1/messages", `{"model":"c","max_tokens":5,"messages":[]}`, "X-Api-Key", e.secret)
	e.wait(1)
	if eo := errorObject(t, r.body); r.status != http.StatusGatewayTimeout || eo["type"] != "timeout_error" {
		t.Errorf("anthropic: got %d %s; want 504 timeout_error", r.status, r.body)
	}
	for range 2 {
		select {
		case <-cancelled:
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream call was not cancelled")
		}
	}
	if used, reserved := e.used(id); used != 0 || reserved != 0 {
		t.Errorf("used %d reserved %d; want 0 0 (released)", used, reserved)
	}
}

// TestStreamIdleTimeout: an upstream that goes quiet mid-stream for longer
// than StreamIdleTimeout is cut off: the client's stream ends with an
// error, the upstream call is cancelled, and the request is charged the
// usage reported so far plus the estimate of the rest.
func TestStreamIdleTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{}) // never closed: the upstream stalls
	e := newEnv(t, envOptions{up: func(u *proxy.UpstreamConfig) { u.StreamIdleTimeout = 100 * time.Millisecond }},
		sseUpstream(anthropicStart+anthropicDelta, anthropicEnd, release))
	in := e.limit("", "", "input", "1h", 1000)
	out := e.limit("", "", "output", "1h", 1000)
	resp := e.openStream(context.Background(), "/v1/messages",
		`{"model":"claude-x","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	got, err := io.ReadAll(resp.Body) // ends once the idle timeout cut the stream
	resp.Body.Close()
	e.wait(1)
	if err == nil || string(got) != anthropicStart+anthropicDelta {
		t.Errorf("client got %q, err %v; want the first events, then an error", got, err)
	}
	if used, reserved := e.used(in); used != 20 || reserved != 0 {
		t.Errorf("input: used %d reserved %d; want 20 (reported) 0", used, reserved)
	}
	if used, reserved := e.used(out); used != 100 || reserved != 0 {
		t.Errorf("output: used %d reserved %d; want 100 (the estimate) 0", used, reserved)
	}
	if m := e.metrics(); !strings.Contains(m, `tokenbudget_proxy_requests_total{outcome="upstream_error"} 1`) {
		t.Errorf("/metrics does not count the stall as an upstream error")
	}
	if !strings.Contains(e.logs.String(), "stream idle timeout") {
		t.Errorf("no log line for the stall:\n%s", e.logs.String())
	}
}

// TestStreamIdleTimeoutSlowClient: time the proxy spends blocked writing
// to a client that does not read is not the upstream going quiet: a stream
// larger than the connection buffers, read only after several idle
// timeouts, arrives whole and is charged its final usage.
func TestStreamIdleTimeoutSlowClient(t *testing.T) {
	t.Parallel()
	// Long enough that a loaded machine (the race detector, two cores) does
	// not itself leave the upstream quiet that long once the client reads.
	const idle = 400 * time.Millisecond
	event := "data: {\"model\":\"gpt-x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("x", 64<<10) + "\"}}]}\n\n"
	const events = 256 // 16 MiB
	e := newEnv(t, envOptions{up: func(u *proxy.UpstreamConfig) { u.StreamIdleTimeout = idle }},
		func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			for range events {
				if _, err := io.WriteString(w, event); err != nil {
					return
				}
			}
			io.WriteString(w, chatUsageChunk+"data: [DONE]\n\n")
		})
	id := e.limit("", "", "tokens", "1h", 1000)
	resp := e.openStream(context.Background(), "/v1/chat/completions", chatBody("gpt-4o", 50, true))
	<-time.After(3 * idle) // the client does not read meanwhile: the proxy's writes block
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	e.wait(1)
	if want := strings.Repeat(event, events) + "data: [DONE]\n\n"; err != nil || len(got) != len(want) {
		t.Errorf("client got %d bytes (%v); want the whole stream, %d", len(got), err, len(want))
	}
	if used, _ := e.used(id); used != 12 {
		t.Errorf("used %d; want the final usage 12", used)
	}
}

// metrics is the /metrics text.
func (e *env) metrics() string {
	e.t.Helper()
	resp, err := http.Get(e.proxy.URL + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	e.wait(1)
	return string(b)
}
