// Package anthropic is the Anthropic Messages API kind: its requests, its
// usage (bodies and SSE streams, also inside Bedrock's InvokeModel) and its
// error shape, behind wire.Adapter. It is pure: no network.
package anthropic

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy/internal/openai"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// Tokens maps an Anthropic usage: input_tokens excludes the cache reads and
// writes, so Input is their sum; output_tokens includes thinking, which
// Anthropic does not report apart, so it is all Output. write1h is the part
// of the writes cache_creation.ephemeral_1h_input_tokens puts in a 1-hour
// cache, never counted as more than the writes (the rest are 5-minute
// writes).
func Tokens(in, read, write, write1h, out wire.Count) (wire.Tokens, bool) {
	if !in.OK && !out.OK {
		return wire.Tokens{}, false
	}
	return wire.Tokens{
		Input:        in.V + read.V + write.V,
		Output:       out.V,
		CacheRead:    read.V,
		CacheWrite:   write.V,
		CacheWrite1h: min(write1h.V, write.V),
	}, true
}

// oneHour is a usage's 1-hour cache writes; absent in the older shape,
// which has no split.
func oneHour(u *wire.Usage) wire.Count {
	if u.CacheByTTL == nil {
		return wire.Count{}
	}
	return u.CacheByTTL.Ephemeral1h
}

// Body reads the usage of a Messages response body.
func Body(data []byte) (t wire.Tokens, found bool, err error) {
	var b wire.Body
	if err := b.Decode(data); err != nil {
		return wire.Tokens{}, false, fmt.Errorf("proxy: %v response: %w", wire.AnthropicMessages, err)
	}
	u := b.UsageObject()
	if u == nil {
		return wire.Tokens{}, false, nil
	}
	if t, found = Tokens(u.InputTokens, u.CacheRead, u.CacheCreation, oneHour(u), u.OutputTokens); !found {
		return wire.Tokens{}, false, nil
	}
	if t.Billable() > budget.MaxTokens {
		return wire.Tokens{}, false, fmt.Errorf("proxy: %v response: %w", wire.AnthropicMessages, wire.ErrCount)
	}
	t.Model, t.ServiceTier = b.Model, b.ServiceTier
	return t, true, nil
}

// Decoder reads the events of a Messages stream: message_start's
// message.usage, then each message_delta's usage field by field: a count
// the delta carries replaces the one seen before (counts are cumulative, so
// a repeated input count is not added twice), a count it omits is kept
// (message_delta repeats cache_creation_input_tokens without the split by
// lifetime: message_start's 1-hour part stays).
// Until a message_delta, a found Result is message_start's: the input and
// cache counts are known but the output count is a placeholder (typically
// 1), so a caller charging a stream cut short adds its output estimate.
// The zero value is ready to use.
type Decoder struct {
	tok   wire.Tokens
	found bool
	final bool
	text  int64
	anth  [5]wire.Count // input, cache read, cache write, 1-hour cache write, output
}

func (d *Decoder) Result() (wire.Tokens, bool) { return d.tok, d.found }
func (d *Decoder) Final() bool                 { return d.final }
func (d *Decoder) TextBytes() int64            { return d.text }

// Event consumes one event; name is its event field, read when the data
// names no type.
func (d *Decoder) Event(name, data []byte) (bool, error) {
	d.text += streamedText(data)
	if !wire.HasUsageObject(data) {
		return false, nil
	}
	var e struct {
		Type    string      `json:"type"`
		Message *wire.Body  `json:"message"`
		Usage   *wire.Usage `json:"usage"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return false, fmt.Errorf("proxy: %v event: %w", wire.AnthropicMessages, err)
	}
	typ := e.Type
	if typ == "" {
		typ = string(name)
	}
	var u *wire.Usage
	model, final := d.tok.Model, false
	switch typ {
	case "message_start":
		if e.Message != nil {
			u, model = e.Message.Usage, e.Message.Model
		}
	case "message_delta":
		u, final = e.Usage, true
	}
	if u == nil {
		return false, nil
	}
	a := d.anth
	for i, c := range [...]wire.Count{u.InputTokens, u.CacheRead, u.CacheCreation, oneHour(u), u.OutputTokens} {
		if c.OK {
			a[i] = c
		}
	}
	t, found := Tokens(a[0], a[1], a[2], a[3], a[4])
	if !found {
		return false, nil
	}
	if t.Billable() > budget.MaxTokens {
		return false, fmt.Errorf("proxy: %v event: %w", wire.AnthropicMessages, wire.ErrCount)
	}
	t.Model = model
	d.anth, d.tok, d.found = a, t, true
	d.final = d.final || final
	return false, nil
}

// streamedText counts the text of a content_block_delta: its text,
// partial_json or thinking (not a signature), in bytes as written.
func streamedText(data []byte) int64 {
	typ, delta, ok := wire.DeltaEvent(data)
	if !ok {
		return 0
	}
	var n int64
	if string(typ) == `"content_block_delta"` && delta != nil && delta[0] == '{' {
		wire.Members(delta, func(k, v []byte) {
			switch string(k) {
			case `"text"`, `"partial_json"`, `"thinking"`:
				if v[0] == '"' {
					n += int64(wire.StringLen(v))
				}
			}
		})
	}
	return n
}

// Adapter is the wire.Adapter of Anthropic's Messages API.
type Adapter struct{}

func (Adapter) Format() wire.Format { return wire.AnthropicMessages }

// Request reads the fields Messages shares with OpenAI's bodies
// (metadata.user_id names the end user) and the prompt: messages, system,
// tools.
func (Adapter) Request(r *wire.Request, _ []byte, ri *wire.RequestInfo) {
	r.Common(ri)
	var s wire.Scan
	openai.Prompt(r, &s)
	s.Fill(ri)
}

// CapField is none: the API refuses a request without max_tokens, so
// there is nothing to decide for the client.
func (Adapter) CapField(string) string { return "" }

func (Adapter) Prepare(body []byte, _ *wire.RequestInfo) ([]byte, bool, error) {
	return body, false, nil
}

func (Adapter) Body(data []byte) (wire.Tokens, bool, error) { return Body(data) }

// Stream reads an SSE response; any other body is read whole.
func (Adapter) Stream(mediaType string, _ bool) (wire.Stream, bool) {
	if mediaType != "text/event-stream" {
		return nil, false
	}
	return wire.NewSSE(&Decoder{}), true
}

// Authorize sends the Anthropic key as x-api-key.
func (Adapter) Authorize(h http.Header, c *wire.Credentials) {
	if c.AnthropicKey != "" {
		h.Set("X-Api-Key", c.AnthropicKey)
	}
}

// ErrorBody is Anthropic's {"type":"error","error":{"type","message"}},
// with the proxy's code and a budget refusal's limit.
func (Adapter) ErrorBody(_ http.Header, e *wire.Error) any {
	return struct {
		Type  string `json:"type"`
		Error any    `json:"error"`
	}{"error", struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Code    string `json:"code,omitempty"`
		Limit   any    `json:"limit,omitempty"`
	}{e.Type, e.Message, e.Code, e.Limit}}
}

// ErrorType is Anthropic's type of an HTTP status.
func (Adapter) ErrorType(status int) string {
	switch status {
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusRequestTimeout:
		return "invalid_request_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	return "api_error"
}
