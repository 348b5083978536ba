package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy/internal/bedrock"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// Format is the API family of a route: it decides where a response reports
// its usage and how that usage maps to a budget.Usage.
type Format int

// The route families the proxy serves.
const (
	Unknown           Format = iota
	OpenAIChat               // POST /v1/chat/completions
	OpenAIResponses          // POST /v1/responses
	OpenAIEmbeddings         // POST /v1/embeddings
	AnthropicMessages        // POST /v1/messages
	OpenAIImages             // POST /v1/images/generations
	// GeminiGenerate is the Gemini API's and Vertex AI's generateContent:
	// POST /{version}/models/{model}:generateContent (Vertex:
	// /{version}/projects/{p}/locations/{l}/publishers/google/models/...),
	// and :streamGenerateContent, streamed as SSE with alt=sse, else as a
	// JSON array of chunks. The model is in the path.
	GeminiGenerate
	// BedrockConverse is Amazon Bedrock's Converse API: POST
	// /model/{modelId}/converse, and /converse-stream (an AWS event-stream).
	BedrockConverse
	// BedrockInvoke is Bedrock's InvokeModel with a model family's own body
	// (Anthropic's Messages body for anthropic.* models): POST
	// /model/{modelId}/invoke, and /invoke-with-response-stream.
	BedrockInvoke
)

// FormatForPath returns the Format of a request path (URL.Path, without
// query). Only the exact paths listed with the Format constants match; any
// other path is Unknown and false.
func FormatForPath(path string) (Format, bool) {
	switch path {
	case "/v1/chat/completions":
		return OpenAIChat, true
	case "/v1/responses":
		return OpenAIResponses, true
	case "/v1/embeddings":
		return OpenAIEmbeddings, true
	case "/v1/messages":
		return AnthropicMessages, true
	case "/v1/images/generations":
		return OpenAIImages, true
	}
	return Unknown, false
}

// String returns a short name for f, such as "openai-chat".
func (f Format) String() string {
	switch f {
	case OpenAIChat:
		return "openai-chat"
	case OpenAIResponses:
		return "openai-responses"
	case OpenAIEmbeddings:
		return "openai-embeddings"
	case AnthropicMessages:
		return "anthropic-messages"
	case OpenAIImages:
		return "openai-images"
	case GeminiGenerate:
		return "gemini-generate"
	case BedrockConverse:
		return "bedrock-converse"
	case BedrockInvoke:
		return "bedrock-invoke"
	}
	return "unknown"
}

// Provider returns the default provider name of f's route family: "openai"
// or "anthropic" ("" for Unknown).
func (f Format) Provider() string {
	switch f {
	case OpenAIChat, OpenAIResponses, OpenAIEmbeddings, OpenAIImages:
		return "openai"
	case AnthropicMessages:
		return "anthropic"
	case GeminiGenerate:
		return "gemini"
	case BedrockConverse, BedrockInvoke:
		return "bedrock"
	}
	return ""
}

// Tokens is the usage a response reports, mapped to the tracker's counting
// rules; see wire.Tokens.
type Tokens = wire.Tokens

// errCount reports a token count that is not an integer from 0 to 2^53-1.
var errCount = wire.ErrCount

// count is one optional token count of a usage object.
type count = wire.Count

type details struct {
	Cached    count `json:"cached_tokens"`
	Reasoning count `json:"reasoning_tokens"`
	// CacheWrite is OpenRouter's prompt_tokens_details.cache_write_tokens,
	// inside prompt_tokens like the cached count.
	CacheWrite count `json:"cache_write_tokens"`
}

