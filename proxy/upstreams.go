package proxy

import (
	"net/http"
	"slices"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy/internal/kinds"
)

// The API kinds an upstream may speak (see KindRoutes). KindOpenAI is any
// OpenAI-compatible server: OpenAI itself, DeepSeek, Groq, Mistral, xAI,
// OpenRouter, Together, vLLM, Ollama.
const (
	KindOpenAI    = "openai"
	KindAnthropic = "anthropic"
	KindGemini    = "gemini"
	KindVertex    = kinds.Vertex
	KindBedrock   = "bedrock"
)

// Kinds lists the API kinds, in the order KindRoutes documents them.
var Kinds = []string{KindOpenAI, KindAnthropic, KindGemini, KindVertex, KindBedrock, KindAzure}

// ProviderHeader picks, among several OpenAI-kind upstreams, the one an
// OpenAI-shaped request goes to when no ModelRoute matched its model. It is
// removed before the request is forwarded.
const ProviderHeader = "X-Budget-Provider"

// ModelRoute sends an OpenAI-shaped request (chat completions, Responses,
// embeddings, images) whose normalised model matches Pattern (a model name
// or a pattern with * and ?, as in limits; budget.MatchModel) to the
// upstream named Provider.
type ModelRoute struct {
	Pattern  string
	Provider string
}

// KindRoutes returns the routes an upstream of kind serves under the
// provider name: OpenAI's chat completions, Responses, embeddings and image
// generations for openai; Messages for anthropic; generateContent
// (GeminiPath) for gemini; Vertex AI's publisher paths (VertexRoutes) for
// vertex; the deployment paths (AzureRoutes) for azure; Converse and
// InvokeModel (BedrockRoutes) for bedrock.
func KindRoutes(kind, provider string) (map[string]Route, error) {
	if err := budget.CheckName("provider", provider); err != nil {
		return nil, err
	}
	routes := map[string]Route{}
	switch kind {
	case KindOpenAI:
		for _, f := range []Format{OpenAIChat, OpenAIResponses, OpenAIEmbeddings, OpenAIImages} {
			routes[f.Path()] = Route{Format: f, Provider: provider}
		}
	case KindAnthropic:
		routes[AnthropicMessages.Path()] = Route{Format: AnthropicMessages, Provider: provider}
	case KindGemini:
		routes = GeminiRoutes(provider)
	case KindAzure:
		routes = AzureRoutes(provider)
	case KindBedrock:
		routes = BedrockRoutes(provider)
	case KindVertex:
		routes = VertexRoutes(provider)
	default:
		return nil, budget.Invalid("upstream kind", kind, "want one of "+strings.Join(Kinds, ", "))
	}
	return routes, nil
}

// openAIShaped reports whether a route takes an OpenAI-shaped path that
// several OpenAI-kind upstreams may share (Azure's own paths do not).
func openAIShaped(r Route) bool {
	switch r.Format {
	case OpenAIChat, OpenAIResponses, OpenAIEmbeddings, OpenAIImages:
		return r.Kind == ""
	}
	return false
}

// chooseProvider is the provider an OpenAI-shaped request goes to: the
// first ModelRoute matching its model, else the one ProviderHeader names
// (hdr), else the route's own. ok is false when hdr names no OpenAI-kind
// upstream. Other routes keep their provider: their path chose it.
func (m *Middleware) chooseProvider(r Route, model, hdr string) (string, bool) {
	if !openAIShaped(r) {
		return r.Provider, true
	}
	if len(m.cfg.ModelRoutes) > 0 {
		nm := budget.NormalizeModel(model)
		for _, mr := range m.cfg.ModelRoutes {
			if budget.MatchModel(mr.Pattern, nm) {
				return mr.Provider, true
			}
		}
	}
	if hdr == "" || hdr == r.Provider || len(m.cfg.OpenAIProviders) == 0 {
		return r.Provider, true
	}
	return hdr, slices.Contains(m.cfg.OpenAIProviders, hdr)
}

// checkModelRoutes validates the ModelRoutes and OpenAIProviders of cfg.
func checkModelRoutes(cfg *Config) error {
	for _, p := range cfg.OpenAIProviders {
		if err := budget.CheckName("provider", p); err != nil {
			return err
		}
	}
	for i, mr := range cfg.ModelRoutes {
		mr.Pattern = budget.NormalizeModel(mr.Pattern)
		if mr.Pattern == "" {
			return budget.Invalid("model-route", cfg.ModelRoutes[i].Pattern, "want a model name or pattern")
		}
		if !slices.Contains(cfg.OpenAIProviders, mr.Provider) {
			return budget.Invalid("model-route", cfg.ModelRoutes[i].Pattern+"="+mr.Provider,
				"names no OpenAI-kind upstream (have "+strings.Join(cfg.OpenAIProviders, ", ")+")")
		}
		cfg.ModelRoutes[i] = mr
	}
	return nil
}

// Upstreams sends each request the middleware admits to the handler of its
// route's provider (Info.Route.Provider): one NewUpstream per upstream. A
// provider without a handler is answered 502 in its route's shape.
type Upstreams map[string]http.Handler

// ServeHTTP forwards r to its provider's upstream.
func (u Upstreams) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, provider := Unknown, ""
	if info, ok := InfoFrom(r.Context()); ok {
		f, provider = info.Route.Format, info.Route.Provider
	}
	if h := u[provider]; h != nil {
		h.ServeHTTP(w, r)
		return
	}
	writeError(w, f, simpleError(f, http.StatusBadGateway, CodeUpstream, "the gateway has no upstream for provider "+clipName(provider)))
}
