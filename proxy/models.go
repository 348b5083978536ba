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
	x.provider = route.Provider
	if !m.allowMethod(x, r, f, http.MethodGet) {
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
		rec.finish(route.Provider, false)
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
