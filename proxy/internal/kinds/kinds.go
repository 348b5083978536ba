// Package kinds maps a route to its API kind's wire.Adapter and a request
// path to the route it takes: the one place that knows every kind. Package
// proxy and the mock provider ask it; each kind's package knows only its
// own API.
package kinds

import (
	"strings"

	"github.com/tokenbudget/tokenbudget/proxy/internal/anthropic"
	"github.com/tokenbudget/tokenbudget/proxy/internal/bedrock"
	"github.com/tokenbudget/tokenbudget/proxy/internal/gemini"
	"github.com/tokenbudget/tokenbudget/proxy/internal/openai"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// The route kinds that change a Format's adapter (proxy.Route.Kind).
const (
	Azure  = "azure"  // Azure OpenAI: OpenAI's operations, the api-key credential
	Vertex = "vertex" // Vertex AI: generateContent, an OAuth token
)

var (
	byFormat = [...]wire.Adapter{
		wire.Unknown:           openai.Adapter{F: wire.Unknown},
		wire.OpenAIChat:        openai.Adapter{F: wire.OpenAIChat},
		wire.OpenAIResponses:   openai.Adapter{F: wire.OpenAIResponses},
		wire.OpenAIEmbeddings:  openai.Adapter{F: wire.OpenAIEmbeddings},
		wire.AnthropicMessages: anthropic.Adapter{},
		wire.OpenAIImages:      openai.Adapter{F: wire.OpenAIImages},
		wire.GeminiGenerate:    gemini.Adapter{},
		wire.BedrockConverse:   bedrock.Adapter{},
		wire.BedrockInvoke:     bedrock.Adapter{Invoke: true},
	}
	azure = [...]wire.Adapter{
		wire.OpenAIChat:       openai.Adapter{F: wire.OpenAIChat, Azure: true},
		wire.OpenAIResponses:  openai.Adapter{F: wire.OpenAIResponses, Azure: true},
		wire.OpenAIEmbeddings: openai.Adapter{F: wire.OpenAIEmbeddings, Azure: true},
		wire.OpenAIImages:     openai.Adapter{F: wire.OpenAIImages, Azure: true},
	}
	vertex wire.Adapter = gemini.Adapter{Vertex: true}
)

// For is the adapter of a route of format f and kind ("" for the kind f
// implies; Azure, Vertex). An unknown format gets OpenAI's shapes.
func For(f wire.Format, kind string) wire.Adapter {
	if f < 0 || int(f) >= len(byFormat) {
		f = wire.Unknown
	}
	switch kind {
	case Azure:
		if int(f) < len(azure) && azure[f] != nil {
			return azure[f]
		}
	case Vertex:
		if f == wire.GeminiGenerate {
			return vertex
		}
	}
	return byFormat[f]
}

// The keys in proxy.Config.Routes of the paths that name a model or a
// deployment (Target maps a request path to one).
const (
	DeploymentPath      = "/openai/deployments/{deployment}/"
	GeminiPath          = "/{version}/models/{model}:{method}"
	VertexPath          = "/{version}/projects/{project}/locations/{location}/publishers/google/models/{model}:{method}"
	BedrockConversePath = "/model/{model}/converse"
	BedrockInvokePath   = "/model/{model}/invoke"
)

const deploymentsPrefix = "/openai/deployments/"

// Target is what a request path itself says of the request: an Azure
// deployment, a Gemini or Bedrock model ("" when the body names it), a
// stream.
type Target struct {
	Model  string
	Stream bool
}

// Route is the key in proxy.Config.Routes a request path (URL.Path; rawPath
// its escaped form, where a Gemini or Bedrock model is read) takes, and
// what the path says: the path itself, an Azure deployment path
// (DeploymentPath + the operation), a Bedrock runtime path
// (BedrockConversePath, BedrockInvokePath) or a Gemini or Vertex AI one
// (GeminiPath, VertexPath). ok is false for a path of one of those shapes
// that does not parse.
func Route(path, rawPath string) (key string, t Target, ok bool) {
	switch {
	case strings.HasPrefix(path, deploymentsPrefix):
		deployment, op, _ := strings.Cut(path[len(deploymentsPrefix):], "/")
		if deployment == "" || op == "" {
			return "", Target{}, false
		}
		return DeploymentPath + op, Target{Model: deployment}, true
	case strings.HasPrefix(path, "/model/"):
		bp, err := bedrock.ParsePath(rawPath)
		if err != nil {
			return "", Target{}, false
		}
		key = BedrockConversePath
		if bp.Op == bedrock.Invoke || bp.Op == bedrock.InvokeWithResponseStream {
			key = BedrockInvokePath
		}
		return key, Target{Model: bp.Model, Stream: bp.Stream()}, true
	case strings.Contains(path, ":"):
		gp, err := gemini.ParsePath(rawPath)
		if err != nil {
			return "", Target{}, false
		}
		key = GeminiPath
		if gp.Vertex {
			key = VertexPath
		}
		return key, Target{Model: gp.Model, Stream: gp.Stream}, true
	}
	return path, Target{}, true
}
