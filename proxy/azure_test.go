package proxy_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/proxy"
)

const upstreamAzureKey = "azure-upstream-credential"

// TestAzure: Azure OpenAI's deployment paths are served with the
// deployment as the model for limits, the api-version passed through, the
// gateway key accepted in api-key (and Authorization) and replaced by the
// upstream's api-key; usage is read from the recorded responses
// (content-filter fields beside it), and the recorded stream without
// include_usage is charged by the usage chunk the proxy asked for.
func TestAzure(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{}
	for _, f := range []string{"azure-chat-json-2.json", "azure-chat-stream-2.txt"} {
		b, err := os.ReadFile(filepath.Join("../testdata/captures/providers", f))
		if err != nil {
			t.Fatal(err)
		}
		files[f] = b
	}
	e := newEnv(t, envOptions{
		cfg: func(c *proxy.Config) { c.Routes = proxy.AzureRoutes("azure") },
		up:  func(u *proxy.UpstreamConfig) { u.AzureKey = upstreamAzureKey },
	}, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Api-Key") != upstreamAzureKey || r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "" {
			t.Errorf("upstream credential: api-key %q authorization %q x-api-key %q", r.Header.Get("Api-Key"), r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
		}
		if r.URL.Query().Get("api-version") != "2024-12-01-preview" || !strings.HasPrefix(r.URL.Path, "/openai/deployments/gpt-5-nano/") {
			t.Errorf("upstream URL %s", r.URL)
		}
		if strings.Contains(string(body), `"stream":true`) {
			if !strings.Contains(string(body), `"include_usage":true`) {
				t.Errorf("stream without include_usage upstream: %s", body)
			}
			w.Header().Set("Content-Type", "text/event-stream")
			data := strings.TrimSuffix(string(files["azure-chat-stream-2.txt"]), "data: [DONE]\n\n")
			io.WriteString(w, data+`data: {"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":12,"total_tokens":42}}`+"\n\ndata: [DONE]\n\n")
			return
		}
		writeJSON(w, http.StatusOK, string(files["azure-chat-json-2.json"]))
	})
	dep := e.limit("model", "gpt-5-nano", "tokens", "1h", 1_000_000)
	all := e.limit("provider", "azure", "tokens", "1h", 1_000_000)
	const path = "/openai/deployments/gpt-5-nano/chat/completions?api-version=2024-12-01-preview"
	msgs := `"messages":[{"role":"user","content":"hello"}],"max_completion_tokens":1000`
	r := e.do(path, `{`+msgs+`}`, "Authorization", "", "Api-Key", e.secret)
	if r.status != http.StatusOK || r.body != string(files["azure-chat-json-2.json"]) {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	if used, _ := e.used(dep); used != 427 {
		t.Errorf("deployment limit used %d; want 427", used)
	}
	// The body's model does not decide: Azure serves the deployment.
	r = e.do(path, `{"model":"gpt-4o-mini","stream":true,`+msgs+`}`)
	if r.status != http.StatusOK || strings.Contains(r.body, `"usage":{`) || !strings.HasPrefix(r.body, "data: {\"choices\":[],\"created\":0") {
		t.Fatalf("stream: %d %.200s", r.status, r.body)
	}
	if used, _ := e.used(dep); used != 427+42 {
		t.Errorf("deployment limit used %d; want %d", used, 427+42)
	}
	if used, _ := e.used(all); used != 427+42 {
		t.Errorf("provider limit used %d; want %d", used, 427+42)
	}
	// Not a route: another operation, no deployment.
	for _, p := range []string{"/openai/deployments/gpt-5-nano/completions", "/openai/deployments//chat/completions", "/v1/chat/completions"} {
		if r := e.do(p, `{}`); r.status != http.StatusNotFound {
			t.Errorf("%s: %d %s", p, r.status, r.body)
		}
	}
	if e.hits.Load() != 2 {
		t.Errorf("%d upstream calls; want 2", e.hits.Load())
	}
}
