package wire

// Format is the API operation a route serves: it picks the route's Adapter
// (see package kinds), which decides how its requests and responses are
// read and how its errors look. Its static facts (a name, an OpenAI- or
// Anthropic-style path, the default provider) are a table here.
type Format int

// The operations the proxy serves.
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
	numFormats
)

// formats holds each Format's name, its fixed path ("" when its path names
// a model or a deployment), its default provider name, and whether it
// generates no output (embeddings: no output estimate, no per-message
// overhead).
var formats = [numFormats]struct {
	name, path, provider string
	noOutput             bool
}{
	Unknown:           {"unknown", "", "", false},
	OpenAIChat:        {"openai-chat", "/v1/chat/completions", "openai", false},
	OpenAIResponses:   {"openai-responses", "/v1/responses", "openai", false},
	OpenAIEmbeddings:  {"openai-embeddings", "/v1/embeddings", "openai", true},
	AnthropicMessages: {"anthropic-messages", "/v1/messages", "anthropic", false},
	OpenAIImages:      {"openai-images", "/v1/images/generations", "openai", false},
	GeminiGenerate:    {"gemini-generate", "", "gemini", false},
	BedrockConverse:   {"bedrock-converse", "", "bedrock", false},
	BedrockInvoke:     {"bedrock-invoke", "", "bedrock", false},
}

func (f Format) known() bool { return f > Unknown && f < numFormats }

// String returns a short name for f, such as "openai-chat".
func (f Format) String() string {
	if !f.known() {
		return "unknown"
	}
	return formats[f].name
}

// Path is the URL path of f's route ("" for Unknown and for the operations
// whose path names their model).
func (f Format) Path() string {
	if !f.known() {
		return ""
	}
	return formats[f].path
}

// Provider returns the default provider name of f's route family ("" for
// Unknown).
func (f Format) Provider() string {
	if !f.known() {
		return ""
	}
	return formats[f].provider
}

// ForPath returns the Format of a request path (URL.Path, without query):
// one of the fixed paths, else Unknown and false.
func ForPath(path string) (Format, bool) {
	for f := OpenAIChat; f < numFormats; f++ {
		if p := formats[f].path; p != "" && p == path {
			return f, true
		}
	}
	return Unknown, false
}

// HasOutput reports whether f's requests generate output tokens.
func (f Format) HasOutput() bool { return !f.known() || !formats[f].noOutput }
