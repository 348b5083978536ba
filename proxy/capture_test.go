package proxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/proxy"
)

const capturesDir = "../testdata/captures"

// captureCase is a recorded response served by the upstream, and what the
// proxy must record for it.
type captureCase struct {
	file            string
	path            string
	stream          bool
	input, output   int64 // output includes reasoning (the output metric)
	billable        int64 // 0: no usage (an error body)
	status          int
	clientAsksUsage bool // chat streams: the client set include_usage itself
	wantStripped    bool // the usage-only chunk is removed for the client
}

var captureCases = []captureCase{
	{file: "openai-chat-json-1.json", path: "/v1/chat/completions", input: 1144, output: 2, billable: 1146},
	{file: "openai-chat-json-2.json", path: "/v1/chat/completions", input: 11, output: 228, billable: 239},
	{file: "openai-chat-stream-1.txt", path: "/v1/chat/completions", stream: true, input: 1144, output: 2, billable: 1146, wantStripped: true},
	{file: "openai-chat-stream-1.txt", path: "/v1/chat/completions", stream: true, input: 1144, output: 2, billable: 1146, clientAsksUsage: true},
	{file: "openai-responses-json-1.json", path: "/v1/responses", input: 1144, output: 3, billable: 1147},
	{file: "openai-responses-stream-1.txt", path: "/v1/responses", stream: true, input: 11, output: 5, billable: 16},
	{file: "openai-embeddings-json-1.json", path: "/v1/embeddings", input: 7, output: 0, billable: 7},
	{file: "anthropic-messages-json-1.json", path: "/v1/messages", input: 4 + 1163, output: 187, billable: 1354},
	{file: "anthropic-messages-stream-1.txt", path: "/v1/messages", stream: true, input: 17, output: 10, billable: 27},
	{file: "anthropic-messages-stream-2.txt", path: "/v1/messages", stream: true, input: 4 + 1165, output: 201, billable: 1370},
	// Counts changed from a real response's shape: 1-hour cache writes (README).
	{file: "anthropic-messages-json-1h.json", path: "/v1/messages", input: 17 + 2500, output: 10, billable: 2527},
	{file: "anthropic-messages-stream-1h.txt", path: "/v1/messages", stream: true, input: 17 + 2500, output: 10, billable: 2527},
	{file: "anthropic-error429-json-1.json", path: "/v1/messages", status: http.StatusTooManyRequests},
	// OpenAI-compatible servers' shapes (providers/SOURCES.md).
	{file: "providers/deepseek-chat-json-2.json", path: "/v1/chat/completions", input: 495, output: 144, billable: 639},
	{file: "providers/deepseek-chat-stream-2.txt", path: "/v1/chat/completions", stream: true, input: 6, output: 212, billable: 218},
	{file: "providers/groq-chat-stream-2.txt", path: "/v1/chat/completions", stream: true, input: 304, output: 49, billable: 353},
	{file: "providers/xai-chat-json-2.json", path: "/v1/chat/completions", input: 12, output: 1 + 228, billable: 241},
	{file: "providers/openrouter-chat-stream-2.txt", path: "/v1/chat/completions", stream: true, input: 43, output: 36, billable: 79},
	{file: "providers/openai-images-json-2.json", path: "/v1/images/generations", input: 239, output: 1056, billable: 1295},
}

// TestCapturesThroughProxy: every recorded response, served by the upstream
// chunk by chunk, is recorded at its billable count under the request's
// model (not the dated one the response reports), in both modes; the
// client gets the body unchanged, but for the usage-only chunk the proxy
// asked for on its behalf.
func TestCapturesThroughProxy(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(capturesDir, "*"))
	covered := map[string]bool{}
	for _, c := range captureCases {
		covered[c.file] = true
	}
	for _, f := range files {
		if name := filepath.Base(f); name != "README.md" && name != "providers" && !covered[name] { // providers: see providers_test.go
			t.Errorf("capture %s is not run through the proxy", name)
		}
	}
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		for _, c := range captureCases {
			name := string(mode) + "/" + c.file
			if c.clientAsksUsage {
				name += "/include_usage"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				testCapture(t, mode, c)
			})
		}
	}
}

