package bedrock

import (
	"encoding/json"
	"net/http"

	"github.com/tokenbudget/tokenbudget/proxy/internal/anthropic"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// Adapter is the wire.Adapter of Bedrock's runtime: Converse (and
// ConverseStream), or with Invoke InvokeModel (and
// InvokeModelWithResponseStream) with a model family's own body. Requests
// are signed by the upstream's transport (SigV4), or carry a Bedrock API
// key as a bearer token.
type Adapter struct{ Invoke bool }

func (a Adapter) Format() wire.Format {
	if a.Invoke {
		return wire.BedrockInvoke
	}
	return wire.BedrockConverse
}

// Request reads a Converse body's cap (inferenceConfig.maxTokens) and
// prompt (messages, system, toolConfig; image, document and video blocks
// are attachments); an InvokeModel body is the model family's own:
// Anthropic's fields, or another's prompt, every string of it counted.
func (a Adapter) Request(r *wire.Request, body []byte, ri *wire.RequestInfo) {
	var s wire.Scan
	if a.Invoke {
		r.Common(ri)
		var msgs []json.RawMessage
		if json.Unmarshal(r.Messages, &msgs) == nil {
			s.Msgs = int64(len(msgs))
		}
		s.Value(body)
		s.Fill(ri)
		return
	}
	var ic struct {
		MaxTokens json.RawMessage `json:"maxTokens"`
	}
	if json.Unmarshal(r.InferenceConfig, &ic) == nil {
		ri.MaxOutput, ri.HasCap = wire.Cap(ic.MaxTokens)
	}
	s.Messages(r.Messages)
	s.Value(r.System)
	s.Raw(r.ToolConfig)
	s.Fill(ri)
}

// CapField is Converse's inferenceConfig.maxTokens (the settings name
// OpenAI's fields) unless the setting is none. An InvokeModel body gets
// none: Anthropic's requires max_tokens, and other families' fields are
// their own.
func (a Adapter) CapField(setting string) string {
	if a.Invoke || setting == wire.CapNone {
		return ""
	}
	return "inferenceConfig.maxTokens"
}

func (Adapter) Prepare(body []byte, _ *wire.RequestInfo) ([]byte, bool, error) {
	return body, false, nil
}

// Body reads Converse's usage, or an InvokeModel body's: Anthropic's (the
// only family whose invoke bodies carry usage in the captures); others
// have none there.
func (a Adapter) Body(data []byte) (wire.Tokens, bool, error) {
	if a.Invoke {
		return anthropic.Body(data)
	}
	return ConverseUsage(data)
}

// EventStreamType is the Content-Type of Bedrock's streamed answers.
const EventStreamType = "application/vnd.amazon.eventstream"

// Stream reads an event-stream: ConverseStream's metadata event, or
// InvokeModelWithResponseStream's chunks, each an event of the model
// family's own stream (Anthropic's, read as on /v1/messages).
func (a Adapter) Stream(mediaType string, _ bool) (wire.Stream, bool) {
	if mediaType != EventStreamType {
		return nil, false
	}
	if !a.Invoke {
		return &StreamParser{}, true
	}
	s := &invokeStream{}
	s.outer.Chunk = func(b []byte) {
		if _, err := s.inner.Event(nil, b); err != nil && s.err == nil {
			s.err = err
		}
	}
	return s, true
}

// Authorize sends a Bedrock API key as a bearer token; without one the
// transport signs the request.
func (Adapter) Authorize(h http.Header, c *wire.Credentials) {
	if c.BedrockToken != "" {
		h.Set("Authorization", "Bearer "+c.BedrockToken)
	}
}

// ErrorBody is e in the shape of Bedrock's REST-JSON errors: the exception
// in the x-amzn-ErrorType header (which the AWS SDKs read first), the
// message in the body, with the proxy's code and a budget refusal's limit
// beside it.
func (Adapter) ErrorBody(h http.Header, e *wire.Error) any {
	typ := awsStatus[e.Status]
	if typ == "" {
		typ = "InternalServerException"
	}
	h.Set("X-Amzn-Errortype", typ)
	return struct {
		Message string `json:"message"`
		Code    string `json:"code"`
		Limit   any    `json:"limit,omitempty"`
	}{e.Message, e.Code, e.Limit}
}

func (Adapter) ErrorType(status int) string { return wire.ErrorType(status) }

// awsStatus is the exception Bedrock's runtime answers an HTTP status with.
var awsStatus = map[int]string{
	http.StatusBadRequest:            "ValidationException",
	http.StatusUnauthorized:          "AccessDeniedException",
	http.StatusForbidden:             "AccessDeniedException",
	http.StatusNotFound:              "ResourceNotFoundException",
	http.StatusMethodNotAllowed:      "ValidationException",
	http.StatusRequestTimeout:        "ModelTimeoutException",
	http.StatusRequestEntityTooLarge: "ValidationException",
	http.StatusTooManyRequests:       "ThrottlingException",
	http.StatusServiceUnavailable:    "ServiceUnavailableException",
	http.StatusGatewayTimeout:        "ModelTimeoutException",
}

// invokeStream is an InvokeModelWithResponseStream body: the event-stream
// framing outside, the family's events inside.
type invokeStream struct {
	outer StreamParser
	inner anthropic.Decoder
	err   error // the first inner event that could not be read
}

func (s *invokeStream) Write(b []byte) (int, error) { return s.outer.Write(b) }

// Result is the Anthropic events' usage. A family whose events carry none
// is charged by the amazon-bedrock-invocationMetrics of the last chunk. The
// two may differ (a recorded stream's message_delta says 130 output tokens,
// its metrics 98): the model's own count is the one Anthropic bills by.
func (s *invokeStream) Result() (wire.Tokens, bool) {
	if t, ok := s.inner.Result(); ok {
		return t, true
	}
	return s.outer.Invocation()
}

func (s *invokeStream) Final() bool {
	if _, ok := s.inner.Result(); ok {
		return s.inner.Final()
	}
	_, ok := s.outer.Invocation()
	return ok
}

func (s *invokeStream) TextBytes() int64 { return s.inner.TextBytes() }

func (s *invokeStream) Err() error {
	if err := s.outer.Err(); err != nil {
		return err
	}
	return s.err
}
