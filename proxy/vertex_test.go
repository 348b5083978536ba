package proxy_test

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/oauth2"

	"github.com/tokenbudget/tokenbudget/proxy"
)

// tokenSource answers tok, or err when set, and counts the calls.
type tokenSource struct {
	tok   string
	err   error
	calls atomic.Int32
}

func (s *tokenSource) Token() (*oauth2.Token, error) {
	s.calls.Add(1)
	if s.err != nil {
		return nil, s.err
	}
	return &oauth2.Token{AccessToken: s.tok, TokenType: "Bearer"}, nil
}

const vertexModelPath = "/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-flash:"

// TestVertexBearerToken: a Vertex AI route (VertexRoutes) goes upstream with
// the GoogleTokens token as its bearer token and no Gemini API key, while
// the Gemini API's route of the same upstream keeps its x-goog-api-key and
// no token; a token the credentials cannot give is a 502 in Google's shape
// that charges nothing.
func TestVertexBearerToken(t *testing.T) {
	t.Parallel()
	src := &tokenSource{tok: "ya29.test"}
	var auth, goog atomic.Value
	e := newEnv(t, envOptions{mode: proxy.ModeReserve, clock: true, cfg: func(pc *proxy.Config) {
		pc.Routes = proxy.GeminiRoutes("")
		for k, r := range proxy.VertexRoutes("") {
			pc.Routes[k] = r
		}
	}, up: func(uc *proxy.UpstreamConfig) { uc.GeminiKey, uc.GoogleTokens = "g-key", src }},
		func(w http.ResponseWriter, r *http.Request) {
			auth.Store(r.Header.Get("Authorization"))
			goog.Store(r.Header.Get("X-Goog-Api-Key"))
			writeJSON(w, http.StatusOK, `{"candidates":[{"content":{"parts":[{"text":"ok"}],"role":"model"},"finishReason":1}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1,"totalTokenCount":6}}`)
		})
	id := e.limit("", "", "tokens", "1h", 100_000)
	for _, c := range []struct{ path, auth, goog string }{
		{vertexModelPath + "generateContent", "Bearer ya29.test", ""},
		{geminiModelPath + "generateContent", "", "g-key"},
	} {
		if r := e.do(c.path, geminiBody("hi", `{"maxOutputTokens":10}`)); r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", c.path, r.status, r.body)
		}
		if a, g := auth.Load(), goog.Load(); a != c.auth || g != c.goog {
			t.Errorf("%s: upstream Authorization %q, x-goog-api-key %q; want %q, %q", c.path, a, g, c.auth, c.goog)
		}
	}
	if n := src.calls.Load(); n != 1 {
		t.Errorf("token source asked %d times; want once (the Vertex request)", n)
	}
	used, _ := e.used(id)
	src.err = errors.New("metadata server unreachable")
	hits := e.hits.Load()
	r := e.do(vertexModelPath+"generateContent", geminiBody("hi", `{"maxOutputTokens":10}`))
	if r.status != http.StatusBadGateway || !strings.Contains(r.body, `"status":"UNAVAILABLE"`) || e.hits.Load() != hits {
		t.Errorf("token failure: %d %s (upstream hit: %v); want 502 UNAVAILABLE, no upstream call", r.status, r.body, e.hits.Load() != hits)
	}
	if after, _ := e.used(id); after != used {
		t.Errorf("token failure charged %d", after-used)
	}
	if after, reserved := e.settled(id); after != used || reserved != 0 {
		t.Errorf("token failure charged %d (reserved %d once leases idled)", after-used, reserved)
	}
}