// usage holds the usage fields of every shape: OpenAI chat and embeddings
// (prompt/completion), OpenAI Responses (input/output with details) and
// Anthropic (input/output plus the cache counts beside them).
type usage struct {
	PromptTokens      count   `json:"prompt_tokens"`
	CompletionTokens  count   `json:"completion_tokens"`
	InputTokens       count   `json:"input_tokens"`
	OutputTokens      count   `json:"output_tokens"`
	TotalTokens       count   `json:"total_tokens"`
	CacheRead         count   `json:"cache_read_input_tokens"`
	CacheCreation     count   `json:"cache_creation_input_tokens"`
	PromptDetails     details `json:"prompt_tokens_details"`
	CompletionDetails details `json:"completion_tokens_details"`
	InputDetails      details `json:"input_tokens_details"`
	OutputDetails     details `json:"output_tokens_details"`
	// OpenAI-compatible servers that report the cache hit elsewhere than
	// prompt_tokens_details: DeepSeek's prompt_cache_hit_tokens (older
	// responses carry only it; newer ones repeat it in the details, counted
	// once) and Together's usage.cached_tokens.
	PromptCacheHit count `json:"prompt_cache_hit_tokens"`
	CachedTokens   count `json:"cached_tokens"`
}

// tokens maps u, reported by a response of format f, to Tokens. found is
// false when u carries neither an input nor an output count.
func (u *usage) tokens(f Format) (t Tokens, found bool, err error) {
	switch f {
	case OpenAIChat:
		cached := u.PromptDetails.Cached
		if !cached.OK {
			cached = u.PromptCacheHit
		}
		if !cached.OK {
			cached = u.CachedTokens
		}
		t, found = openAITokens(u.PromptTokens, u.CompletionTokens, cached, u.CompletionDetails.Reasoning, u.TotalTokens)
		t.CacheWrite = min(u.PromptDetails.CacheWrite.V, t.Input-t.CacheRead)
	case OpenAIResponses:
		t, found = openAITokens(u.InputTokens, u.OutputTokens, u.InputDetails.Cached, u.OutputDetails.Reasoning, u.TotalTokens)
	case OpenAIEmbeddings:
		in := u.PromptTokens
		if !in.OK {
			in = u.TotalTokens
		}
		t, found = Tokens{Input: in.V}, in.OK
	case AnthropicMessages:
		t, found = anthropicTokens(u.InputTokens, u.CacheRead, u.CacheCreation, u.OutputTokens)
	case OpenAIImages:
		// gpt-image usage: input_tokens are the prompt's text and image
		// tokens, output_tokens the generated image tokens; no reasoning.
		t, found = openAITokens(u.InputTokens, u.OutputTokens, u.InputDetails.Cached, count{}, u.TotalTokens)
	}
	if found && t.Billable() > budget.MaxTokens {
		return Tokens{}, false, errCount
	}
	return t, found, nil
}

// openAITokens maps an OpenAI usage: the prompt count includes the cached
// tokens, the completion count includes the reasoning tokens. A breakdown
// larger than its total is clamped to it, so billable stays prompt +
// completion. One exception keeps compatible servers that report reasoning
// beside the completion count from being undercounted: when total is given
// and equals prompt + completion + reasoning with reasoning > 0, the
// completion count is taken as excluding reasoning.
func openAITokens(prompt, completion, cached, reasoning, total count) (Tokens, bool) {
	if !prompt.OK && !completion.OK {
		return Tokens{}, false
	}
	t := Tokens{Input: prompt.V, CacheRead: min(cached.V, prompt.V)}
	r := reasoning.V
	if r > 0 && total.OK && total.V == prompt.V+completion.V+r {
		t.Output, t.Reasoning = completion.V, r
	} else {
		r = min(r, completion.V)
		t.Output, t.Reasoning = completion.V-r, r
	}
	return t, true
}

// anthropicTokens maps an Anthropic usage: input_tokens excludes the cache
// reads and writes, so Input is their sum; output_tokens includes thinking,
// which Anthropic does not report apart, so it is all Output.
func anthropicTokens(in, read, write, out count) (Tokens, bool) {
	if !in.OK && !out.OK {
		return Tokens{}, false
	}
	return Tokens{
		Input:      in.V + read.V + write.V,
		Output:     out.V,
		CacheRead:  read.V,
		CacheWrite: write.V,
	}, true
}

