package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/tokenbudget/tokenbudget/budget"
)

// dispatch handles the data of one complete event.
func (p *StreamParser) dispatch(data []byte) {
	if p.gem != nil {
		// Each chunk repeats the usage so far: the last one wins.
		p.gem.Event(data)
		p.tok, p.found = p.gem.Result()
		p.final, p.text = p.found && p.gem.Final(), p.gem.TextBytes()
		if err := p.gem.Err(); err != nil {
			p.fail(err)
		}
		return
	}
	p.text += streamedText(p.format, data)
	if !hasUsageObject(data) {
		return
	}
	var (
		u     *usage
		model string
		tier  string
		final = p.format != OpenAIResponses // chat: the usage chunk is the last
	)
	switch p.format {
	case OpenAIChat, OpenAIEmbeddings, OpenAIImages: // images: image_generation.completed
		var e body
		if err := json.Unmarshal(data, &e); err != nil {
			p.fail(fmt.Errorf("proxy: %v event: %w", p.format, err))
			return
		}
		p.usageOnly = p.format == OpenAIChat && e.Usage != nil && len(e.Choices) == 0
		u, model, tier = e.usage(), e.Model, e.ServiceTier
	case OpenAIResponses:
		var e struct {
			Type     string `json:"type"`
			Response *body  `json:"response"`
		}
		if err := json.Unmarshal(data, &e); err != nil {
			p.fail(fmt.Errorf("proxy: %v event: %w", p.format, err))
			return
		}
		if e.Response != nil {
			u, model, tier = e.Response.Usage, e.Response.Model, e.Response.ServiceTier
		}
		switch e.Type {
		case "response.completed", "response.incomplete", "response.failed":
			final = true
		}
	case AnthropicMessages:
		p.anthropic(data)
		return
	}
	if u == nil {
		return
	}
	t, found, err := u.tokens(p.format)
	if err != nil {
		p.fail(fmt.Errorf("proxy: %v event: %w", p.format, err))
		return
	}
	if found {
		t.Model, t.ServiceTier = model, tier
		p.tok, p.found = t, true
		p.final = p.final || final
	}
}

func (p *StreamParser) anthropic(data []byte) {
	var e struct {
		Type    string `json:"type"`
		Message *body  `json:"message"`
		Usage   *usage `json:"usage"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		p.fail(fmt.Errorf("proxy: %v event: %w", p.format, err))
		return
	}
	typ := e.Type
	if typ == "" {
		typ = string(p.event)
	}
	var u *usage
	model, final := p.tok.Model, false
	switch typ {
	case "message_start":
		if e.Message != nil {
			u, model = e.Message.Usage, e.Message.Model
		}
	case "message_delta":
		u, final = e.Usage, true
	}
	if u == nil {
		return
	}
	a := p.anth
	for i, c := range [...]count{u.InputTokens, u.CacheRead, u.CacheCreation, u.OutputTokens} {
		if c.OK {
			a[i] = c
		}
	}
	t, found := anthropicTokens(a[0], a[1], a[2], a[3])
	if !found {
		return
	}
	if t.Billable() > budget.MaxTokens {
		p.fail(fmt.Errorf("proxy: %v event: %w", p.format, errCount))
		return
	}
	t.Model = model
	p.anth, p.tok, p.found = a, t, true
	p.final = p.final || final
}

// deltaKey is in every event that streams text, in every format.
var deltaKey = []byte(`"delta"`)

// streamedText counts the generated text one event of format f carries,
// in bytes of its JSON string literals as written (escapes count as the
// bytes they take, the rule of the input estimate):
//   - OpenAIChat: each choice's delta: content, refusal, reasoning_content,
//     reasoning, and each tool call's function name and arguments;
//   - OpenAIResponses: the delta string of every *.delta event except
//     response.audio.delta (base64 audio, not text);
//   - AnthropicMessages: a content_block_delta's text, partial_json or
//     thinking (not a signature).
//
// Anything else, and data that is not valid JSON, counts 0.
func streamedText(f Format, data []byte) int64 {
	if !bytes.Contains(data, deltaKey) || !json.Valid(data) {
		return 0
	}
	b := bytes.TrimSpace(data)
	if len(b) == 0 || b[0] != '{' {
		return 0
	}
	var n int64
	switch f {
	case OpenAIChat:
		forMembers(b, func(k, v []byte) {
			if string(k) != `"choices"` || v[0] != '[' {
				return
			}
			forElements(v, func(c []byte) {
				if c[0] != '{' {
					return
				}
				forMembers(c, func(k, v []byte) {
					if string(k) == `"delta"` && v[0] == '{' {
						n += chatDeltaText(v)
					}
				})
			})
		})
	case OpenAIResponses:
		var typ, delta []byte
		forMembers(b, func(k, v []byte) {
			switch string(k) {
			case `"type"`:
				typ = v
			case `"delta"`:
				delta = v
			}
		})
		if delta != nil && delta[0] == '"' && typ != nil && bytes.HasSuffix(typ, []byte(`.delta"`)) &&
			string(typ) != `"response.audio.delta"` {
			n = int64(stringLen(delta))
		}
	case AnthropicMessages:
		var typ, delta []byte
		forMembers(b, func(k, v []byte) {
			switch string(k) {
			case `"type"`:
				typ = v
			case `"delta"`:
				delta = v
			}
		})
		if string(typ) == `"content_block_delta"` && delta != nil && delta[0] == '{' {
			forMembers(delta, func(k, v []byte) {
				switch string(k) {
				case `"text"`, `"partial_json"`, `"thinking"`:
					if v[0] == '"' {
						n += int64(stringLen(v))
					}
				}
			})
		}
	}
	return n
}

// chatDeltaText counts the text of one chat choice's delta object.
func chatDeltaText(d []byte) int64 {
	var n int64
	forMembers(d, func(k, v []byte) {
		switch string(k) {
		case `"content"`, `"refusal"`, `"reasoning_content"`, `"reasoning"`:
			if v[0] == '"' {
				n += int64(stringLen(v))
			}
		case `"tool_calls"`:
			if v[0] != '[' {
				return
			}
			forElements(v, func(tc []byte) {
				if tc[0] != '{' {
					return
				}
				forMembers(tc, func(k, v []byte) {
					if string(k) != `"function"` || v[0] != '{' {
						return
					}
					forMembers(v, func(k, v []byte) {
						if (string(k) == `"name"` || string(k) == `"arguments"`) && v[0] == '"' {
							n += int64(stringLen(v))
						}
					})
				})
			})
		}
	})
	return n
}
