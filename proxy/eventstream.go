package proxy

import (
	"io"

	"github.com/tokenbudget/tokenbudget/proxy/internal/bedrock"
)

// usageStream reads a streamed response's usage as it passes through: an
// SSE StreamParser, a Gemini JSON-array stream, a Bedrock event-stream.
type usageStream interface {
	io.Writer
	Result() (Tokens, bool)
	Final() bool
	TextBytes() int64
	Err() error
}

// eventStreamType is the Content-Type of Bedrock's streamed answers.
const eventStreamType = "application/vnd.amazon.eventstream"

// newEventStream reads a Bedrock event-stream of format f: ConverseStream's
// metadata event, or InvokeModelWithResponseStream's chunks, each an event
// of the model family's own stream (Anthropic's, read as on /v1/messages).
func newEventStream(f Format) usageStream {
	if f == BedrockConverse {
		return &bedrock.StreamParser{}
	}
	s := &invokeStream{inner: NewStreamParser(AnthropicMessages)}
	s.outer.Chunk = s.inner.dispatch
	return s
}

// invokeStream is an InvokeModelWithResponseStream body: the event-stream
// framing outside, the family's events inside.
type invokeStream struct {
	outer bedrock.StreamParser
	inner *StreamParser
}

func (s *invokeStream) Write(b []byte) (int, error) { return s.outer.Write(b) }

// Result is the Anthropic events' usage. A family whose events carry none
// is charged by the amazon-bedrock-invocationMetrics of the last chunk. The
// two may differ (a recorded stream's message_delta says 130 output tokens,
// its metrics 98): the model's own count is the one Anthropic bills by.
func (s *invokeStream) Result() (Tokens, bool) {
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
	return s.inner.Err()
}
