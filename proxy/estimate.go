package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Defaults of the estimate (see RequestInfo.Estimate).
const (
	// DefaultMaxOutput is the output estimate of a request that sets no
	// max_tokens, max_completion_tokens or max_output_tokens.
	DefaultMaxOutput = 4096
	// DefaultImageTokens is the fixed cost of one image or file part.
	DefaultImageTokens = 1000
	// MessageTokens is the fixed overhead of one message (role, framing).
	MessageTokens = 4
	// BytesPerToken is the text bytes counted as one prompt token.
	BytesPerToken = 4
	// maxChoices caps the n parameter's multiplication of the output estimate.
	maxChoices = 128
)

// RequestInfo is what the middleware reads from a request body.
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
	if f != OpenAIEmbeddings {
		in += ri.Messages * MessageTokens
	}
	in = max(1, min(in, budget.MaxTokens/2))
	var out int64
	if f != OpenAIEmbeddings {
		out = ri.MaxOutput
		if out <= 0 {
			out = defaultMaxOutput
		}
		out = min(out*max(1, min(ri.Choices, maxChoices)), budget.MaxTokens/2)
	}
	return budget.Estimate{Input: in, Output: out}
}

// errBody reports a request body that is not a JSON object.
var errBody = errors.New("request body is not a JSON object")

