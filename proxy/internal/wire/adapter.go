package wire

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
)

// Adapter is what one API operation's requests and responses differ in.
// The middleware, the recorder and the upstream ask a route's Adapter and
// never switch on its Format; a new API kind is one package implementing
// it (see proxy/doc.go). An Adapter holds no per-request state and is safe
// for concurrent use; the Stream it returns is per response.
type Adapter interface {
	// Format is the operation the adapter serves.
	Format() Format
	// Request reads ri from r, the top level of body (a JSON object), as
	// the operation's API names them: the model (unless the path names
	// it), the stream, the output cap, the end user, the service tier and
	// the counts the input estimate is made of.
	Request(r *Request, body []byte, ri *RequestInfo)
	// CapField is where a cap goes in a request without one, given the
	// operator's setting (CapAuto, CapNone or a field name): a top-level
	// member, or "parent.member"; "" when none is injected.
	CapField(setting string) string
	// Prepare returns the body to forward when the adapter changes it
	// (an OpenAI chat stream gets stream_options.include_usage), and
	// whether the response's usage-only events are then left out for
	// the client; body itself otherwise. err: not a JSON object.
	Prepare(body []byte, ri *RequestInfo) (out []byte, strip bool, err error)
	// Body reads the usage of a whole (non-streamed) response body. found
	// is false, with a nil error, when it reports none; err is non-nil for
	// a body that is not what the API answers or a count that is not an
	// integer from 0 to 2^53-1 (found is then false).
	Body(data []byte) (t Tokens, found bool, err error)
	// Stream returns the reader of a 2xx response body of media type
	// mediaType that the client asked to stream (requested) or the
	// media type says is streamed: nil when the body is read whole by
	// Body. streamed is whether it is a stream for the logs.
	Stream(mediaType string, requested bool) (s Stream, streamed bool)
	// Authorize puts the upstream's credential in h, from c; a credential
	// the transport adds itself (a signature, an OAuth token) is not set
	// here.
	Authorize(h http.Header, c *Credentials)
	// ErrorBody is e in the API's error shape, headers set on h (Bedrock's
	// x-amzn-ErrorType); it is marshalled as JSON.
	ErrorBody(h http.Header, e *Error) any
	// ErrorType is the API's error type of an HTTP status (OpenAI's and
	// Anthropic's "type").
	ErrorType(status int) string
}

// Stream reads a streamed response's usage as it passes through; Write
// never fails, so it can sit behind io.TeeReader or io.MultiWriter.
type Stream interface {
	io.Writer
	// Result is the usage seen so far (found false: none yet).
	Result() (t Tokens, found bool)
	// Final reports whether the stream's final usage has arrived.
	Final() bool
	// TextBytes is the generated text the stream carried so far, in bytes.
	TextBytes() int64
	// Err is the first problem met, for logging only.
	Err() error
}

// Credentials are the upstream keys an Adapter's Authorize picks from.
type Credentials struct {
	OpenAIKey, AnthropicKey, AzureKey, GeminiKey, BedrockToken string
}

// Error is one error answer, in no API's shape yet.
type Error struct {
	Status  int
	Type    string // the API's error type: rate_limit_error, ...
	Code    string
	Message string
	Param   string // the request field at fault, for OpenAI's param ("": null)
	// Limit is the machine-readable breach of a budget refusal (nil: none).
	Limit any
}

// Output cap settings (proxy.Config.CapField) that are not field names.
const (
	CapAuto = "auto"
	CapNone = "none"
)

// ErrorType is the error type OpenAI's API (and those that copy its shape)
// answers an HTTP status with.
func ErrorType(status int) string {
	switch status {
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusUnauthorized, http.StatusNotFound, http.StatusRequestEntityTooLarge, http.StatusForbidden,
		http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusRequestTimeout:
		return "invalid_request_error"
	}
	return "server_error"
}

// WriteError writes e in a's error shape as the whole response, with
// Content-Type and Content-Length, and no Content-Encoding.
func WriteError(w http.ResponseWriter, a Adapter, e *Error) {
	b, _ := json.Marshal(a.ErrorBody(w.Header(), e))
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Del("Content-Encoding")
	w.WriteHeader(e.Status)
	w.Write(append(b, '\n'))
}
