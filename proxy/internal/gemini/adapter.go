package gemini

import (
	"encoding/json"
	"net/http"

	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// Adapter is the wire.Adapter of generateContent, on the Gemini API or
// (Vertex) on Vertex AI, whose credential is an OAuth token the upstream's
// transport adds.
type Adapter struct{ Vertex bool }

func (Adapter) Format() wire.Format { return wire.GeminiGenerate }

// Request reads a generateContent body: its cap and candidate count from
// generationConfig, its prompt from contents, systemInstruction and tools.
// The model and the stream are the path's; it names no end user
// (X-Budget-User does).
func (Adapter) Request(r *wire.Request, _ []byte, ri *wire.RequestInfo) {
	var gc struct {
		MaxOutputTokens json.RawMessage `json:"maxOutputTokens"`
		CandidateCount  json.RawMessage `json:"candidateCount"`
	}
	if json.Unmarshal(r.GenerationConfig, &gc) == nil {
		ri.MaxOutput, ri.HasCap = wire.Cap(gc.MaxOutputTokens)
		var v int64
		if json.Unmarshal(gc.CandidateCount, &v) == nil && v > 1 {
			ri.Choices = v
		}
	}
	var s wire.Scan
	s.Messages(r.Contents)
	s.Value(r.SystemInstruction)
	s.Raw(r.Tools)
	s.Fill(ri)
}

// CapField is generationConfig.maxOutputTokens whatever field the
// operator's setting names (those are OpenAI's), unless it is none.
func (Adapter) CapField(setting string) string {
	if setting == wire.CapNone {
		return ""
	}
	return "generationConfig.maxOutputTokens"
}

func (Adapter) Prepare(body []byte, _ *wire.RequestInfo) ([]byte, bool, error) {
	return body, false, nil
}

// Body reads one GenerateContentResponse, or a whole JSON-array stream. A
// whole body with a chunk that cannot be read reports no usage (the
// estimate stands in), as every kind's Body does: unlike a stream cut
// short, it is not what the API answers.
func (Adapter) Body(data []byte) (wire.Tokens, bool, error) {
	p := wire.NewJSONArray(&SSE{})
	p.Write(data)
	if err := p.Err(); err != nil {
		return wire.Tokens{}, false, err
	}
	t, found := p.Result()
	return t, found, nil
}

// Stream reads an alt=sse stream, or a streamGenerateContent answered
// without alt=sse: a JSON array of chunks, framed chunk by chunk so that a
// stream cut short keeps its last chunk's usage.
func (Adapter) Stream(mediaType string, requested bool) (wire.Stream, bool) {
	switch {
	case mediaType == "text/event-stream":
		return wire.NewSSE(&SSE{}), true
	case requested:
		return wire.NewJSONArray(&SSE{}), false
	}
	return nil, false
}

// Authorize sends the Gemini API key as x-goog-api-key; Vertex AI's token
// is the transport's.
func (a Adapter) Authorize(h http.Header, c *wire.Credentials) {
	if !a.Vertex && c.GeminiKey != "" {
		h.Set("X-Goog-Api-Key", c.GeminiKey)
	}
}

// ErrorBody is e in Google's error shape,
// {"error":{"code","message","status","details"}}: the SDKs read code and
// status; the proxy's code is the reason of an ErrorInfo detail, and a
// budget refusal's limit sits beside them.
func (Adapter) ErrorBody(_ http.Header, e *wire.Error) any {
	status := googleStatus[e.Status]
	if status == "" {
		status = "INTERNAL"
	}
	type errorInfo struct {
		Type   string `json:"@type"`
		Reason string `json:"reason"`
		Domain string `json:"domain"`
	}
	return struct {
		Error any `json:"error"`
	}{struct {
		Code    int         `json:"code"`
		Message string      `json:"message"`
		Status  string      `json:"status"`
		Details []errorInfo `json:"details"`
		Limit   any         `json:"limit,omitempty"`
	}{e.Status, e.Message, status, []errorInfo{{"type.googleapis.com/google.rpc.ErrorInfo", e.Code, "tokenbudget"}}, e.Limit}}
}

func (Adapter) ErrorType(status int) string { return wire.ErrorType(status) }

// googleStatus is the google.rpc status name of an HTTP status, as
// Google's APIs answer it.
var googleStatus = map[int]string{
	http.StatusBadRequest:            "INVALID_ARGUMENT",
	http.StatusUnauthorized:          "UNAUTHENTICATED",
	http.StatusForbidden:             "PERMISSION_DENIED",
	http.StatusNotFound:              "NOT_FOUND",
	http.StatusMethodNotAllowed:      "INVALID_ARGUMENT",
	http.StatusRequestTimeout:        "DEADLINE_EXCEEDED",
	http.StatusRequestEntityTooLarge: "INVALID_ARGUMENT",
	http.StatusTooManyRequests:       "RESOURCE_EXHAUSTED",
	http.StatusBadGateway:            "UNAVAILABLE",
	http.StatusServiceUnavailable:    "UNAVAILABLE",
	http.StatusGatewayTimeout:        "DEADLINE_EXCEEDED",
}