// request is the top level of a request body of any route.
type request struct {
	Model               json.RawMessage `json:"model"`
	Stream              json.RawMessage `json:"stream"`
	StreamOptions       json.RawMessage `json:"stream_options"`
	MaxTokens           json.RawMessage `json:"max_tokens"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
	MaxOutputTokens     json.RawMessage `json:"max_output_tokens"`
	N                   json.RawMessage `json:"n"`
	Messages            json.RawMessage `json:"messages"`
	System              json.RawMessage `json:"system"`
	Instructions        json.RawMessage `json:"instructions"`
	Input               json.RawMessage `json:"input"`
	Tools               json.RawMessage `json:"tools"`
	ToolConfig          json.RawMessage `json:"toolConfig"` // Bedrock Converse
	Functions           json.RawMessage `json:"functions"`
	User                json.RawMessage `json:"user"`
	Metadata            json.RawMessage `json:"metadata"`
	// Bedrock Converse
	InferenceConfig json.RawMessage `json:"inferenceConfig"`
	// Gemini generateContent (the model and the stream are in the path)
	Contents          json.RawMessage `json:"contents"`
	SystemInstruction json.RawMessage `json:"systemInstruction"`
	GenerationConfig  json.RawMessage `json:"generationConfig"`
	// images
	Prompt  json.RawMessage `json:"prompt"`
	Quality json.RawMessage `json:"quality"`
	Size    json.RawMessage `json:"size"`
	// OpenAI's and Groq's tier of service
	ServiceTier json.RawMessage `json:"service_tier"`
}

// set keeps the member k (a JSON string literal) of a body's top level when
// it is a field of request, matched as encoding/json matches names
// (case-insensitively; the last of duplicates wins).
func (r *request) set(k, v []byte) {
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

// ParseRequest reads a request body of format f: its model, stream flags,
// output cap, end user and the counts RequestInfo.Estimate is made of. A
// body that is not a JSON object is an error; fields of an unexpected type
// are ignored.
func ParseRequest(f Format, body []byte) (RequestInfo, error) {
	// One validation, then the top level's members by a scan: decoding
	// into a struct of raw values through reflection took most of a
	// request's parse.
	b := bytes.TrimSpace(body)
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return RequestInfo{}, errBody
	}
	var r request
	forMembers(b, r.set)
	ri := RequestInfo{Choices: 1}
	switch f {
	case GeminiGenerate:
		geminiRequest(&r, &ri)
		return ri, nil
	case BedrockConverse:
		converseRequest(&r, &ri)
		return ri, nil
	}
	_ = json.Unmarshal(r.Model, &ri.Model)
	_ = json.Unmarshal(r.Stream, &ri.Stream)
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
		if json.Unmarshal(raw, &v) == nil && v > 0 {
			ri.MaxOutput = max(ri.MaxOutput, min(v, budget.MaxTokens))
		}
	}
	ri.User, ri.UserField = bodyUser(r.User, r.Metadata)
	if json.Unmarshal(r.ServiceTier, &ri.ServiceTier) == nil {
		ri.ServiceTier = budget.NormalizeTier(ri.ServiceTier)
		if budget.CheckName("service_tier", ri.ServiceTier) != nil {
			ri.ServiceTier = "" // not a tier the tracker could store: priced as standard
		}
	}
	if f == OpenAIChat || f == OpenAIImages {
		var n int64
		if json.Unmarshal(r.N, &n) == nil && n > 1 {
			ri.Choices = n
		}
	}
	var s scan
	switch f {
	case BedrockInvoke:
		// A model family's own body: Anthropic's messages, or another's
		// prompt string; every string counts as prompt.
		var msgs []json.RawMessage
		if json.Unmarshal(r.Messages, &msgs) == nil {
			s.msgs = int64(len(msgs))
		}
		s.value(body)
	case OpenAIEmbeddings:
		s.embeddings(r.Input)
	case OpenAIImages:
		s.value(r.Prompt)
		var quality, size string
		_ = json.Unmarshal(r.Quality, &quality)
		_ = json.Unmarshal(r.Size, &size)
		// The output is not the client's to cap: each image costs what
		// its quality and size bill, so that is the cap it sets.
		ri.MaxOutput, ri.HasCap = imageOutputTokens(quality, size), true
	default:
		s.messages(r.Messages)
		s.messages(r.Input)
		s.value(r.System)
		s.value(r.Instructions)
		s.text += int64(len(bytes.TrimSpace(r.Tools))) + int64(len(bytes.TrimSpace(r.Functions)))
	}
	ri.TextBytes, ri.Messages, ri.Parts, ri.PreTokens = s.text, s.msgs, s.parts, s.tokens
	return ri, nil
}

// geminiRequest reads a generateContent body: its cap and candidate count
// from generationConfig, its prompt from contents, systemInstruction and
// tools. It names no end user (X-Budget-User does).
func geminiRequest(r *request, ri *RequestInfo) {
	var gc struct {
		MaxOutputTokens json.RawMessage `json:"maxOutputTokens"`
		CandidateCount  json.RawMessage `json:"candidateCount"`
	}
	if json.Unmarshal(r.GenerationConfig, &gc) == nil {
		if raw := bytes.TrimSpace(gc.MaxOutputTokens); len(raw) > 0 && string(raw) != "null" {
			ri.HasCap = true
		}
		var v int64
		if json.Unmarshal(gc.MaxOutputTokens, &v) == nil && v > 0 {
			ri.MaxOutput = min(v, budget.MaxTokens)
		}
		if json.Unmarshal(gc.CandidateCount, &v) == nil && v > 1 {
			ri.Choices = v
		}
	}
	var s scan
	s.messages(r.Contents)
	s.value(r.SystemInstruction)
	s.text += int64(len(bytes.TrimSpace(r.Tools)))
	ri.TextBytes, ri.Messages, ri.Parts = s.text, s.msgs, s.parts
}

// converseRequest reads a Bedrock Converse body: its cap from
// inferenceConfig.maxTokens, its prompt from messages, system and
// toolConfig (image, document and video blocks are attachments).
func converseRequest(r *request, ri *RequestInfo) {
	var ic struct {
		MaxTokens json.RawMessage `json:"maxTokens"`
	}
	if json.Unmarshal(r.InferenceConfig, &ic) == nil {
		if raw := bytes.TrimSpace(ic.MaxTokens); len(raw) > 0 && string(raw) != "null" {
			ri.HasCap = true
		}
		var v int64
		if json.Unmarshal(ic.MaxTokens, &v) == nil && v > 0 {
			ri.MaxOutput = min(v, budget.MaxTokens)
		}
	}
	var s scan
	s.messages(r.Messages)
	s.value(r.System)
	s.text += int64(len(bytes.TrimSpace(r.ToolConfig)))
	ri.TextBytes, ri.Messages, ri.Parts = s.text, s.msgs, s.parts
}

// bodyUser is the end user a body names: the "user" string (OpenAI),
// else metadata.user_id (Anthropic), whichever route it came on, spaces
// trimmed; a blank string or a value of another type names none.
func bodyUser(user, metadata json.RawMessage) (v, field string) {
	if json.Unmarshal(user, &v) == nil {
		if v = strings.TrimSpace(v); v != "" {
			return v, "user"
		}
	}
	var md struct {
		UserID json.RawMessage `json:"user_id"`
	}
	v = ""
	if json.Unmarshal(metadata, &md) == nil && json.Unmarshal(md.UserID, &v) == nil {
		if v = strings.TrimSpace(v); v != "" {
			return v, "metadata.user_id"
		}
	}
	return "", ""
}

// scan counts the text bytes, messages and parts of valid JSON values.
type scan struct {
	text, msgs, parts, tokens int64
}

// messages counts a messages or input value: each element of an array is a
// message; a string is one message.
func (s *scan) messages(b []byte) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return
	}
	if b[0] == '[' {
		forElements(b, func(e []byte) {
			s.msgs++
			s.walk(e)
		})
		return
	}
	if b[0] == '"' {
		s.msgs++
	}
	s.walk(b)
}

// value counts the text of a value without counting it as a message.
func (s *scan) value(b []byte) {
	if b = bytes.TrimSpace(b); len(b) > 0 {
		s.walk(b)
	}
}

// embeddings counts an embeddings input: a string, an array of strings, an
// array of token ids or an array of such arrays.
func (s *scan) embeddings(b []byte) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return
	}
	var count func(b []byte)
	count = func(b []byte) {
		switch b[0] {
		case '"':
			s.text += int64(stringLen(b))
		case '[':
			forElements(b, count)
		case 'n', 't', 'f', '{':
			s.walk(b)
		default:
			s.tokens++
		}
	}
	count(b)
}

// attachments are the content part types with a fixed cost.
var attachments = map[string]bool{
	"image_url": true, "input_image": true, "image": true, "document": true,
	"file": true, "input_file": true, "input_audio": true,
}

// walk counts one valid JSON value: the bytes of its strings, and an
// attachment for an object whose "type" names one (its contents skipped).
func (s *scan) walk(b []byte) {
	switch b[0] {
	case '"':
		s.text += int64(stringLen(b))
	case '[':
		forElements(b, s.walk)
	case '{':
		var typ []byte
		media := false
		forMembers(b, func(k, v []byte) {
			if string(k) == `"type"` && len(v) > 0 && v[0] == '"' {
				typ = v
			}
			// Gemini's parts (inline bytes, a file) and Bedrock Converse's
			// content blocks (image, document, video): not text.
			switch string(k) {
			case `"inlineData"`, `"fileData"`:
				media = true
			case `"image"`, `"document"`, `"video"`:
				media = media || len(v) > 0 && v[0] == '{'
			}
		})
		if media || typ != nil && attachments[string(typ[1:len(typ)-1])] {
			s.parts++
			return
		}
		forMembers(b, func(k, v []byte) {
			// Gemini's opaque token of a thought, sent back with the
			// turn: not prompt text.
			if string(k) != `"thoughtSignature"` {
				s.walk(v)
			}
		})
	}
}

// stringLen is the length of a JSON string literal's contents as written
// (escapes count as the bytes they take).
func stringLen(lit []byte) int { return max(0, len(lit)-2) }

// forElements calls fn with each element of a valid JSON array.
func forElements(b []byte, fn func([]byte)) {
	i := skipSpace(b, 1)
	for i < len(b) && b[i] != ']' {
		end := valueEnd(b, i)
		fn(b[i:end])
		i = skipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
}

// forMembers calls fn with each key (a string literal) and value of a
// valid JSON object.
func forMembers(b []byte, fn func(k, v []byte)) {
	i := skipSpace(b, 1)
	for i < len(b) && b[i] == '"' {
		kEnd := valueEnd(b, i)
		j := skipSpace(b, kEnd)
		j = skipSpace(b, j+1) // the colon
		vEnd := valueEnd(b, j)
		fn(b[i:kEnd], b[j:vEnd])
		i = skipSpace(b, vEnd)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
}

// valueEnd returns the index just past the valid JSON value starting at i.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
		return len(b)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = valueEnd(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' &&
		b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j
}

// WithIncludeUsage returns body with stream_options.include_usage set to
// true, every other member kept. A body without stream_options gets it
// inserted first, byte for byte otherwise; one with stream_options has that
// object rewritten.
func WithIncludeUsage(body []byte) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return nil, errBody
	}
	so, ok := top["stream_options"]
	if !ok {
		i := bytes.IndexByte(body, '{')
		const ins = `"stream_options":{"include_usage":true}`
		out := make([]byte, 0, len(body)+len(ins)+1)
		out = append(out, body[:i+1]...)
		out = append(out, ins...)
		if len(top) > 0 {
			out = append(out, ',')
		}
		return append(out, body[i+1:]...), nil
	}
	var opts map[string]json.RawMessage
	if err := json.Unmarshal(so, &opts); err != nil || opts == nil {
		opts = map[string]json.RawMessage{}
	}
	opts["include_usage"] = json.RawMessage("true")
	nb, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	top["stream_options"] = nb
	return json.Marshal(top)
}

// imageOutputTokens is the output tokens gpt-image models bill for one
// image of a quality and size (OpenAI's image generation guide); an
// unknown, absent or "auto" quality or size is estimated at the largest,
// so no image outgrows what was admitted (the actual usage corrects it).
func imageOutputTokens(quality, size string) int64 {
	col := 1 // 1024x1536, the largest
	switch size {
	case "1024x1024":
		col = 0
	case "1536x1024":
		col = 2
	}
	row, ok := imageTokens[quality]
	if !ok {
		row = imageTokens["high"]
	}
	return row[col]
}

// imageTokens is gpt-image's output tokens per image by quality, for the
// sizes 1024x1024, 1024x1536 and 1536x1024.
var imageTokens = map[string][3]int64{
	"low":    {272, 408, 400},
	"medium": {1056, 1584, 1568},
	"high":   {4160, 6240, 6208},
}
