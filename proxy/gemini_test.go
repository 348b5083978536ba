package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/proxy"
)

const geminiModelPath = "/v1beta/models/gemini-2.5-flash:"

// geminiBody is a small generateContent request; config is its
// generationConfig ("" for none).
func geminiBody(text, config string) string {
	b := `{"contents":[{"role":"user","parts":[{"text":` + mustJSON(text) + `}]}]`
	if config != "" {
		b += `,"generationConfig":` + config
	}
	return b + "}"
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// usageCols is every token column of the events key "team" has, summed,
// after a flush, with the provider and model of the last.
type usageCols struct {
	input, output, reasoning, cacheRead, cacheWrite int64
	provider, model                                 string
}

func (e *env) usageCols() usageCols {
	e.t.Helper()
	var u usageCols
	err := e.flushedDB().QueryRowContext(context.Background(), `SELECT COALESCE(SUM(input),0), COALESCE(SUM(output),0), COALESCE(SUM(reasoning),0),
		COALESCE(SUM(cache_read),0), COALESCE(SUM(cache_write),0), COALESCE(MAX(provider),''), COALESCE(MAX(model),'')
		FROM usage WHERE key = 'team'`).Scan(&u.input, &u.output, &u.reasoning, &u.cacheRead, &u.cacheWrite, &u.provider, &u.model)
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

// TestGeminiCapturesThroughProxy: each recorded Gemini and Vertex AI
// response (the Gemini API's SDK cassettes: a body, an alt=sse stream, a
// JSON-array stream) passes through the proxy byte for byte, split at
// every 37 bytes, and its usage lands in its columns: thoughts as
// reasoning, cached content as cache read inside the input, tool-use
// prompt tokens in the input; the model is the path's.
func TestGeminiCapturesThroughProxy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		file, path string
		want       usageCols
	}{
		{"gemini-generatecontent-json-2.json", geminiModelPath + "generateContent", usageCols{input: 8, output: 8, reasoning: 90}},
		{"gemini-generatecontent-json-4.json", geminiModelPath + "generateContent", usageCols{input: 727, output: 108, reasoning: 75, cacheRead: 375}},
		{"gemini-generatecontent-json-6.json", geminiModelPath + "generateContent", usageCols{input: 32 + 720, output: 341, reasoning: 103}},
		{"gemini-generatecontent-stream-2.txt", geminiModelPath + "streamGenerateContent?alt=sse", usageCols{input: 34, output: 469, reasoning: 787}},
		{"gemini-generatecontent-stream-4.txt", geminiModelPath + "streamGenerateContent?alt=sse", usageCols{input: 32 + 764, output: 477, reasoning: 240}},
		{"gemini-generatecontent-stream-6.json", geminiModelPath + "streamGenerateContent", usageCols{input: 32, output: 12, reasoning: 42}},
		{"vertex-generatecontent-json-2.json", "/v1beta1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent", usageCols{input: 11, output: 17, reasoning: 190}},
		{"vertex-generatecontent-stream-2.json", "/v1beta1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent", usageCols{input: 11, output: 16, reasoning: 232}},
	} {
		for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
			t.Run(string(mode)+"/"+c.file, func(t *testing.T) {
				t.Parallel()
				data, err := os.ReadFile(filepath.Join(capturesDir, "providers", c.file))
				if err != nil {
					t.Fatal(err)
				}
				var gotPath, gotKey string
				e := newEnv(t, envOptions{mode: mode, cfg: func(pc *proxy.Config) {
					pc.Routes = proxy.GeminiRoutes("")
					pc.Routes[proxy.VertexPath] = proxy.Route{Format: proxy.GeminiGenerate, Provider: "vertex"}
				}, up: func(uc *proxy.UpstreamConfig) { uc.GeminiKey = "upstream-gemini-key" }},
					func(w http.ResponseWriter, r *http.Request) {
						gotPath, gotKey = r.URL.RequestURI(), r.Header.Get("X-Goog-Api-Key")
						if strings.HasSuffix(c.file, ".txt") {
							w.Header().Set("Content-Type", "text/event-stream")
						} else {
							w.Header().Set("Content-Type", "application/json; charset=UTF-8")
						}
						writeChunked(w, data)
					})
				r := e.send(c.path, geminiBody("What is the capital of France?", `{"maxOutputTokens":2000}`), "X-Goog-Api-Key", e.secret)
				e.wait(1)
				if r.status != http.StatusOK || r.body != string(data) {
					t.Fatalf("status %d; body differs from the upstream's: %v", r.status, r.body != string(data))
				}
				if gotPath != c.path || gotKey != "upstream-gemini-key" {
					t.Errorf("upstream got %s with x-goog-api-key %q; want %s with the upstream's key", gotPath, gotKey, c.path)
				}
				got := e.usageCols()
				c.want.provider, c.want.model = "gemini", "gemini-2.5-flash"
				if strings.HasPrefix(c.file, "vertex-") {
					c.want.provider = "vertex"
				}
				if got != c.want {
					t.Errorf("recorded %+v\nwant     %+v", got, c.want)
				}
			})
		}
	}
}

