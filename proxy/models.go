package proxy

import (
	"context"
	"net/http"
	"strings"
)

// modelsPath is the model list both API families serve; a model's own
// entry is under it (/v1/models/ID).
const modelsPath = "/v1/models"

func isModels(path string) bool {
	if strings.HasSuffix(path, ":generateContent") || strings.HasSuffix(path, ":streamGenerateContent") {
		return false // Gemini's v1 API: /v1/models/MODEL:generateContent
	}
	return path == modelsPath || strings.HasPrefix(path, modelsPath+"/")
}

// familyOf is the API family a request that names no route came from, for
// the shape of its answers: Anthropic's when it carries anthropic-version,
// as Anthropic's SDKs send, else OpenAI's.
func familyOf(r *http.Request) Format {
	if r.Header.Get("Anthropic-Version") != "" {
		return AnthropicMessages
	}
	return OpenAIChat
}

// countTokensPath is Anthropic's token counting endpoint: free at
// Anthropic, and called by coding agents before many turns.
const countTokensPath = "/v1/messages/count_tokens"

// models passes GET /v1/models (or /v1/models/ID) to the upstream for a
// client with a valid gateway key, at no cost to its budget: many chat
// UIs list the models at start-up. The request goes out with the upstream
// credential of the family it came from: Anthropic's (x-api-key) when it
// carries an anthropic-version header, as Anthropic's SDKs send, else
// OpenAI's (Authorization: Bearer). An upstream 401 or 403 is answered as
// a 502, as on the other routes; nothing parks the provider.
func (m *Middleware) models(x *exchange, r *http.Request, next http.Handler) {
	f := familyOf(r)
	// The provider of the family's route, for the log only.
	route := Route{Format: f, Provider: f.Provider()}
	if rt, ok := m.cfg.Routes[f.Path()]; ok {
		route = rt
	}
	m.passThrough(x, r, next, route, http.MethodGet)
}

// countTokens passes POST /v1/messages/count_tokens to the upstream of the
// Anthropic Messages route, as models does: it costs no budget (Anthropic
// charges nothing for it) and records nothing. ok is false when the proxy
// serves no Anthropic route, so the path is not one of its routes.
func (m *Middleware) countTokens(x *exchange, r *http.Request, next http.Handler) (ok bool) {
	route, ok := m.cfg.Routes[AnthropicMessages.Path()]
	if !ok || route.Format != AnthropicMessages {
		return false
	}
	m.passThrough(x, r, next, route, http.MethodPost)
	return true
}

// passThrough forwards a request that costs no budget to route's upstream
// for a client with a valid gateway key.
func (m *Middleware) passThrough(x *exchange, r *http.Request, next http.Handler, route Route, method string) {
	f := route.Format
	x.provider = route.Provider
	if !m.allowMethod(x, r, f, method) {
		return
	}
	if _, ok := m.authenticate(x, r, f); !ok {
		return
	}
	r.Header.Del("Accept-Encoding")
	// The Info names the route whose credential NewUpstream sends; it has
	// no request id, as nothing is recorded.
	info := &Info{Key: x.key, Route: route}
	r = r.WithContext(context.WithValue(r.Context(), infoKey{}, info))
	rec := &recorder{w: x, f: f}
	defer func() {
		if p := recover(); p != nil {
			m.outcome(x, OutcomeClientClosed)
			panic(p)
		}
		rec.finish(route.Provider, false, nil)
		switch {
		case rec.status/100 == 2:
			m.outcome(x, OutcomeOK)
		case rec.status == 0 && r.Context().Err() != nil:
			m.outcome(x, OutcomeClientClosed)
		default:
			m.outcome(x, OutcomeUpstreamError)
		}
	}()
	next.ServeHTTP(rec, r)
}
