package main

import (
	"context"
	"encoding/json"
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

// TestProxySDKAzure: the official openai SDK's AzureOpenAI client (openai
// 7.55.0, run by Node.js), pointed at `budget proxy --provider azure
// --mock-upstream` with the gateway key as its api-key, gets its chat
// completion, its stream (without the usage chunk it did not ask for) and
// its embedding, each charged under the deployment's name.
func TestProxySDKAzure(t *testing.T) {
	t.Parallel()
	modules := sdkModules(t)
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--scope", "model", "--value", "prod-4o", "--limit", "1000000", "--window", "daily")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	line, done := startCLI(t, ctx, nil, "proxy", "--db", db, "--mock-upstream", "--provider", "azure", "--listen", "127.0.0.1:0")
	base := listenURL(t, line)

	out := nodeScript(t, modules, "azure.cjs", base, secret)
	var got struct {
		Chat struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"chat_usage"`
		StreamText  string `json:"stream_text"`
		StreamUsage bool   `json:"stream_usage"`
		Embedding   struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"embedding_usage"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node azure.cjs printed %q: %v", out, err)
	}
	if got.Chat.TotalTokens == 0 || got.Embedding.TotalTokens == 0 || got.StreamText == "" || got.StreamUsage {
		t.Errorf("the SDK got %+v; want usage on the chat and the embedding, text and no usage chunk on the stream", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v", err)
	}
	// The stream: the mock's 25-word answer to the chat's 5-token prompt.
	want := got.Chat.TotalTokens + 5 + 25 + got.Embedding.TotalTokens
	v := decode(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout)
	if l := v["limits"].([]any)[0].(map[string]any); l["used"] != float64(want) {
		t.Errorf("deployment limit used %v; want %d", l["used"], want)
	}
}
