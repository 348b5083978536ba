package proxy_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/proxy"
)

const (
	anthropicStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x-20250101\",\"usage\":{\"input_tokens\":17,\"cache_read_input_tokens\":3,\"output_tokens\":1}}}\n\n"
	anthropicDelta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
	anthropicEnd   = "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	chatChunk      = "data: {\"model\":\"gpt-x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n"
	chatUsageChunk = "data: {\"model\":\"gpt-x\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}\n\n"
)

// sseUpstream streams first, flushes, waits for release (or the request
// to end), then streams rest.
func sseUpstream(first, rest string, release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		io.WriteString(w, first)
		rc.Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		case <-time.After(20 * time.Second):
			return
		}
		io.WriteString(w, rest)
		rc.Flush()
	}
}

// openStream sends a streamed request and returns the response, whose
// body the caller reads and closes.
func (e *env) openStream(ctx context.Context, path, body string) *http.Response {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.proxy.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return resp
}

// readEvent reads one SSE event (up to its blank line).
func readEvent(t testing.TB, br *bufio.Reader) string {
	t.Helper()
	var ev strings.Builder
	for {
		line, err := br.ReadString('\n')
		ev.WriteString(line)
		if err != nil {
			t.Fatalf("stream ended before an event ended: %v (%q)", err, ev.String())
		}
		if line == "\n" {
			return ev.String()
		}
	}
}

// TestStreamPassesThrough: each event reaches the client while the
// upstream is still streaming, never buffered whole; the usage-only chunk
// the proxy asked for is held back and dropped, the rest follows.
func TestStreamPassesThrough(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		release := make(chan struct{})
		e := newEnv(t, envOptions{mode: mode}, sseUpstream(chatChunk, chatChunk+chatUsageChunk+"data: [DONE]\n\n", release))
		id := e.limit("", "", "tokens", "1h", 1000)
		resp := e.openStream(context.Background(), "/v1/chat/completions", chatBody("gpt-4o", 50, true))
		br := bufio.NewReader(resp.Body)
		if ev := readEvent(t, br); ev != chatChunk {
			t.Errorf("%s: first event %q", mode, ev)
		}
		close(release) // the upstream sends the rest only now
		rest, err := io.ReadAll(br)
		resp.Body.Close()
		e.wait(1)
		if err != nil || string(rest) != chatChunk+"data: [DONE]\n\n" {
			t.Errorf("%s: rest %q (%v); want the chunk and [DONE] without the usage chunk", mode, rest, err)
		}
		if used, _ := e.used(id); used != 12 {
			t.Errorf("%s: used %d; want 12 (the stripped usage chunk's)", mode, used)
		}
	}
}

// TestCancelledStreamCharged: a client that leaves mid-stream is charged
// the usage the upstream reported so far (Anthropic's message_start: the
// input; the output no less than the text streamed), else the input
// estimate plus ceil(streamed text bytes / 4), exactly; an upstream that
// cuts its own stream short is charged what it reported plus the estimate
// for the rest. The reservation is settled either way, in both modes.
func TestCancelledStreamCharged(t *testing.T) {
	t.Parallel()
	const (
		chatRole  = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
		chatHello = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n"                 // 5
		chatWor   = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" wor\",\"refusal\":null}}]}\n\n" // 4
		chatTool  = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":1}\"}}]}}]}\n\n"
		respStart = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"status\":\"in_progress\",\"usage\":null}}\n\n"
		respText  = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hello there\"}\n\n"                                       // 11
		respAudio = "event: response.audio.delta\ndata: {\"type\":\"response.audio.delta\",\"delta\":\"QUJDREVGR0g=\"}\n\n"                                                  // not text
		anthText  = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi there, friend\"}}\n\n" // 16
	)
	respBody := `{"model":"o","stream":true,"max_output_tokens":100,"input":"hi"}`
	anthBody := `{"model":"claude-x","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	cases := []struct {
		name, path, body, first string
		events                  int  // in first, as the client sees them
		upstreamCuts            bool // the upstream ends the stream after first; the client stays
		wantInput, wantOutput   int64
	}{
		// estimate: ceil((4+2)/4) + 4 = 6 input; text 5 + 4 + 9 (the
		// arguments as written, escapes included) = 18 bytes -> 5 tokens (decoded, 16 -> 4)
		{"chat: no usage yet", "/v1/chat/completions", chatBody("gpt-4o", 50, true), chatRole + chatHello + chatWor + chatTool, 4, false, 6, 5},
		// estimate: ceil(2/4) + 4 = 5 input; 11 bytes of text -> 3
		{"responses: no usage yet", "/v1/responses", respBody, respStart + respText + respAudio, 3, false, 5, 3},
		// reported: 17 + 3 cache read input, output 1; 2 + 16 bytes -> 5
		{"anthropic: input reported", "/v1/messages", anthBody, anthropicStart + anthropicDelta + anthText, 3, false, 20, 5},
		{"anthropic: reported output larger", "/v1/messages", anthBody,
			strings.Replace(anthropicStart, `"output_tokens":1`, `"output_tokens":9`, 1) + anthropicDelta, 2, false, 20, 9},
		{"chat: the upstream cuts it short", "/v1/chat/completions", chatBody("gpt-4o", 50, true), chatHello, 1, true, 6, 50},
		{"anthropic: the upstream cuts it short", "/v1/messages", anthBody, anthropicStart + anthText, 2, true, 20, 100},
	}
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		for _, c := range cases {
			t.Run(string(mode)+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				release := make(chan struct{}) // the upstream waits for it, or for the cancel
				if c.upstreamCuts {
					close(release)
				}
				e := newEnv(t, envOptions{mode: mode}, sseUpstream(c.first, "", release))
				in := e.limit("", "", "input", "1h", 1000)
				out := e.limit("", "", "output", "1h", 1000)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				resp := e.openStream(ctx, c.path, c.body)
				br := bufio.NewReader(resp.Body)
				// Every event of first has passed the proxy before the client leaves.
				for range c.events {
					readEvent(t, br)
				}
				if c.upstreamCuts {
					io.Copy(io.Discard, br)
				}
				cancel()
				resp.Body.Close()
				e.wait(1)
				if used, reserved := e.used(in); used != c.wantInput || reserved != 0 {
					t.Errorf("input: used %d reserved %d; want %d 0", used, reserved, c.wantInput)
				}
				if used, reserved := e.used(out); used != c.wantOutput || reserved != 0 {
					t.Errorf("output: used %d reserved %d; want %d 0", used, reserved, c.wantOutput)
				}
			})
		}
	}
}

// TestStreamCompleteAnthropic: a whole Anthropic stream is charged its
// final usage (an old-style delta keeps message_start's input and cache).
func TestStreamCompleteAnthropic(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	close(release)
	e := newEnv(t, envOptions{}, sseUpstream(anthropicStart+anthropicDelta, anthropicEnd, release))
	id := e.limit("", "", "tokens", "1h", 1000)
	r := e.do("/v1/messages", `{"model":"claude-x","max_tokens":100,"stream":true,"messages":[]}`)
	if r.status != 200 || r.body != anthropicStart+anthropicDelta+anthropicEnd {
		t.Fatalf("got %d %q", r.status, r.body)
	}
	if used, _ := e.used(id); used != 29 {
		t.Errorf("used %d; want 20 input + 9 output", used)
	}
}

// TestNoUsage: a successful response without usage is recorded at the
// estimate, never as zero, counted in a metric and logged.
func TestNoUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{}, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"id":"x","choices":[{"message":{"content":"hi"}}]}`)
	})
	id := e.limit("", "", "tokens", "1h", 1000)
	if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false)); r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	if used, _ := e.used(id); used != 56 {
		t.Errorf("used %d; want the estimate 56", used)
	}
	if !strings.Contains(e.logs.String(), "response without usage") {
		t.Errorf("no log line: %s", e.logs.String())
	}
	resp, err := http.Get(e.proxy.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	e.wait(1)
	if !strings.Contains(string(b), `tokenbudget_proxy_responses_without_usage_total{provider="openai"} 1`) {
		t.Errorf("metric not counted")
	}
}

