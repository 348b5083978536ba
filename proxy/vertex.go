package proxy

import (
	"fmt"
	"net/http"

	"golang.org/x/oauth2"
)

// VertexRoutes maps Vertex AI's publisher paths (VertexPath:
// /{version}/projects/P/locations/L/publishers/google/models/M:generateContent
// and :streamGenerateContent) to GeminiGenerate with the provider provider
// ("vertex" when ""), of Kind KindVertex: NewUpstream authenticates them
// with UpstreamConfig.GoogleTokens.
func VertexRoutes(provider string) map[string]Route {
	if provider == "" {
		provider = KindVertex
	}
	return map[string]Route{VertexPath: {Format: GeminiGenerate, Provider: provider, Kind: KindVertex}}
}

// googleTransport puts an OAuth access token from src on each Vertex AI
// request (Route.Kind KindVertex): the Google application default
// credentials' token, refreshed by src before it expires.
type googleTransport struct {
	rt  http.RoundTripper
	src oauth2.TokenSource
}

func (t *googleTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	info, ok := InfoFrom(req.Context())
	if !ok || info.Route.Kind != KindVertex {
		return t.rt.RoundTrip(req)
	}
	tok, err := t.src.Token()
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("proxy: Google credentials for Vertex AI: %w", err)
	}
	out := req.Clone(req.Context())
	tok.SetAuthHeader(out)
	return t.rt.RoundTrip(out)
}
