package bedrock

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// DefaultMaxFrameSize caps one event-stream message when
// StreamParser.MaxFrameSize is 0. Bedrock's events are small (a text delta,
// the metadata event); a larger frame is skipped, not buffered.
const DefaultMaxFrameSize = 1 << 20

// ErrFrameTooLarge reports a frame longer than the parser's MaxFrameSize; it
// was skipped.
var ErrFrameTooLarge = errors.New("bedrock event-stream frame exceeds the size limit")

// preludeLen is the event-stream prelude: total length and headers length,
// both big-endian uint32, then the prelude CRC. Only the total length is read
// here, to know when a whole frame has arrived; the frame itself (CRCs,
// headers, payload) is decoded by the SDK's eventstream.Decoder.
const preludeLen = 12

// StreamParser is an io.Writer over a ConverseStream response body
// (application/vnd.amazon.eventstream). Write never fails, so it can sit in
// an io.TeeReader or io.MultiWriter next to the client: a frame it cannot
// decode is skipped and noted in Err.
//
// Usage is in the metadata event, the last event of a complete stream. A
// stream cut before it has no Result; TextBytes then says how much generated
// text the client was sent, for the caller's estimate. Memory is bounded by
// MaxFrameSize. The zero value is ready to use; not safe for concurrent use.
type StreamParser struct {
	// MaxFrameSize caps one frame, in bytes; 0 means DefaultMaxFrameSize.
	MaxFrameSize int
	// Chunk, when set, gets the decoded bytes of each chunk event of an
	// InvokeModelWithResponseStream body: one event of the model family's
	// own stream (Anthropic's message_start, content_block_delta, ...).
	// The caller reads the usage there; the parser keeps the
	// amazon-bedrock-invocationMetrics of the last chunk (Invocation).
	Chunk func(data []byte)

	buf   []byte
	skip  int64 // bytes of an oversized frame still to discard
	dec   *eventstream.Decoder
	tok   wire.Tokens
	found bool
	final bool
	text  int64
	err   error
	inv   wire.Tokens // amazon-bedrock-invocationMetrics
	invOK bool
}

// Invocation returns the amazon-bedrock-invocationMetrics of an
// InvokeModelWithResponseStream body, sent with its last chunk: input and
// output counts for any model family. found is false before it arrives.
func (p *StreamParser) Invocation() (t wire.Tokens, found bool) { return p.inv, p.invOK }

// Result returns the usage of the metadata event; found is false until it
// has been seen (the caller then falls back to its estimate).
func (p *StreamParser) Result() (t wire.Tokens, found bool) { return p.tok, p.found }

// Final reports whether the metadata event, which carries the whole
// response's usage, has been seen.
func (p *StreamParser) Final() bool { return p.final }

// TextBytes is how many bytes of generated content the contentBlockDelta
// events decoded so far carried: text, reasoning text and tool-use input, as
// decoded strings.
func (p *StreamParser) TextBytes() int64 { return p.text }

// Err returns the first problem met (a bad frame, an exception event, bad
// usage JSON, an oversized frame). For logging only.
func (p *StreamParser) Err() error { return p.err }

func (p *StreamParser) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

func (p *StreamParser) max() int {
	if p.MaxFrameSize > 0 {
		return p.MaxFrameSize
	}
	return DefaultMaxFrameSize
}

