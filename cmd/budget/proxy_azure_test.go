package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProxyAzure: --provider azure serves Azure OpenAI's deployment paths,
// sends $AZURE_OPENAI_API_KEY as api-key upstream, and records the
// deployment as the model under provider azure.
func TestProxyAzure(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--scope", "model", "--value", "prod-4o", "--limit", "1000000", "--window", "daily")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Api-Key") != "azure-from-env" || r.Header.Get("Authorization") != "" ||
			r.URL.Path != "/openai/deployments/prod-4o/chat/completions" || r.URL.RawQuery != "api-version=2024-10-21" {
			t.Errorf("upstream got %s api-key %q authorization %q", r.URL, r.Header.Get("Api-Key"), r.Header.Get("Authorization"))
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"gpt-4o-2024-11-20","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2}}`)
	}))
	defer up.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	line, done := startCLI(t, ctx, map[string]string{"AZURE_OPENAI_API_KEY": "azure-from-env", "OPENAI_API_KEY": "not-this"},
		"proxy", "--db", db, "--upstream", up.URL, "--provider", "azure", "--listen", "127.0.0.1:0")
	base := listenURL(t, line)
	req, _ := http.NewRequest(http.MethodPost, base+"/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":5}`))
	req.Header.Set("Api-Key", secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("azure chat: %d %s", resp.StatusCode, b)
	}
	if code, _ := post(t, base+"/v1/chat/completions", secret, `{}`); code != http.StatusNotFound {
		t.Errorf("OpenAI path on an Azure proxy: %d; want 404", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v", err)
	}
	v := decode(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout)
	if l := v["limits"].([]any)[0].(map[string]any); l["used"] != 42.0 {
		t.Errorf("deployment limit used %v; want 42", l["used"])
	}
}
