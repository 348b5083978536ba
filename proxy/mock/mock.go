// Package mock is a fake provider of every API kind the proxy serves, for
// trying `budget proxy` without an account (`budget demo`,
// `budget mock-upstream`), for the tests and for the benchmarks. Its
// answers have the shapes of the recorded real responses in
// testdata/captures.
package mock

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tokenbudget/tokenbudget/proxy/internal/kinds"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// mockReply is what the mock says, one token per word.
var mockReply = strings.Fields("Hello! This is the tokenbudget mock upstream. Every token of this answer, " +
	"and of your prompt, is counted against the budget of your gateway key.")

// Upstream is a fake provider for trying the proxy without an account
// and for benchmarks. It answers POST /v1/chat/completions, /v1/responses,
// /v1/embeddings and /v1/messages, streamed or not, in the shapes the real
// APIs use (those of the captures in testdata/captures), with usage:
//
//	input  = ceil(text bytes / 4) + 3 per message + 765 per image part
//	output = the words of a fixed reply, cut at the request's max tokens
//
// and reports a dated model name (the request's plus "-2026-01-01"), as
// real providers do. A request header X-Mock-Status: N makes it answer
// status N with an error body (and X-Mock-Retry-After: S a Retry-After).
// GET /v1/models lists a few models, in Anthropic's shape when the
// request carries anthropic-version, else OpenAI's (/v1/models/ID: one).
// It accepts any credential. Safe for concurrent use.
type Upstream struct {
	// ChunkDelay is slept between streamed events. (Optional; default 0.)
	ChunkDelay time.Duration

	n atomic.Int64
}

