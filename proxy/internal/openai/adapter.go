package openai

import (
	"encoding/json"
	"mime"
	"net/http"

	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// Adapter is the wire.Adapter of one OpenAI operation (wire.Unknown: a
// path the proxy does not know, answered in OpenAI's shape).
type Adapter struct {
	// F is the operation.
	F wire.Format
	// Azure has Authorize send the Azure OpenAI key as api-key instead of
	// OpenAI's bearer token.
	Azure bool
}

// Format is a.F.
func (a Adapter) Format() wire.Format { return a.F }

// Request reads the model, stream, cap, user and tier every OpenAI
// operation names alike, n for chat and images, and the prompt: the
// messages or input (and instructions, tools, functions), the embeddings
// input, or an image prompt, whose quality and size set the output.
func (a Adapter) Request(r *wire.Request, _ []byte, ri *wire.RequestInfo) {
	r.Common(ri)
	if a.F == wire.OpenAIChat || a.F == wire.OpenAIImages {
		var n int64
		if json.Unmarshal(r.N, &n) == nil && n > 1 {
			ri.Choices = n
		}
	}
	var s wire.Scan
	switch a.F {
	case wire.OpenAIEmbeddings:
		s.Embeddings(r.Input)
	case wire.OpenAIImages:
		s.Value(r.Prompt)
		var quality, size string
		_ = json.Unmarshal(r.Quality, &quality)
		_ = json.Unmarshal(r.Size, &size)
		// The output is not the client's to cap: each image costs what
		// its quality and size bill, so that is the cap it sets.
		ri.MaxOutput, ri.HasCap = imageOutputTokens(quality, size), true
	default:
		Prompt(r, &s)
	}
	s.Fill(ri)
}

// Prompt counts the prompt of a chat, Responses or Anthropic Messages
// body: messages, input, system, instructions, and the raw tool and
// function definitions.
func Prompt(r *wire.Request, s *wire.Scan) {
	s.Messages(r.Messages)
	s.Messages(r.Input)
	s.Value(r.System)
	s.Value(r.Instructions)
	s.Raw(r.Tools)
	s.Raw(r.Functions)
}

// The cap fields of OpenAI's operations (proxy.Config.CapField's names).
const (
	MaxTokens           = "max_tokens"
	MaxCompletionTokens = "max_completion_tokens"
	MaxOutputTokens     = "max_output_tokens"
)

// CapField: max_completion_tokens on chat (max_tokens is deprecated there
// and refused by reasoning models), max_output_tokens on Responses, the
// operator's field when it names one; none on embeddings (no output) and
// images (their quality and size set it).
func (a Adapter) CapField(setting string) string {
	switch a.F {
	case wire.OpenAIChat, wire.OpenAIResponses:
	default:
		return ""
	}
	switch setting {
	case wire.CapNone:
		return ""
	case wire.CapAuto, "":
		if a.F == wire.OpenAIChat {
			return MaxCompletionTokens
		}
		return MaxOutputTokens
	}
	return setting
}

// Prepare asks a chat stream for its usage (stream_options.include_usage)
// when the client did not: the usage-only chunk that adds is then left out
// for the client.
func (a Adapter) Prepare(body []byte, ri *wire.RequestInfo) ([]byte, bool, error) {
	if a.F != wire.OpenAIChat || !ri.Stream || ri.IncludeUsage {
		return body, false, nil
	}
	out, err := WithIncludeUsage(body)
	return out, err == nil, err
}

// Body reads a response body's usage object (Groq's x_groq.usage when it
// has none at the top).
func (a Adapter) Body(data []byte) (wire.Tokens, bool, error) { return body(a.F, data) }

// Stream reads an SSE response; any other body is read whole.
func (a Adapter) Stream(mediaType string, _ bool) (wire.Stream, bool) {
	if mediaType != "text/event-stream" {
		return nil, false
	}
	return wire.NewSSE(&decoder{f: a.F}), true
}

// Authorize sends the OpenAI key as a bearer token, or Azure's as api-key.
func (a Adapter) Authorize(h http.Header, c *wire.Credentials) {
	switch {
	case a.Azure:
		if c.AzureKey != "" {
			h.Set("Api-Key", c.AzureKey)
		}
	case a.F != wire.Unknown && c.OpenAIKey != "":
		h.Set("Authorization", "Bearer "+c.OpenAIKey)
	}
}

// ErrorBody is OpenAI's {"error":{"message","type","param","code"}}, with
// a budget refusal's limit beside them.
func (Adapter) ErrorBody(_ http.Header, e *wire.Error) any {
	var param *string
	if e.Param != "" {
		param = &e.Param
	}
	return struct {
		Error any `json:"error"`
	}{struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
		Limit   any     `json:"limit,omitempty"`
	}{e.Message, e.Type, param, e.Code, e.Limit}}
}

// ErrorType is OpenAI's type of an HTTP status.
func (Adapter) ErrorType(status int) string { return wire.ErrorType(status) }

// MediaType is the media type of a Content-Type header value ("" when it
// has none).
func MediaType(contentType string) string {
	ct, _, _ := mime.ParseMediaType(contentType)
	return ct
}

// WithIncludeUsage returns body with stream_options.include_usage set to
// true, every other member kept. A body without stream_options gets it
// inserted first, byte for byte otherwise; one with stream_options has that
// object rewritten.
func WithIncludeUsage(body []byte) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return nil, wire.ErrBody
	}
	so, ok := top["stream_options"]
	if !ok {
		return wire.InsertFirst(body, `"stream_options":{"include_usage":true}`, len(top) == 0), nil
	}
	var opts map[string]json.RawMessage
	if err := json.Unmarshal(so, &opts); err != nil || opts == nil {
		opts = map[string]json.RawMessage{}
	}
	opts["include_usage"] = json.RawMessage("true")
	nb, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	top["stream_options"] = nb
	return json.Marshal(top)
}

// imageOutputTokens is the output tokens gpt-image models bill for one
// image of a quality and size (OpenAI's image generation guide); an
// unknown, absent or "auto" quality or size is estimated at the largest,
// so no image outgrows what was admitted (the actual usage corrects it).
func imageOutputTokens(quality, size string) int64 {
	col := 1 // 1024x1536, the largest
	switch size {
	case "1024x1024":
		col = 0
	case "1536x1024":
		col = 2
	}
	row, ok := imageTokens[quality]
	if !ok {
		row = imageTokens["high"]
	}
	return row[col]
}

// imageTokens is gpt-image's output tokens per image by quality, for the
// sizes 1024x1024, 1024x1536 and 1536x1024.
var imageTokens = map[string][3]int64{
	"low":    {272, 408, 400},
	"medium": {1056, 1584, 1568},
	"high":   {4160, 6240, 6208},
}
