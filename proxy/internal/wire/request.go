package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Defaults of the estimate (see RequestInfo.Estimate).
const (
	// MessageTokens is the fixed overhead of one message (role, framing).
	MessageTokens = 4
	// BytesPerToken is the text bytes counted as one prompt token.
	BytesPerToken = 4
	// MaxChoices caps the n parameter's multiplication of the output estimate.
	MaxChoices = 128
)

// ErrBody reports a request body that is not a JSON object.
var ErrBody = errors.New("request body is not a JSON object")

// RequestInfo is what the middleware reads from a request body; package
// proxy documents it (proxy.RequestInfo).
type RequestInfo struct {
	Model string
	// Stream is the request's "stream": true.
	Stream bool
	// IncludeUsage is stream_options.include_usage as the client sent it.
	IncludeUsage bool
	// MaxOutput is the largest output cap the request sets in any of
	// max_tokens, max_completion_tokens and max_output_tokens (0: none).
	// The largest, because an upstream may honour any one of them: an
	// OpenAI-compatible server that reads only max_tokens generates up to
	// it whatever max_output_tokens says.
	MaxOutput int64
	// HasCap is true when the body names any of those fields with a value
	// other than null: the client chose its cap, which the proxy never
	// changes (a cap is injected only when HasCap is false).
	HasCap bool
	// Choices is chat's n (1 when absent).
	Choices int64
	// TextBytes, Messages, Parts and PreTokens are the counts the input
	// estimate is made of.
	TextBytes int64
	Messages  int64
	Parts     int64
	PreTokens int64
	// User is the end user the body names: OpenAI's "user", else
	// Anthropic's metadata.user_id (strings only; "" when neither is
	// one), spaces trimmed. The middleware prefers the X-Budget-User header
	// (UserHeader) and validates the result.
	User string
	// ServiceTier is the body's service_tier ("flex", "priority"; OpenAI's,
	// Groq's): the estimate is priced at that tier, and so is the usage
	// when the response names no tier.
	ServiceTier string
	// UserField is the body field User came from ("user" or
	// "metadata.user_id"; "" when none), for error messages.
	UserField string
}

// Estimate is what a request is expected to cost before it runs:
//
//	input  = ceil(text bytes / 4) + 4 per message + imageTokens per image or
//	         file part + 1 per token id of a pre-tokenized embeddings input
//	output = the largest of max_tokens, max_completion_tokens and
//	         max_output_tokens (times n for chat), else defaultMaxOutput
//
// Text bytes are the bytes of every JSON string value in the prompt fields
// (messages, system, instructions, input) plus the raw JSON of the tool
// definitions (tools, functions), which providers bill as prompt too. An
// image or file part is an object whose "type" is image_url, input_image,
// image, document, file, input_file or input_audio; its contents (a base64
// data URL, say) are not text. Messages are the elements of messages (chat,
// Anthropic) or of an input array (Responses); a string input is one
// message. Embeddings have no message overhead and no output. The input
// estimate is at least 1. Roughly 4 bytes per token holds for English;
// the actual usage, committed after the response, corrects it either way.
func (ri *RequestInfo) Estimate(f Format, defaultMaxOutput, imageTokens int64) budget.Estimate {
	in := (ri.TextBytes+BytesPerToken-1)/BytesPerToken + ri.Parts*imageTokens + ri.PreTokens
	if f.HasOutput() {
		in += ri.Messages * MessageTokens
	}
	in = max(1, min(in, budget.MaxTokens/2))
	var out int64
	if f.HasOutput() {
		out = ri.MaxOutput
		if out <= 0 {
			out = defaultMaxOutput
		}
		out = min(out*max(1, min(ri.Choices, MaxChoices)), budget.MaxTokens/2)
	}
	return budget.Estimate{Input: in, Output: out}
}

// Request is the top level of a request body of any kind: the raw value of
// each member some adapter reads (nil when absent), found in one scan.
type Request struct {
	Model               json.RawMessage
	Stream              json.RawMessage
	StreamOptions       json.RawMessage
	MaxTokens           json.RawMessage
	MaxCompletionTokens json.RawMessage
	MaxOutputTokens     json.RawMessage
	N                   json.RawMessage
	Messages            json.RawMessage
	System              json.RawMessage
	Instructions        json.RawMessage
	Input               json.RawMessage
	Tools               json.RawMessage
	ToolConfig          json.RawMessage // Bedrock Converse
	Functions           json.RawMessage
	User                json.RawMessage
	Metadata            json.RawMessage
	// Bedrock Converse
	InferenceConfig json.RawMessage
	// Gemini generateContent (the model and the stream are in the path)
	Contents          json.RawMessage
	SystemInstruction json.RawMessage
	GenerationConfig  json.RawMessage
	// images
	Prompt  json.RawMessage
	Quality json.RawMessage
	Size    json.RawMessage
	// OpenAI's and Groq's tier of service
	ServiceTier json.RawMessage
}

// Parse validates body as one JSON object and reads its top level into r:
// ErrBody when it is none.
func (r *Request) Parse(body []byte) error {
	b := bytes.TrimSpace(body)
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return ErrBody
	}
	Members(b, r.set)
	return nil
}

