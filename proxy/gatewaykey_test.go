package proxy_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestGatewayKeyPlaces: the gateway key is accepted wherever an SDK sends
// its API key (Authorization: Bearer, also the Bedrock API key form;
// x-api-key; Azure's api-key; Gemini's x-goog-api-key or ?key=), and every
// one of those places is stripped before forwarding, the rest of the query
// kept byte for byte.
func TestGatewayKeyPlaces(t *testing.T) {
	t.Parallel()
	type seen struct{ auth, xapi, api, goog, query string }
	got := make(chan seen, 16)
	e := newEnv(t, envOptions{}, func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.Header.Get("Api-Key"), r.Header.Get("X-Goog-Api-Key"), r.URL.RawQuery}
		writeJSON(w, http.StatusOK, `{"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	})
	const body = `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct {
		name, query string
		hdr         []string
		wantQuery   string
	}{
		{"bearer", "", []string{"Authorization", "Bearer " + e.secret}, ""},
		{"x-api-key", "", []string{"X-Api-Key", e.secret}, ""},
		{"api-key", "", []string{"Api-Key", e.secret}, ""},
		{"x-goog-api-key", "", []string{"X-Goog-Api-Key", e.secret}, ""},
		{"query key", "?alt=sse&key=" + e.secret + "&x=a,b%2Cc", nil, "alt=sse&x=a,b%2Cc"},
		{"every place", "?key=" + e.secret, []string{"Authorization", "Bearer " + e.secret, "X-Api-Key", "other", "Api-Key", "other", "X-Goog-Api-Key", "other"}, ""},
	} {
		r := e.send("/v1/chat/completions"+c.query, body, c.hdr...)
		e.wait(1)
		if r.status != http.StatusOK {
			t.Errorf("%s: %d %s", c.name, r.status, r.body)
			continue
		}
		s := <-got
		if s.auth != "Bearer "+upstreamOpenAIKey || s.xapi != "" || s.api != "" || s.goog != "" || s.query != c.wantQuery {
			t.Errorf("%s: upstream saw %+v; want only its own credential and query %q", c.name, s, c.wantQuery)
		}
		if strings.Contains(s.query, e.secret) {
			t.Errorf("%s: the secret reached the upstream", c.name)
		}
	}
	if r := e.send("/v1/chat/completions?key=tbk_wrong", body); r.status != http.StatusUnauthorized {
		t.Errorf("wrong query key: %d", r.status)
	}
	e.wait(1)
}