// ServeHTTP answers one request.
func (mu *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isModels(r.URL.Path) && r.Method == http.MethodGet {
		mockModels(w, r)
		return
	}
	key, tg, ok := kinds.Route(r.URL.Path, r.URL.EscapedPath())
	f := wire.Unknown
	if ok {
		f = formats[key]
		ok = f != wire.Unknown
	}
	deployment := tg.Model // Azure's deployment, Gemini's and Bedrock's model
	countTokens := r.URL.Path == countTokensPath
	if countTokens {
		f, ok = wire.AnthropicMessages, true
	}
	if !ok {
		writeError(w, wire.Unknown, http.StatusNotFound, "not_found", "mock upstream: no route "+r.URL.Path)
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, f, http.StatusMethodNotAllowed, "invalid_request", "mock upstream: use POST")
		return
	}
	if s := r.Header.Get("X-Mock-Status"); s != "" {
		code, err := strconv.Atoi(s)
		if err == nil && code >= 400 && code <= 599 {
			if ra := r.Header.Get("X-Mock-Retry-After"); ra != "" {
				w.Header().Set("Retry-After", ra)
			}
			writeError(w, f, code, "mock_error", "mock upstream: answering "+s+" as asked")
			return
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return
	}
	var req wire.Request
	if err := req.Parse(body); err != nil {
		writeError(w, f, http.StatusBadRequest, "invalid_request", "mock upstream: the body is not a JSON object")
		return
	}
	ri := wire.RequestInfo{Choices: 1}
	kinds.For(f, "").Request(&req, body, &ri)
	c := mockCall{n: mu.n.Add(1), model: ri.Model, delay: mu.ChunkDelay, created: time.Now().Unix()}
	if deployment != "" {
		c.model = deployment
	}
	if c.model == "" {
		c.model = "mock-model"
	}
	c.model += "-2026-01-01"
	c.in = (ri.TextBytes+3)/4 + 3*ri.Messages + 765*ri.Parts + ri.PreTokens
	if f == wire.OpenAIEmbeddings {
		c.in = max(1, (ri.TextBytes+3)/4+ri.PreTokens)
		c.writeEmbeddings(w)
		return
	}
	c.in = max(1, c.in)
	if f == wire.OpenAIImages {
		c.writeImages(w, ri)
		return
	}
	if countTokens {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"input_tokens":%d}`+"\n", c.in)
		return
	}
	c.words = mockReply
	c.finish = "stop"
	if ri.MaxOutput > 0 && ri.MaxOutput < int64(len(c.words)) {
		c.words, c.finish = c.words[:ri.MaxOutput], "length"
	}
	c.out = int64(len(c.words))
	switch {
	case f == wire.GeminiGenerate:
		c.writeGemini(w, tg.Stream, r.URL.Query().Get("alt") == "sse")
	case f == wire.BedrockConverse:
		c.writeConverse(w, tg.Stream)
	case f == wire.BedrockInvoke && tg.Stream:
		c.streamInvoke(w)
	case f == wire.BedrockInvoke:
		c.writeJSON(w, wire.AnthropicMessages)
	case !ri.Stream:
		c.writeJSON(w, f)
	case f == wire.OpenAIChat:
		c.streamChat(w, ri.IncludeUsage)
	case f == wire.OpenAIResponses:
		c.streamResponses(w)
	case f == wire.AnthropicMessages:
		c.streamAnthropic(w)
	default:
		c.writeJSON(w, f)
	}
}

// mockCall is one answer being written.
type mockCall struct {
	n, created, in, out int64
	model, finish       string
	words               []string
	delay               time.Duration
}

func (c *mockCall) text() string { return strings.Join(c.words, " ") }

func (c *mockCall) writeJSON(w http.ResponseWriter, f wire.Format) {
	var v any
	switch f {
	case wire.OpenAIChat:
		v = map[string]any{"id": fmt.Sprintf("chatcmpl-mock%d", c.n), "object": "chat.completion", "created": c.created,
			"model": c.model, "choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant",
				"content": c.text(), "refusal": nil, "annotations": []any{}}, "logprobs": nil, "finish_reason": c.finish}},
			"usage": c.chatUsage(), "service_tier": "default", "system_fingerprint": "fp_mock"}
	case wire.OpenAIResponses:
		v = c.response("completed")
	case wire.AnthropicMessages:
		stop := "end_turn"
		if c.finish == "length" {
			stop = "max_tokens"
		}
		v = map[string]any{"id": fmt.Sprintf("msg_mock%d", c.n), "type": "message", "role": "assistant", "model": c.model,
			"content": []any{map[string]any{"type": "text", "text": c.text()}}, "stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": c.in, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": c.out}}
	}
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

func (c *mockCall) chatUsage() map[string]any {
	return map[string]any{"prompt_tokens": c.in, "completion_tokens": c.out, "total_tokens": c.in + c.out,
		"prompt_tokens_details":     map[string]any{"cached_tokens": 0, "audio_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
}

func (c *mockCall) response(status string) map[string]any {
	v := map[string]any{"id": fmt.Sprintf("resp_mock%d", c.n), "object": "response", "created_at": c.created, "status": status,
		"model": c.model, "output": []any{}, "usage": nil}
	if status == "completed" {
		v["output"] = []any{map[string]any{"type": "message", "id": fmt.Sprintf("msg_mock%d", c.n), "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": c.text(), "annotations": []any{}}}}}
		v["usage"] = map[string]any{"input_tokens": c.in, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": c.out, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": c.in + c.out}
	}
	return v
}

func (c *mockCall) writeEmbeddings(w http.ResponseWriter) {
	vec := []float64{0.0123, -0.0456, 0.0789, -0.0012, 0.0345, -0.0678, 0.0901, -0.0234}
	b, _ := json.Marshal(map[string]any{"object": "list", "model": c.model,
		"data":  []any{map[string]any{"object": "embedding", "index": 0, "embedding": vec}},
		"usage": map[string]any{"prompt_tokens": c.in, "total_tokens": c.in}})
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// sse writes Server-Sent Events, flushing each.
type sse struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	delay time.Duration
	first bool
}

func (c *mockCall) newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w), delay: c.delay, first: true}
}

// event writes one event (name may be ""); false when the client is gone.
func (s *sse) event(name string, data any) bool {
	if s.delay > 0 && !s.first {
		time.Sleep(s.delay)
	}
	s.first = false
	var b []byte
	if str, ok := data.(string); ok {
		b = []byte(str)
	} else {
		b, _ = json.Marshal(data)
	}
	var out []byte
	if name != "" {
		out = append(append(append(out, "event: "...), name...), '\n')
	}
	out = append(append(append(out, "data: "...), b...), "\n\n"...)
	if _, err := s.w.Write(out); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

func (c *mockCall) streamChat(w http.ResponseWriter, includeUsage bool) {
	s := c.newSSE(w)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": fmt.Sprintf("chatcmpl-mock%d", c.n), "object": "chat.completion.chunk", "created": c.created,
			"model": c.model, "system_fingerprint": "fp_mock", "choices": []any{map[string]any{"index": 0, "delta": delta,
				"logprobs": nil, "finish_reason": finish}}, "usage": nil}
	}
	if !s.event("", chunk(map[string]any{"role": "assistant", "content": ""}, nil)) {
		return
	}
	for i, wd := range c.words {
		if i > 0 {
			wd = " " + wd
		}
		if !s.event("", chunk(map[string]any{"content": wd}, nil)) {
			return
		}
	}
	if !s.event("", chunk(map[string]any{}, c.finish)) {
		return
	}
	if includeUsage {
		u := chunk(nil, nil)
		u["choices"], u["usage"] = []any{}, c.chatUsage()
		if !s.event("", u) {
			return
		}
	}
	s.event("", "[DONE]")
}

func (c *mockCall) streamResponses(w http.ResponseWriter) {
	s := c.newSSE(w)
	seq := 0
	ev := func(typ string, fields map[string]any) bool {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		return s.event(typ, fields)
	}
	if !ev("response.created", map[string]any{"response": c.response("in_progress")}) {
		return
	}
	for i, wd := range c.words {
		if i > 0 {
			wd = " " + wd
		}
		if !ev("response.output_text.delta", map[string]any{"item_id": fmt.Sprintf("msg_mock%d", c.n), "output_index": 0,
			"content_index": 0, "delta": wd}) {
			return
		}
	}
	ev("response.completed", map[string]any{"response": c.response("completed")})
}

func (c *mockCall) streamAnthropic(w http.ResponseWriter) {
	s := c.newSSE(w)
	start := map[string]any{"type": "message_start", "message": map[string]any{"id": fmt.Sprintf("msg_mock%d", c.n), "type": "message",
		"role": "assistant", "model": c.model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": c.in, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}}
	if !s.event("message_start", start) ||
		!s.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}) ||
		!s.event("ping", map[string]any{"type": "ping"}) {
		return
	}
	for i, wd := range c.words {
		if i > 0 {
			wd = " " + wd
		}
		if !s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": wd}}) {
			return
		}
	}
	stop := "end_turn"
	if c.finish == "length" {
		stop = "max_tokens"
	}
	if !s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) ||
		!s.event("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
			"usage": map[string]any{"input_tokens": c.in, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": c.out}}) {
		return
	}
	s.event("message_stop", map[string]any{"type": "message_stop"})
}

// formats are the operations the mock answers, by route key
// (kinds.Route): every kind's, Azure's deployments and Vertex AI's too.
var formats = map[string]wire.Format{
	"/v1/chat/completions":                      wire.OpenAIChat,
	"/v1/responses":                             wire.OpenAIResponses,
	"/v1/embeddings":                            wire.OpenAIEmbeddings,
	"/v1/images/generations":                    wire.OpenAIImages,
	"/v1/messages":                              wire.AnthropicMessages,
	kinds.DeploymentPath + "chat/completions":   wire.OpenAIChat,
	kinds.DeploymentPath + "embeddings":         wire.OpenAIEmbeddings,
	kinds.DeploymentPath + "images/generations": wire.OpenAIImages,
	kinds.GeminiPath:                            wire.GeminiGenerate,
	kinds.VertexPath:                            wire.GeminiGenerate,
	kinds.BedrockConversePath:                   wire.BedrockConverse,
	kinds.BedrockInvokePath:                     wire.BedrockInvoke,
}

// maxBody bounds a request body the mock reads.
const maxBody = 32 << 20

// The model list's path, and Anthropic's token counting endpoint.
const (
	modelsPath      = "/v1/models"
	countTokensPath = "/v1/messages/count_tokens"
)

func isModels(path string) bool {
	if strings.HasSuffix(path, ":generateContent") || strings.HasSuffix(path, ":streamGenerateContent") {
		return false // Gemini's v1 API: /v1/models/MODEL:generateContent
	}
	return path == modelsPath || strings.HasPrefix(path, modelsPath+"/")
}

// writeError answers in the error shape of f's API.
func writeError(w http.ResponseWriter, f wire.Format, status int, code, msg string) {
	a := kinds.For(f, "")
	wire.WriteError(w, a, &wire.Error{Status: status, Type: a.ErrorType(status), Code: code, Message: msg})
}

// mockPNG is a 1x1 PNG, the image of every mock generation.
const mockPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAAC0lEQVQYV2NgAAIAAAUAAarVyFEAAAAASUVORK5CYII="

// writeImages answers an image generation as gpt-image-1 does: one image
// per n, and usage billing the output tokens of the quality and size asked.
func (c *mockCall) writeImages(w http.ResponseWriter, ri wire.RequestInfo) {
	n := max(1, min(ri.Choices, wire.MaxChoices))
	data := make([]any, n)
	for i := range data {
		data[i] = map[string]any{"b64_json": mockPNG}
	}
	out := n * ri.MaxOutput
	b, _ := json.Marshal(map[string]any{"created": c.created, "data": data, "output_format": "png",
		"usage": map[string]any{"input_tokens": c.in, "input_tokens_details": map[string]any{"text_tokens": c.in, "image_tokens": 0},
			"output_tokens": out, "output_tokens_details": map[string]any{"image_tokens": out, "text_tokens": 0}, "total_tokens": c.in + out}})
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}