// body is the top level of a non-streamed response of any format, and of
// an OpenAI chat stream chunk.
type body struct {
	Model   string     `json:"model"`
	Usage   *usage     `json:"usage"`
	Choices []struct{} `json:"choices"` // elements are skipped, not decoded
	// ServiceTier is the tier OpenAI (chat and Responses) and Groq say they
	// served the request at; prices may depend on it.
	ServiceTier string `json:"service_tier"`
	// XGroq is where Groq puts usage: in streams, in x_groq.usage only or
	// in both places with the same counts, so it is read only when the
	// top-level usage is absent.
	XGroq *struct {
		Usage *usage `json:"usage"`
	} `json:"x_groq"`
}

// decode fills b from a response body as json.Unmarshal would (names
// matched case-insensitively, the last duplicate winning, a member of the
// wrong type an error), but decodes only the members b keeps: the answer's
// text, most of the body, is validated once and never decoded.
func (b *body) decode(data []byte) error {
	d := bytes.TrimSpace(data)
	if len(d) == 0 || d[0] != '{' || !json.Valid(d) {
		return json.Unmarshal(data, b) // null, or the decoder's own error
	}
	var err error
	forMembers(d, func(k, v []byte) {
		if err != nil {
			return
		}
		name := string(k[1 : len(k)-1])
		if bytes.IndexByte(k, '\\') >= 0 {
			_ = json.Unmarshal(k, &name)
		}
		switch strings.ToLower(name) {
		case "model":
			err = json.Unmarshal(v, &b.Model)
		case "usage":
			b.Usage = nil
			err = json.Unmarshal(v, &b.Usage)
		case "service_tier":
			err = json.Unmarshal(v, &b.ServiceTier)
		case "x_groq":
			b.XGroq = nil
			err = json.Unmarshal(v, &b.XGroq)
		case "choices":
			if v[0] != '[' && v[0] != 'n' {
				err = errors.New("choices is not an array")
			}
		}
	})
	return err
}

// usage returns b's usage object: the top-level one, else Groq's
// x_groq.usage.
func (b *body) usage() *usage {
	if b.Usage == nil && b.XGroq != nil {
		return b.XGroq.Usage
	}
	return b.Usage
}

// ParseJSON extracts the usage of a non-streamed response body of format f.
//
// found is false, with a nil error, when the body is JSON without usage (an
// error body, a queued background response). err is non-nil when the body is
// not a JSON object or a token count is not an integer from 0 to 2^53-1 (or
// the billable sum exceeds it); found is then false. The body is only read.
func ParseJSON(f Format, data []byte) (t Tokens, found bool, err error) {
	switch f {
	case BedrockConverse:
		return bedrock.ConverseUsage(data)
	case BedrockInvoke:
		// Anthropic's response body (the only family whose invoke bodies
		// carry usage in the captures); others have none here.
		return ParseJSON(AnthropicMessages, data)
	}
	if f == GeminiGenerate {
		// One GenerateContentResponse, or a whole JSON-array stream.
		p := newJSONStreamParser(f)
		p.Write(data)
		t, found = p.Result()
		return t, found, p.Err()
	}
	var b body
	if err := b.decode(data); err != nil {
		return Tokens{}, false, fmt.Errorf("proxy: %v response: %w", f, err)
	}
	u := b.usage()
	if u == nil {
		return Tokens{}, false, nil
	}
	t, found, err = u.tokens(f)
	if err != nil {
		return Tokens{}, false, fmt.Errorf("proxy: %v response: %w", f, err)
	}
	if found {
		t.Model, t.ServiceTier = b.Model, b.ServiceTier
	}
	return t, found, nil
}

// hasUsageObject is a cheap pre-filter: it reports whether data contains the
// key "usage" followed by an object, so events without usage (or with
// "usage":null) are not decoded at all. A string value cannot hold the bytes
// `"usage"` unescaped, so a match outside a key is at worst a false positive
// that the decoder then rejects.
func hasUsageObject(data []byte) bool {
	for i := 0; i < len(data); {
		j := bytes.Index(data[i:], usageKey)
		if j < 0 {
			return false
		}
		k := skipSpace(data, i+j+len(usageKey))
		if k < len(data) && data[k] == ':' {
			k = skipSpace(data, k+1)
			if k < len(data) && data[k] == '{' {
				return true
			}
		}
		i += j + 1
	}
	return false
}

var usageKey = []byte(`"usage"`)

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
