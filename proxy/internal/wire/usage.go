package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// Details is a usage object's breakdown of its prompt or its output.
type Details struct {
	Cached    Count `json:"cached_tokens"`
	Reasoning Count `json:"reasoning_tokens"`
	// CacheWrite is OpenRouter's prompt_tokens_details.cache_write_tokens,
	// inside prompt_tokens like the cached count.
	CacheWrite Count `json:"cache_write_tokens"`
}

// CacheByTTL is Anthropic's usage.cache_creation: the cache writes by
// lifetime, which add up to cache_creation_input_tokens.
type CacheByTTL struct {
	Ephemeral5m Count `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h Count `json:"ephemeral_1h_input_tokens"`
}

// UnmarshalJSON reads an object and ignores any other value: the member is
// Anthropic's, and another server's cache_creation of another shape must
// not cost the usage beside it.
func (c *CacheByTTL) UnmarshalJSON(b []byte) error {
	*c = CacheByTTL{}
	if len(b) == 0 || b[0] != '{' {
		return nil
	}
	type plain CacheByTTL
	return json.Unmarshal(b, (*plain)(c))
}

// Usage holds the usage fields of every shape: OpenAI chat and embeddings
// (prompt/completion), OpenAI Responses (input/output with details) and
// Anthropic (input/output plus the cache counts beside them).
type Usage struct {
	PromptTokens     Count `json:"prompt_tokens"`
	CompletionTokens Count `json:"completion_tokens"`
	InputTokens      Count `json:"input_tokens"`
	OutputTokens     Count `json:"output_tokens"`
	TotalTokens      Count `json:"total_tokens"`
	CacheRead        Count `json:"cache_read_input_tokens"`
	CacheCreation    Count `json:"cache_creation_input_tokens"`
	// CacheByTTL is Anthropic's split of cache_creation_input_tokens by
	// the cache's lifetime.
	CacheByTTL        *CacheByTTL `json:"cache_creation"`
	PromptDetails     Details     `json:"prompt_tokens_details"`
	CompletionDetails Details     `json:"completion_tokens_details"`
	InputDetails      Details     `json:"input_tokens_details"`
	OutputDetails     Details     `json:"output_tokens_details"`
	// OpenAI-compatible servers that report the cache hit elsewhere than
	// prompt_tokens_details: DeepSeek's prompt_cache_hit_tokens (older
	// responses carry only it; newer ones repeat it in the details, counted
	// once) and Together's usage.cached_tokens.
	PromptCacheHit Count `json:"prompt_cache_hit_tokens"`
	CachedTokens   Count `json:"cached_tokens"`
}

// Body is the top level of a non-streamed response of any format, and of
// an OpenAI chat stream chunk.
type Body struct {
	Model   string     `json:"model"`
	Usage   *Usage     `json:"usage"`
	Choices []struct{} `json:"choices"` // elements are skipped, not decoded
	// ServiceTier is the tier OpenAI (chat and Responses) and Groq say they
	// served the request at; prices may depend on it.
	ServiceTier string `json:"service_tier"`
	// XGroq is where Groq puts usage: in streams, in x_groq.usage only or
	// in both places with the same counts, so it is read only when the
	// top-level usage is absent.
	XGroq *struct {
		Usage *Usage `json:"usage"`
	} `json:"x_groq"`
}

// Decode fills b from a response body as json.Unmarshal would (names
// matched case-insensitively, the last duplicate winning, a member of the
// wrong type an error), but decodes only the members b keeps: the answer's
// text, most of the body, is validated once and never decoded.
func (b *Body) Decode(data []byte) error {
	d := bytes.TrimSpace(data)
	if len(d) == 0 || d[0] != '{' || !json.Valid(d) {
		return json.Unmarshal(data, b) // null, or the decoder's own error
	}
	var err error
	Members(d, func(k, v []byte) {
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

// UsageObject returns b's usage object: the top-level one, else Groq's
// x_groq.usage.
func (b *Body) UsageObject() *Usage {
	if b.Usage == nil && b.XGroq != nil {
		return b.XGroq.Usage
	}
	return b.Usage
}
