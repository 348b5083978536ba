package kinds

import (
	"testing"

	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// TestFor: every format has its own adapter; Azure's routes take OpenAI's
// with the api-key credential, Vertex's Gemini's without the API key; an
// unknown or out-of-range format gets OpenAI's shapes.
func TestFor(t *testing.T) {
	for f := wire.Unknown; f <= wire.BedrockInvoke; f++ {
		if a := For(f, ""); a == nil || a.Format() != f {
			t.Errorf("For(%v) = %v", f, a)
		}
	}
	c := &wire.Credentials{OpenAIKey: "sk", AzureKey: "az", GeminiKey: "g"}
	for _, tc := range []struct {
		f          wire.Format
		kind       string
		header, v  string
		wantFormat wire.Format
	}{
		{wire.OpenAIChat, Azure, "Api-Key", "az", wire.OpenAIChat},
		{wire.GeminiGenerate, Vertex, "", "", wire.GeminiGenerate},
		{wire.GeminiGenerate, "", "X-Goog-Api-Key", "g", wire.GeminiGenerate},
		{wire.AnthropicMessages, Azure, "", "", wire.AnthropicMessages}, // no Azure Messages: the format's own
		{wire.Format(99), "", "", "", wire.Unknown},
	} {
		a := For(tc.f, tc.kind)
		h := make(map[string][]string)
		a.Authorize(h, c)
		got := ""
		if vs := h[tc.header]; len(vs) > 0 {
			got = vs[0]
		}
		if a.Format() != tc.wantFormat || got != tc.v || (tc.header == "" && len(h) != 0) {
			t.Errorf("For(%v, %q): format %v, credential headers %v", tc.f, tc.kind, a.Format(), h)
		}
	}
}

// TestRoute: the route key and what the path says, per path shape.
func TestRoute(t *testing.T) {
	for _, c := range []struct {
		path, key string
		want      Target
		ok        bool
	}{
		{"/v1/chat/completions", "/v1/chat/completions", Target{}, true},
		{"/openai/deployments/prod/chat/completions", DeploymentPath + "chat/completions", Target{Model: "prod"}, true},
		{"/openai/deployments//chat/completions", "", Target{}, false},
		{"/v1beta/models/gemini-2.5-flash:streamGenerateContent", GeminiPath, Target{Model: "gemini-2.5-flash", Stream: true}, true},
		{"/v1/projects/p/locations/l/publishers/google/models/m:generateContent", VertexPath, Target{Model: "m"}, true},
		{"/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke-with-response-stream", BedrockInvokePath,
			Target{Model: "anthropic.claude-3-5-haiku-20241022-v1:0", Stream: true}, true},
		{"/model/m/converse", BedrockConversePath, Target{Model: "m"}, true},
		{"/model/m/other", "", Target{}, false},
	} {
		key, tg, ok := Route(c.path, c.path)
		if key != c.key || tg != c.want || ok != c.ok {
			t.Errorf("Route(%q) = %q %+v %v; want %q %+v %v", c.path, key, tg, ok, c.key, c.want, c.ok)
		}
	}
}
