package proxy

import (
	"encoding/json"
	"fmt"

	"github.com/tokenbudget/tokenbudget/budget"
)

// dispatch handles the data of one complete event.
func (p *StreamParser) dispatch(data []byte) {
	if !hasUsageObject(data) {
		return
	}
	var (
		u     *usage
		model string
		final = p.format != OpenAIResponses // chat: the usage chunk is the last
	)
	switch p.format {
	case OpenAIChat, OpenAIEmbeddings:
		var e body
		if err := json.Unmarshal(data, &e); err != nil {
			p.fail(fmt.Errorf("proxy: %v event: %w", p.format, err))
			return
		}
		p.usageOnly = p.format == OpenAIChat && e.Usage != nil && len(e.Choices) == 0
		u, model = e.Usage, e.Model
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
			u, model = e.Response.Usage, e.Response.Model
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
		t.Model = model
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
		if c.ok {
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