// set keeps the member k (a JSON string literal) of a body's top level when
// it is a field of Request, matched as encoding/json matches names
// (case-insensitively; the last of duplicates wins).
func (r *Request) set(k, v []byte) {
	name := string(k[1 : len(k)-1])
	if bytes.IndexByte(k, '\\') >= 0 {
		if json.Unmarshal(k, &name) != nil {
			return
		}
	}
	var dst *json.RawMessage
	switch strings.ToLower(name) {
	case "model":
		dst = &r.Model
	case "stream":
		dst = &r.Stream
	case "stream_options":
		dst = &r.StreamOptions
	case "max_tokens":
		dst = &r.MaxTokens
	case "max_completion_tokens":
		dst = &r.MaxCompletionTokens
	case "max_output_tokens":
		dst = &r.MaxOutputTokens
	case "n":
		dst = &r.N
	case "messages":
		dst = &r.Messages
	case "system":
		dst = &r.System
	case "instructions":
		dst = &r.Instructions
	case "input":
		dst = &r.Input
	case "tools":
		dst = &r.Tools
	case "toolconfig":
		dst = &r.ToolConfig
	case "functions":
		dst = &r.Functions
	case "user":
		dst = &r.User
	case "metadata":
		dst = &r.Metadata
	case "inferenceconfig":
		dst = &r.InferenceConfig
	case "contents":
		dst = &r.Contents
	case "systeminstruction":
		dst = &r.SystemInstruction
	case "generationconfig":
		dst = &r.GenerationConfig
	case "prompt":
		dst = &r.Prompt
	case "quality":
		dst = &r.Quality
	case "size":
		dst = &r.Size
	case "service_tier":
		dst = &r.ServiceTier
	default:
		return
	}
	*dst = v
}

// Common reads what OpenAI's and Anthropic's bodies (and the model
// families' own bodies on Bedrock's InvokeModel) name alike: the model, the
// stream flags, the output cap in any of max_completion_tokens,
// max_output_tokens and max_tokens, the end user and the service tier.
func (r *Request) Common(ri *RequestInfo) {
	str(r.Model, &ri.Model)
	switch string(r.Stream) {
	case "true":
		ri.Stream = true
	case "false", "":
	default:
		_ = json.Unmarshal(r.Stream, &ri.Stream)
	}
	if len(r.StreamOptions) > 0 {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		_ = json.Unmarshal(r.StreamOptions, &so)
		ri.IncludeUsage = so.IncludeUsage
	}
	for _, raw := range [...]json.RawMessage{r.MaxCompletionTokens, r.MaxOutputTokens, r.MaxTokens} {
		if raw = bytes.TrimSpace(raw); len(raw) > 0 && string(raw) != "null" {
			ri.HasCap = true
		}
		var v int64
		if integer(raw, &v) && v > 0 {
			ri.MaxOutput = max(ri.MaxOutput, min(v, budget.MaxTokens))
		}
	}
	ri.User, ri.UserField = bodyUser(r.User, r.Metadata)
	if len(r.ServiceTier) > 0 && str(r.ServiceTier, &ri.ServiceTier) {
		ri.ServiceTier = budget.NormalizeTier(ri.ServiceTier)
		if budget.CheckName("service_tier", ri.ServiceTier) != nil {
			ri.ServiceTier = "" // not a tier the tracker could store: priced as standard
		}
	}
}

// Cap reads an output cap member of a nested object (Gemini's
// generationConfig.maxOutputTokens, Converse's inferenceConfig.maxTokens):
// has is true when it is there and not null, max is its value when a
// positive integer.
func Cap(raw json.RawMessage) (maxOutput int64, has bool) {
	if raw = bytes.TrimSpace(raw); len(raw) > 0 && string(raw) != "null" {
		has = true
	}
	var v int64
	if integer(raw, &v) && v > 0 {
		maxOutput = min(v, budget.MaxTokens)
	}
	return maxOutput, has
}

// bodyUser is the end user a body names: the "user" string (OpenAI),
// else metadata.user_id (Anthropic), whichever route it came on, spaces
// trimmed; a blank string or a value of another type names none.
func bodyUser(user, metadata json.RawMessage) (v, field string) {
	if len(user) > 0 && str(user, &v) {
		if v = strings.TrimSpace(v); v != "" {
			return v, "user"
		}
	}
	var md struct {
		UserID json.RawMessage `json:"user_id"`
	}
	v = ""
	if len(metadata) > 0 && json.Unmarshal(metadata, &md) == nil && json.Unmarshal(md.UserID, &v) == nil {
		if v = strings.TrimSpace(v); v != "" {
			return v, "metadata.user_id"
		}
	}
	return "", ""
}

// str decodes a JSON string value into *v as json.Unmarshal would,
// reporting success; plain ASCII without escapes (models, tiers, users)
// skips the reflection. A value of another type leaves *v alone.
func str(raw json.RawMessage, v *string) bool {
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		plain := true
		for _, c := range raw[1 : len(raw)-1] {
			if c == '\\' || c == '"' || c >= 0x80 || c < 0x20 {
				plain = false
				break
			}
		}
		if plain {
			*v = string(raw[1 : len(raw)-1])
			return true
		}
	}
	return json.Unmarshal(raw, v) == nil
}

// integer decodes a JSON integer as json.Unmarshal into an int64 would.
func integer(raw json.RawMessage, v *int64) bool {
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil && len(raw) > 0 && raw[0] != '+' {
		*v = n
		return true
	}
	return json.Unmarshal(raw, v) == nil
}