// Write consumes stream bytes; it always reports len(b), nil.
func (p *StreamParser) Write(b []byte) (int, error) {
	n := len(b)
	if p.skip > 0 {
		if int64(len(b)) <= p.skip {
			p.skip -= int64(len(b))
			return n, nil
		}
		b = b[p.skip:]
		p.skip = 0
	}
	p.buf = append(p.buf, b...)
	for len(p.buf) >= preludeLen {
		total := int64(binary.BigEndian.Uint32(p.buf))
		if total < preludeLen+4 {
			// The framing is lost: nothing after this can be trusted to
			// start a frame.
			p.fail(fmt.Errorf("bedrock event-stream: frame length %d", total))
			p.buf = nil
			p.skip = 1 << 62
			return n, nil
		}
		if total > int64(p.max()) {
			p.fail(fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, total))
			if int64(len(p.buf)) >= total {
				p.buf = p.buf[total:]
				continue
			}
			p.skip = total - int64(len(p.buf))
			p.buf = p.buf[:0]
			break
		}
		if int64(len(p.buf)) < total {
			break
		}
		// The SDK's decoder sizes the payload as total - headers - 16 in
		// uint32 arithmetic: a headers length past the frame would make it
		// allocate gigabytes before the CRC check can fail.
		if int64(binary.BigEndian.Uint32(p.buf[4:])) > total-preludeLen-4 {
			p.fail(fmt.Errorf("bedrock event-stream: headers length %d in a %d-byte frame", binary.BigEndian.Uint32(p.buf[4:]), total))
		} else {
			p.frame(p.buf[:total])
		}
		p.buf = p.buf[total:]
	}
	// Keep the unfinished frame in a buffer of its own so the consumed
	// prefix can be collected.
	if len(p.buf) == 0 {
		p.buf = nil
	} else if cap(p.buf) > 2*p.max() {
		p.buf = append([]byte(nil), p.buf...)
	}
	return n, nil
}

func header(m eventstream.Message, name string) string {
	v := m.Headers.Get(name)
	if v == nil {
		return ""
	}
	s, _ := v.Get().(string)
	return s
}

func (p *StreamParser) frame(f []byte) {
	if p.dec == nil {
		p.dec = eventstream.NewDecoder()
	}
	m, err := p.dec.Decode(bytes.NewReader(f), nil)
	if err != nil {
		p.fail(fmt.Errorf("bedrock event-stream: %w", err))
		return
	}
	switch mt := header(m, ":message-type"); mt {
	case "event":
	case "exception", "error":
		p.fail(fmt.Errorf("bedrock event-stream %s %q: %.200s", mt,
			header(m, ":exception-type")+header(m, ":error-code"), m.Payload))
		return
	default:
		return
	}
	switch header(m, ":event-type") {
	case "chunk":
		p.chunk(m.Payload)
	case "contentBlockDelta":
		var e struct {
			Delta struct {
				Text      string `json:"text"`
				Reasoning struct {
					Text string `json:"text"`
				} `json:"reasoningContent"`
				ToolUse struct {
					Input string `json:"input"`
				} `json:"toolUse"`
			} `json:"delta"`
		}
		if json.Unmarshal(m.Payload, &e) == nil {
			d := e.Delta
			p.text += int64(len(d.Text) + len(d.Reasoning.Text) + len(d.ToolUse.Input))
		}
	case "metadata":
		var e struct {
			Usage *converseUsage `json:"usage"`
		}
		if err := json.Unmarshal(m.Payload, &e); err != nil {
			p.fail(fmt.Errorf("bedrock metadata event: %w", err))
			return
		}
		if e.Usage == nil {
			return
		}
		if t, ok := e.Usage.tokens(); ok {
			p.tok, p.found, p.final = t, true, true
		}
	}
}

// chunk handles an InvokeModelWithResponseStream chunk event: its payload
// is {"bytes": base64 of one event of the model's own stream}.
func (p *StreamParser) chunk(payload []byte) {
	var c struct {
		Bytes []byte `json:"bytes"` // base64 in JSON
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		p.fail(fmt.Errorf("bedrock chunk event: %w", err))
		return
	}
	var e struct {
		Metrics *struct {
			Input      wire.Count `json:"inputTokenCount"`
			Output     wire.Count `json:"outputTokenCount"`
			CacheRead  wire.Count `json:"cacheReadInputTokenCount"`
			CacheWrite wire.Count `json:"cacheWriteInputTokenCount"`
		} `json:"amazon-bedrock-invocationMetrics"`
	}
	if bytes.Contains(c.Bytes, []byte(`"amazon-bedrock-invocationMetrics"`)) && json.Unmarshal(c.Bytes, &e) == nil && e.Metrics != nil {
		m := e.Metrics
		if m.Input.OK || m.Output.OK {
			p.inv = wire.Tokens{Input: m.Input.V + m.CacheRead.V + m.CacheWrite.V, Output: m.Output.V, CacheRead: m.CacheRead.V, CacheWrite: m.CacheWrite.V}
			p.invOK = true
		}
	}
	if p.Chunk != nil {
		p.Chunk(c.Bytes)
	}
}
