package proxy

import (
	"github.com/tokenbudget/tokenbudget/proxy/internal/kinds"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// Format is the API operation a route serves (Route.Format): it picks the
// route's adapter, which decides how the operation's requests are read and
// capped, where its responses report usage, how the upstream is
// authenticated and what its errors look like.
type Format = wire.Format

// The operations the proxy serves.
const (
	Unknown           = wire.Unknown
	OpenAIChat        = wire.OpenAIChat        // POST /v1/chat/completions
	OpenAIResponses   = wire.OpenAIResponses   // POST /v1/responses
	OpenAIEmbeddings  = wire.OpenAIEmbeddings  // POST /v1/embeddings
	AnthropicMessages = wire.AnthropicMessages // POST /v1/messages
	OpenAIImages      = wire.OpenAIImages      // POST /v1/images/generations
	// GeminiGenerate is the Gemini API's and Vertex AI's generateContent
	// and streamGenerateContent (GeminiPath, VertexPath).
	GeminiGenerate = wire.GeminiGenerate
	// BedrockConverse is Bedrock's Converse and ConverseStream.
	BedrockConverse = wire.BedrockConverse
	// BedrockInvoke is Bedrock's InvokeModel and
	// InvokeModelWithResponseStream with a model family's own body.
	BedrockInvoke = wire.BedrockInvoke
)

// adapter is the route's API adapter.
func (r Route) adapter() wire.Adapter { return kinds.For(r.Format, r.Kind) }

// adapterOf is the adapter of format f's own API (Azure's and Vertex's
// refusals have their family's shape).
func adapterOf(f Format) wire.Adapter { return kinds.For(f, "") }

// tokens is the usage a response reports, mapped to the tracker's counting
// rules (wire.Tokens).
type tokens = wire.Tokens

// errCount reports a token count that is not an integer from 0 to 2^53-1.
var errCount = wire.ErrCount
