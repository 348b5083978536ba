package mock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

	"github.com/tokenbudget/tokenbudget/proxy/internal/bedrock"
)

// writeConverse answers a Converse call as Bedrock does (the shapes of the
// recorded bedrock-converse captures): one body with usage, or an AWS
// event-stream of messageStart, a contentBlockDelta per word,
// contentBlockStop, messageStop and the metadata event with the usage.
func (c *mockCall) writeConverse(w http.ResponseWriter, stream bool) {
	stop := "end_turn"
	if c.finish == "length" {
		stop = "max_tokens"
	}
	usage := map[string]any{"inputTokens": c.in, "outputTokens": c.out, "totalTokens": c.in + c.out,
		"cacheReadInputTokens": 0, "cacheWriteInputTokens": 0}
	if !stream {
		b, _ := json.Marshal(map[string]any{"metrics": map[string]any{"latencyMs": 42},
			"output":     map[string]any{"message": map[string]any{"content": []any{map[string]any{"text": c.text()}}, "role": "assistant"}},
			"stopReason": stop, "usage": usage})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
		return
	}
	es := c.newEventStream(w)
	if !es.event("messageStart", map[string]any{"role": "assistant"}) {
		return
	}
	for i, wd := range c.words {
		if i > 0 {
			wd = " " + wd
		}
		if !es.event("contentBlockDelta", map[string]any{"contentBlockIndex": 0, "delta": map[string]any{"text": wd}}) {
			return
		}
	}
	_ = es.event("contentBlockStop", map[string]any{"contentBlockIndex": 0}) &&
		es.event("messageStop", map[string]any{"stopReason": stop}) &&
		es.event("metadata", map[string]any{"metrics": map[string]any{"latencyMs": 42}, "usage": usage})
}

// streamInvoke answers InvokeModelWithResponseStream for an Anthropic
// model: each of Anthropic's stream events base64 in a chunk event's
// bytes, the last with amazon-bedrock-invocationMetrics.
func (c *mockCall) streamInvoke(w http.ResponseWriter) {
	es := c.newEventStream(w)
	chunk := func(v map[string]any) bool {
		b, _ := json.Marshal(v)
		return es.event("chunk", map[string]any{"bytes": b}) // []byte: base64 in JSON
	}
	stop := "end_turn"
	if c.finish == "length" {
		stop = "max_tokens"
	}
	if !chunk(map[string]any{"type": "message_start", "message": map[string]any{"id": fmt.Sprintf("msg_bdrk_mock%d", c.n), "type": "message",
		"role": "assistant", "model": c.model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": c.in, "output_tokens": 1}}}) ||
		!chunk(map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}) {
		return
	}
	for i, wd := range c.words {
		if i > 0 {
			wd = " " + wd
		}
		if !chunk(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": wd}}) {
			return
		}
	}
	_ = chunk(map[string]any{"type": "content_block_stop", "index": 0}) &&
		chunk(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": c.out}}) &&
		chunk(map[string]any{"type": "message_stop", "amazon-bedrock-invocationMetrics": map[string]any{
			"inputTokenCount": c.in, "outputTokenCount": c.out, "invocationLatency": 42, "firstByteLatency": 7}})
}

// eventStream writes AWS event-stream messages, flushing each.
type eventStream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	enc   *eventstream.Encoder
	delay time.Duration
	first bool
}

func (c *mockCall) newEventStream(w http.ResponseWriter) *eventStream {
	w.Header().Set("Content-Type", bedrock.EventStreamType)
	w.WriteHeader(http.StatusOK)
	return &eventStream{w: w, rc: http.NewResponseController(w), enc: eventstream.NewEncoder(), delay: c.delay, first: true}
}

// event writes one event message; false when the client is gone.
func (s *eventStream) event(typ string, payload any) bool {
	if s.delay > 0 && !s.first {
		time.Sleep(s.delay)
	}
	s.first = false
	b, _ := json.Marshal(payload)
	m := eventstream.Message{Payload: b}
	m.Headers.Set(":event-type", eventstream.StringValue(typ))
	m.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	m.Headers.Set(":message-type", eventstream.StringValue("event"))
	var buf bytes.Buffer
	if err := s.enc.Encode(&buf, m); err != nil {
		return false
	}
	if _, err := s.w.Write(buf.Bytes()); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}
