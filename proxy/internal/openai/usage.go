// Package openai is the OpenAI API kind: Chat Completions, Responses,
// Embeddings and image generations, as OpenAI and the OpenAI-compatible
// servers (DeepSeek, Groq, Mistral, xAI, OpenRouter, Together, vLLM,
// Ollama) and Azure OpenAI serve them. It reads their requests, their usage
// (bodies and SSE streams) and writes their error shape, behind
// wire.Adapter. It is pure: no network.
package openai

import (
	"fmt"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// tokens maps u, reported by a response of format f, to wire.Tokens. found
// is false when u carries neither an input nor an output count.
func tokens(u *wire.Usage, f wire.Format) (t wire.Tokens, found bool, err error) {
	switch f {
	case wire.OpenAIChat:
		cached := u.PromptDetails.Cached
		if !cached.OK {
			cached = u.PromptCacheHit
		}
		if !cached.OK {
			cached = u.CachedTokens
		}
		t, found = Tokens(u.PromptTokens, u.CompletionTokens, cached, u.CompletionDetails.Reasoning, u.TotalTokens)
		t.CacheWrite = min(u.PromptDetails.CacheWrite.V, t.Input-t.CacheRead)
	case wire.OpenAIResponses:
		t, found = Tokens(u.InputTokens, u.OutputTokens, u.InputDetails.Cached, u.OutputDetails.Reasoning, u.TotalTokens)
	case wire.OpenAIEmbeddings:
		in := u.PromptTokens
		if !in.OK {
			in = u.TotalTokens
		}
		t, found = wire.Tokens{Input: in.V}, in.OK
	case wire.OpenAIImages:
		// gpt-image usage: input_tokens are the prompt's text and image
		// tokens, output_tokens the generated image tokens; no reasoning.
		t, found = Tokens(u.InputTokens, u.OutputTokens, u.InputDetails.Cached, wire.Count{}, u.TotalTokens)
	}
	if found && t.Billable() > budget.MaxTokens {
		return wire.Tokens{}, false, wire.ErrCount
	}
	return t, found, nil
}

// Tokens maps an OpenAI usage: the prompt count includes the cached
// tokens, the completion count includes the reasoning tokens. A breakdown
// larger than its total is clamped to it, so billable stays prompt +
// completion. One exception keeps compatible servers that report reasoning
// beside the completion count from being undercounted: when total is given
// and equals prompt + completion + reasoning with reasoning > 0, the
// completion count is taken as excluding reasoning.
func Tokens(prompt, completion, cached, reasoning, total wire.Count) (wire.Tokens, bool) {
	if !prompt.OK && !completion.OK {
		return wire.Tokens{}, false
	}
	t := wire.Tokens{Input: prompt.V, CacheRead: min(cached.V, prompt.V)}
	r := reasoning.V
	if r > 0 && total.OK && total.V == prompt.V+completion.V+r {
		t.Output, t.Reasoning = completion.V, r
	} else {
		r = min(r, completion.V)
		t.Output, t.Reasoning = completion.V-r, r
	}
	return t, true
}

// body reads the usage of a non-streamed response of format f.
func body(f wire.Format, data []byte) (t wire.Tokens, found bool, err error) {
	var b wire.Body
	if err := b.Decode(data); err != nil {
		return wire.Tokens{}, false, fmt.Errorf("proxy: %v response: %w", f, err)
	}
	u := b.UsageObject()
	if u == nil {
		return wire.Tokens{}, false, nil
	}
	t, found, err = tokens(u, f)
	if err != nil {
		return wire.Tokens{}, false, fmt.Errorf("proxy: %v response: %w", f, err)
	}
	if found {
		t.Model, t.ServiceTier = b.Model, b.ServiceTier
	}
	return t, found, nil
}
