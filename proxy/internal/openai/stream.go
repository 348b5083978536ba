package openai

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// decoder reads the events of an OpenAI SSE stream:
//   - chat (and embeddings): the last chunk with a usage object, normally
//     the include_usage chunk before "data: [DONE]";
//   - Responses: the last event with a response.usage object, which is
//     response.completed, response.incomplete or response.failed;
//   - images: image_generation.completed's usage.
type decoder struct {
	f     wire.Format
	tok   wire.Tokens
	found bool
	final bool
	text  int64
}

func (d *decoder) Result() (wire.Tokens, bool) { return d.tok, d.found }
func (d *decoder) Final() bool                 { return d.final }
func (d *decoder) TextBytes() int64            { return d.text }

func (d *decoder) Event(_, data []byte) (usageOnly bool, err error) {
	d.text += streamedText(d.f, data)
	if d.f == wire.Unknown || !wire.HasUsageObject(data) {
		return false, nil
	}
	var (
		u     *wire.Usage
		model string
		tier  string
		final = d.f != wire.OpenAIResponses // chat: the usage chunk is the last
	)
	if d.f == wire.OpenAIResponses {
		var e struct {
			Type     string     `json:"type"`
			Response *wire.Body `json:"response"`
		}
		if err := json.Unmarshal(data, &e); err != nil {
			return false, fmt.Errorf("proxy: %v event: %w", d.f, err)
		}
		if e.Response != nil {
			u, model, tier = e.Response.Usage, e.Response.Model, e.Response.ServiceTier
		}
		switch e.Type {
		case "response.completed", "response.incomplete", "response.failed":
			final = true
		}
	} else {
		var e wire.Body
		if err := json.Unmarshal(data, &e); err != nil {
			return false, fmt.Errorf("proxy: %v event: %w", d.f, err)
		}
		usageOnly = d.f == wire.OpenAIChat && e.Usage != nil && len(e.Choices) == 0
		u, model, tier = e.UsageObject(), e.Model, e.ServiceTier
	}
	if u == nil {
		return usageOnly, nil
	}
	t, found, err := tokens(u, d.f)
	if err != nil {
		return usageOnly, fmt.Errorf("proxy: %v event: %w", d.f, err)
	}
	if found {
		t.Model, t.ServiceTier = model, tier
		d.tok, d.found = t, true
		d.final = d.final || final
	}
	return usageOnly, nil
}

// IsUsageOnlyChunk reports whether data, the data field of one chat stream
// event (the JSON after "data:"), is the usage-only chunk that
// stream_options.include_usage adds: a usage object and no choices (the
// "choices" field empty, null or absent).
func IsUsageOnlyChunk(data []byte) bool {
	if !wire.HasUsageObject(data) {
		return false
	}
	var b wire.Body
	return json.Unmarshal(data, &b) == nil && b.Usage != nil && len(b.Choices) == 0
}

// streamedText counts the generated text one event of format f carries,
// in bytes of its JSON string literals as written (escapes count as the
// bytes they take, the rule of the input estimate):
//   - chat: each choice's delta: content, refusal, reasoning_content,
//     reasoning, and each tool call's function name and arguments;
//   - Responses: the delta string of every *.delta event except
//     response.audio.delta (base64 audio, not text).
//
// Anything else, and data that is not valid JSON, counts 0.
func streamedText(f wire.Format, data []byte) int64 {
	if f != wire.OpenAIChat && f != wire.OpenAIResponses {
		return 0
	}
	typ, delta, ok := wire.DeltaEvent(data)
	if !ok {
		return 0
	}
	var n int64
	if f == wire.OpenAIChat {
		wire.Members(bytes.TrimSpace(data), func(k, v []byte) {
			if string(k) != `"choices"` || v[0] != '[' {
				return
			}
			wire.Elements(v, func(c []byte) {
				if c[0] != '{' {
					return
				}
				wire.Members(c, func(k, v []byte) {
					if string(k) == `"delta"` && v[0] == '{' {
						n += chatDeltaText(v)
					}
				})
			})
		})
		return n
	}
	if delta != nil && delta[0] == '"' && typ != nil && bytes.HasSuffix(typ, []byte(`.delta"`)) &&
		string(typ) != `"response.audio.delta"` {
		n = int64(wire.StringLen(delta))
	}
	return n
}

// chatDeltaText counts the text of one chat choice's delta object.
func chatDeltaText(d []byte) int64 {
	var n int64
	wire.Members(d, func(k, v []byte) {
		switch string(k) {
		case `"content"`, `"refusal"`, `"reasoning_content"`, `"reasoning"`:
			if v[0] == '"' {
				n += int64(wire.StringLen(v))
			}
		case `"tool_calls"`:
			if v[0] != '[' {
				return
			}
			wire.Elements(v, func(tc []byte) {
				if tc[0] != '{' {
					return
				}
				wire.Members(tc, func(k, v []byte) {
					if string(k) != `"function"` || v[0] != '{' {
						return
					}
					wire.Members(v, func(k, v []byte) {
						if (string(k) == `"name"` || string(k) == `"arguments"`) && v[0] == '"' {
							n += int64(wire.StringLen(v))
						}
					})
				})
			})
		}
	})
	return n
}