func testCapture(t *testing.T, mode proxy.Mode, c captureCase) {
	data, err := os.ReadFile(filepath.Join(capturesDir, c.file))
	if err != nil {
		t.Fatal(err)
	}
	var upstreamBody []byte
	e := newEnv(t, envOptions{mode: mode}, func(w http.ResponseWriter, r *http.Request) {
		upstreamBody, _ = io.ReadAll(r.Body)
		if c.stream {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		status := c.status
		if status == 0 {
			status = http.StatusOK
		}
		w.WriteHeader(status)
		writeChunked(w, data)
	})
	tokens := e.limit("", "", "tokens", "1h", 1_000_000)
	input := e.limit("", "", "input", "1h", 1_000_000)
	output := e.limit("", "", "output", "1h", 1_000_000)
	model := e.limit("model", "requested-model", "tokens", "1h", 1_000_000)

	req := map[string]any{"model": "requested-model", "max_tokens": 3000}
	switch {
	case strings.Contains(c.path, "embeddings"):
		req = map[string]any{"model": "requested-model", "input": "hello"}
	case strings.Contains(c.path, "responses"):
		req["input"] = "hello"
	case strings.Contains(c.path, "images"):
		req = map[string]any{"model": "requested-model", "prompt": "a cat", "quality": "medium", "size": "1024x1024"}
	default:
		req["messages"] = []any{map[string]any{"role": "user", "content": "hello"}}
	}
	if c.stream {
		req["stream"] = true
	}
	if c.clientAsksUsage {
		req["stream_options"] = map[string]any{"include_usage": true}
	}
	body, _ := json.Marshal(req)
	hdr := []string{}
	if c.path == "/v1/messages" {
		hdr = []string{"Authorization", "", "X-Api-Key", e.secret}
	}
	var r response
	if len(hdr) > 0 {
		r = e.send(c.path, string(body), hdr...)
		e.wait(1)
	} else {
		r = e.do(c.path, string(body))
	}
	wantStatus := c.status
	if wantStatus == 0 {
		wantStatus = http.StatusOK
	}
	if r.status != wantStatus {
		t.Fatalf("status: got %d; want %d\n%s", r.status, wantStatus, r.body)
	}

	// What went upstream: the chat stream always asks for usage.
	var sent map[string]any
	json.Unmarshal(upstreamBody, &sent)
	if c.path == "/v1/chat/completions" && c.stream {
		so, _ := sent["stream_options"].(map[string]any)
		if so["include_usage"] != true {
			t.Errorf("upstream request lacks stream_options.include_usage: %s", upstreamBody)
		}
	} else if _, ok := sent["stream_options"]; ok != c.clientAsksUsage {
		t.Errorf("upstream request: stream_options added where not needed: %s", upstreamBody)
	}

	// What the client got.
	want := string(data)
	if c.wantStripped {
		want = stripUsageEvents(data)
		if strings.Contains(r.body, `"choices":[]`) {
			t.Errorf("client got the usage-only chunk it did not ask for")
		}
	}
	if r.body != want {
		t.Errorf("client body differs from the upstream's (stripped=%v):\ngot  %q\nwant %q", c.wantStripped, r.body, want)
	}

	// What was recorded.
	for _, m := range []struct {
		id   string
		want int64
		what string
	}{{tokens, c.billable, "tokens"}, {input, c.input, "input"}, {output, c.output, "output"}, {model, c.billable, "model-scoped tokens"}} {
		used, reserved := e.used(m.id)
		if used != m.want || reserved != 0 {
			t.Errorf("%s: used %d reserved %d; want used %d reserved 0", m.what, used, reserved, m.want)
		}
	}
	if c.billable > 0 && r.header.Get("X-Ratelimit-Remaining-Tokens") == "" {
		t.Errorf("a successful response lacks x-ratelimit-remaining-tokens: %v", r.header)
	}
}

// writeChunked writes a recorded response in odd-sized chunks (37 bytes),
// each flushed, so that every parser meets events split across writes.
func writeChunked(w http.ResponseWriter, data []byte) {
	rc := http.NewResponseController(w)
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 37)
		w.Write(rest[:n])
		rc.Flush()
		rest = rest[n:]
	}
}

// stripUsageEvents drops the usage-only chunk events (choices: []) from
// an OpenAI chat stream, as the proxy must.
func stripUsageEvents(data []byte) string {
	var out bytes.Buffer
	for _, ev := range strings.SplitAfter(string(data), "\n\n") {
		if proxy.IsUsageOnlyChunk([]byte(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(ev), "data:")))) {
			continue
		}
		out.WriteString(ev)
	}
	return out.String()
}