// TestUpstreamFailureReleases: an upstream that cannot be reached, or
// answers an error, frees the reservation and charges nothing, on the
// store path (nothing reserved at once) and from leases (the room goes
// back to the lease, and to the store once the lease idles).
func TestUpstreamFailureReleases(t *testing.T) {
	t.Parallel()
	for _, m := range reserveModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{storePath: m.storePath, clock: true}, func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 400, `{"error":{"message":"bad model"}}`)
			})
			id := e.limit("", "", "tokens", "1h", 1000)
			for range 3 {
				if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false)); r.status != 400 {
					t.Errorf("status %d; want the upstream's 400", r.status)
				}
			}
			e.upstream.Close()
			r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false))
			if r.status != http.StatusBadGateway || errorObject(t, r.body)["code"] != "upstream_error" {
				t.Errorf("unreachable upstream: %d %s", r.status, r.body)
			}
			if used, _ := e.used(id); used != 0 {
				t.Errorf("used %d; want 0", used)
			}
			if used, reserved := e.settled(id); used != 0 || reserved != 0 {
				t.Errorf("used %d reserved %d; want 0 0", used, reserved)
			}
			if leased := e.db.Stats().Leased; e.leased() != (leased > 0) {
				t.Errorf("%d reservations carved from leases; want some only with leases", leased)
			}
		})
	}
}

// TestConcurrentReserve: 32 concurrent requests against a limit in reserve
// mode never overspend it: exactly as many are admitted as fit.
func TestConcurrentReserve(t *testing.T) {
	t.Parallel()
	// estimate: 6 input + 94 output = 100; the upstream reports exactly that.
	e := newEnv(t, envOptions{mode: proxy.ModeReserve}, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		writeJSON(w, 200, chatUsageJSON(6, 94))
	})
	id := e.limit("", "", "tokens", "1h", 1000)
	const n = 32
	var wg sync.WaitGroup
	start := make(chan struct{})
	codes := make(chan int, n)
	for range n {
		wg.Go(func() {
			<-start
			req, _ := http.NewRequest(http.MethodPost, e.proxy.URL+"/v1/chat/completions", strings.NewReader(chatBody("gpt-4o", 94, false)))
			req.Header.Set("Authorization", "Bearer "+e.secret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	close(start)
	wg.Wait()
	e.wait(n)
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	used, reserved := e.used(id)
	if used > 1000 || reserved != 0 {
		t.Errorf("used %d reserved %d: the limit of 1000 was overspent", used, reserved)
	}
	if count[200] != 10 || count[429] != n-10 || used != 1000 {
		t.Errorf("statuses %v, used %d; want 10 admitted, %d refused, used 1000", count, used, n-10)
	}
	if got := e.hits.Load(); got != int64(count[200]) {
		t.Errorf("upstream called %d times for %d admitted", got, count[200])
	}
}