// TestGeminiCapInjected: a generateContent request without
// generationConfig.maxOutputTokens gets the largest cap the room left
// admits there (per candidate), its other settings kept; a client's own
// cap is left alone;
// the Gemini estimate reads contents, not the inline data.
func TestGeminiCapInjected(t *testing.T) {
	t.Parallel()
	var sent []byte
	e := newEnv(t, envOptions{mode: proxy.ModeReserve}, func(w http.ResponseWriter, r *http.Request) {
		sent, _ = io.ReadAll(r.Body)
		writeJSON(w, http.StatusOK, `{"candidates":[{"content":{"parts":[{"text":"ok"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1,"totalTokenCount":6}}`)
	})
	e.limit("", "", "output", "1h", 300)
	for _, c := range []struct {
		config string
		want   string // generationConfig sent upstream
		hdr    string
	}{
		{"", `{"maxOutputTokens":300}`, "300"},
		// Each answer used 1 output token of the 300: the room shrinks.
		{`{"temperature":0.5}`, `{"maxOutputTokens":299,"temperature":0.5}`, "299"},
		{`{"maxOutputTokens":null}`, `{"maxOutputTokens":298}`, "298"},
		{`{"maxOutputTokens":100,"temperature":0}`, `{"maxOutputTokens":100,"temperature":0}`, ""},
		// Two candidates share the 296 left: the cap is per candidate.
		{`{"candidateCount":2}`, `{"maxOutputTokens":148,"candidateCount":2}`, "148"},
	} {
		r := e.do(geminiModelPath+"generateContent", geminiBody("hi", c.config))
		if r.status != http.StatusOK {
			t.Fatalf("%s: status %d %s", c.config, r.status, r.body)
		}
		var got struct {
			GenerationConfig json.RawMessage `json:"generationConfig"`
		}
		json.Unmarshal(sent, &got)
		if string(got.GenerationConfig) != c.want || r.header.Get("X-Tokenbudget-Max-Output") != c.hdr {
			t.Errorf("%q: sent generationConfig %s, header %q; want %s, %q", c.config, got.GenerationConfig, r.header.Get("X-Tokenbudget-Max-Output"), c.want, c.hdr)
		}
	}
	ri, err := proxy.ParseRequest(proxy.GeminiGenerate, []byte(`{"systemInstruction":{"parts":[{"text":"be brief"}]},
		"contents":[{"role":"user","parts":[{"text":"describe"},{"inlineData":{"mimeType":"image/png","data":"`+strings.Repeat("A", 4000)+`"}}]},
		{"role":"model","parts":[{"text":"a cat","thoughtSignature":"`+strings.Repeat("B", 400)+`"}]}],
		"generationConfig":{"maxOutputTokens":50,"candidateCount":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	est := ri.Estimate(proxy.GeminiGenerate, proxy.DefaultMaxOutput, proxy.DefaultImageTokens)
	// text: "be brief" 8 + "user" 4 + "describe" 8 + "model" 5 + "a cat" 5 = 30 bytes -> 8, 2 messages, 1 image.
	if want := int64(8 + 2*proxy.MessageTokens + proxy.DefaultImageTokens); est.Input != want || est.Output != 100 || !ri.HasCap {
		t.Errorf("estimate %+v (has cap %v); want input %d output 100", est, ri.HasCap, want)
	}
}

// TestGeminiRefusalShape: a budget refusal on a Gemini route is a 429 in
// Google's error shape (code, message, status RESOURCE_EXHAUSTED, the
// proxy's code as an ErrorInfo reason, the limit beside them); a bad key
// 401 UNAUTHENTICATED; the gateway key is accepted as ?key= too and never
// forwarded.
func TestGeminiRefusalShape(t *testing.T) {
	t.Parallel()
	var gotQuery string
	e := newEnv(t, envOptions{mode: proxy.ModeReserve}, func(w http.ResponseWriter, r *http.Request) {
		gotQuery = r.URL.RawQuery
		writeJSON(w, http.StatusOK, `{"candidates":[{"content":{"parts":[{"text":"ok"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1}}`)
	})
	e.limit("", "", "tokens", "1h", 100)
	r := e.send(geminiModelPath+"streamGenerateContent?alt=sse&key="+e.secret, geminiBody("hi", `{"maxOutputTokens":50}`))
	e.wait(1)
	if r.status != http.StatusOK || gotQuery != "alt=sse" {
		t.Fatalf("status %d, upstream query %q; want 200 and alt=sse alone: %s", r.status, gotQuery, r.body)
	}
	r = e.send(geminiModelPath+"generateContent", geminiBody("hi", `{"maxOutputTokens":500}`), "X-Goog-Api-Key", e.secret)
	e.wait(1)
	eo := errorObject(t, r.body)
	details, _ := eo["details"].([]any)
	var reason any
	if len(details) == 1 {
		reason = details[0].(map[string]any)["reason"]
	}
	if r.status != http.StatusTooManyRequests || eo["code"] != float64(429) || eo["status"] != "RESOURCE_EXHAUSTED" ||
		reason != proxy.CodeBudgetExceeded || eo["limit"] == nil || !strings.Contains(eo["message"].(string), "limit") {
		t.Errorf("refusal %d %s", r.status, r.body)
	}
	r = e.send(geminiModelPath+"generateContent", geminiBody("hi", ""), "X-Goog-Api-Key", "wrong")
	e.wait(1)
	if eo := errorObject(t, r.body); r.status != http.StatusUnauthorized || eo["status"] != "UNAUTHENTICATED" {
		t.Errorf("bad key: %d %s", r.status, r.body)
	}
}

// TestGeminiCancelledStreamCharged: a client that leaves a JSON-array
// stream after its first chunk is charged that chunk's usage (the whole
// prompt, the output so far), not the cap; the reservation is settled.
func TestGeminiCancelledStreamCharged(t *testing.T) {
	t.Parallel()
	const first = `[{"candidates":[{"content":{"parts":[{"text":"Hello there, this is"}],"role":"model"}}],"usageMetadata":{"promptTokenCount":40,"candidatesTokenCount":5,"thoughtsTokenCount":30}}`
	sentFirst := make(chan struct{})
	e := newEnv(t, envOptions{mode: proxy.ModeReserve}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		io.WriteString(w, first)
		http.NewResponseController(w).Flush()
		close(sentFirst)
		<-r.Context().Done() // the proxy hangs up when its client leaves
	})
	id := e.limit("", "", "tokens", "1h", 100_000)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.proxy.URL+geminiModelPath+"streamGenerateContent", strings.NewReader(geminiBody("hi", `{"maxOutputTokens":4000}`)))
	req.Header.Set("X-Goog-Api-Key", e.secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-sentFirst
	got := make([]byte, len(first))
	if _, err := io.ReadFull(bufio.NewReader(resp.Body), got); err != nil || string(got) != first {
		t.Fatalf("first chunk %q %v", got, err)
	}
	cancel()
	resp.Body.Close()
	e.wait(1)
	if used, reserved := e.used(id); used != 40+5+30 || reserved != 0 {
		t.Errorf("used %d reserved %d; want 75 (the first chunk's usage) and 0", used, reserved)
	}
}
