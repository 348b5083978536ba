package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// replay is an upstream answering each request with a recorded response:
// the file route(r) names under testdata/captures, after checking that the
// upstream credential arrived where its kind sends it (header, want) and
// that no gateway header did. A want ending in "*" is a prefix.
func replay(t *testing.T, header, want string, route func(*http.Request) string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get(header); got != want && !(strings.HasSuffix(want, "*") && strings.HasPrefix(got, strings.TrimSuffix(want, "*"))) {
			t.Errorf("%s: upstream credential %s = %q; want %q", r.URL.Path, header, got, want)
		}
		if r.Header.Get("X-Budget-Provider") != "" {
			t.Errorf("%s: the X-Budget-Provider header went upstream", r.URL.Path)
		}
		data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "captures", route(r)))
		if err != nil {
			t.Error(err)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		switch {
		case strings.HasSuffix(route(r), ".txt"):
			w.Header().Set("Content-Type", "text/event-stream")
		case strings.HasSuffix(route(r), ".bin"):
			w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		default:
			w.Header().Set("Content-Type", "application/json")
		}
		w.Write(data)
	}))
	t.Cleanup(s.Close)
	return s
}

func fixed(name string) func(*http.Request) string {
	return func(*http.Request) string { return name }
}

// TestProxyManyUpstreams: one budget proxy with openai, anthropic, gemini,
// bedrock, azure and an OpenAI-kind deepseek upstream serves each through
// its native path (deepseek by --model-route, and by X-Budget-Provider),
// sends each its own credential from the environment (Bedrock: SigV4 from
// the AWS variables; proxy's TestBedrockCapturesThroughProxy verifies the
// signature), meters each exactly on
// recorded responses (streamed and not) under its NAME as the provider,
// and holds one team budget across all of them: once it is spent, every
// upstream's next request is refused in its own error shape.
func TestProxyManyUpstreams(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "team", "set", "eng", "--db", db)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--team", "eng", "--db", db).stdout)
	// What the recorded responses bill (testdata/captures), plus 100: room
	// for every request's estimate until the last, none after.
	const billed = 1146 + 1354 + 910 + 1290 + 38 + 2*639 + 1083 + 832
	mustRun(t, 0, "limit", "set", "--db", db, "--team", "eng", "--limit", strconv.Itoa(billed+100), "--window", "daily")

	openai := replay(t, "Authorization", "Bearer sk-openai", fixed("openai-chat-json-1.json"))
	anthropic := replay(t, "X-Api-Key", "sk-ant", fixed("anthropic-messages-json-1.json"))
	gemini := replay(t, "X-Goog-Api-Key", "g-key", func(r *http.Request) string {
		if strings.HasSuffix(r.URL.Path, ":streamGenerateContent") {
			return "providers/gemini-generatecontent-stream-2.txt"
		}
		return "providers/gemini-generatecontent-json-4.json"
	})
	azure := replay(t, "Api-Key", "az-key", fixed("providers/azure-chat-json-4.json"))
	bedrock := replay(t, "Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/*", func(r *http.Request) string {
		if strings.HasSuffix(r.URL.Path, "/invoke-with-response-stream") {
			return "providers/bedrock-invoke-stream-2.bin"
		}
		return "providers/bedrock-converse-json-4.json"
	})
	deepseek := replay(t, "Authorization", "Bearer ds-key", fixed("providers/deepseek-chat-json-2.json"))
	env := map[string]string{"OPENAI_API_KEY": "sk-openai", "ANTHROPIC_API_KEY": "sk-ant", "GEMINI_API_KEY": "g-key",
		"AZURE_OPENAI_API_KEY": "az-key", "DEEPSEEK_API_KEY": "ds-key",
		"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "us-east-1"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	line, done := startCLI(t, ctx, env, "proxy", "--db", db, "--listen", "127.0.0.1:0",
		"--upstream", "openai="+openai.URL, "--upstream", "anthropic="+anthropic.URL, "--upstream", "gemini="+gemini.URL,
		"--upstream", "azure="+azure.URL, "--upstream", "deepseek="+deepseek.URL, "--upstream", "bedrock="+bedrock.URL,
		"--upstream-api", "deepseek=openai", "--model-route", "deepseek-*=deepseek")
	base := listenURL(t, line)

	send := func(path, body string, header ...string) (int, string) {
		t.Helper()
		return call(t, http.MethodPost, base+path, body, append([]string{"Authorization", "Bearer " + secret}, header...)...)
	}
	chat := func(model string) string {
		return `{"model":"` + model + `","max_tokens":200,"messages":[{"role":"user","content":"hi"}]}`
	}
	const geminiReq = `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":200}}`
	requests := []struct {
		name, path, body string
		header           []string
	}{
		{"openai", "/v1/chat/completions", chat("gpt-4o"), nil},
		{"anthropic", "/v1/messages", chat("claude-sonnet-4-5"), []string{"Authorization", "", "X-Api-Key", secret}},
		{"gemini", "/v1beta/models/gemini-2.5-flash:generateContent", geminiReq, []string{"Authorization", "", "X-Goog-Api-Key", secret}},
		{"gemini stream", "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", geminiReq, nil},
		{"azure", "/openai/deployments/prod/chat/completions?api-version=2024-10-21", chat("ignored"), []string{"Authorization", "", "Api-Key", secret}},
		{"bedrock converse", "/model/us.anthropic.claude-sonnet-4-6/converse", `{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":200}}`, nil},
		{"bedrock invoke stream", "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/invoke-with-response-stream", `{"anthropic_version":"bedrock-2023-05-31","max_tokens":200,"messages":[{"role":"user","content":"hi"}]}`, nil},
		{"deepseek by header", "/v1/chat/completions", chat("gpt-4o-mini"), []string{"X-Budget-Provider", "deepseek"}},
		{"deepseek by model", "/v1/chat/completions", chat("deepseek-reasoner"), nil},
	}
	for _, r := range requests {
		if code, body := send(r.path, r.body, r.header...); code != http.StatusOK {
			t.Fatalf("%s: %d %s", r.name, code, body)
		}
	}
	if code, body := send("/v1/chat/completions", chat("gpt-4o"), "X-Budget-Provider", "nope"); code != http.StatusNotFound ||
		!strings.Contains(body, "openai, deepseek") {
		t.Errorf("X-Budget-Provider nope: %d %s; want 404 naming the OpenAI-kind upstreams", code, body)
	}
	// The team's budget is spent: each kind refuses in its own shape.
	for _, r := range []struct{ path, body, shape string }{
		{"/v1/chat/completions", chat("gpt-4o"), `"code":"token_budget_exceeded"`},
		{"/v1/chat/completions", chat("deepseek-chat"), `"code":"token_budget_exceeded"`},
		{"/v1/messages", chat("claude-sonnet-4-5"), `"type":"error"`},
		{"/v1beta/models/gemini-2.5-flash:generateContent", geminiReq, `"status":"RESOURCE_EXHAUSTED"`},
		{"/openai/deployments/prod/chat/completions", chat("x"), `"code":"token_budget_exceeded"`},
		{"/model/us.anthropic.claude-sonnet-4-6/converse", `{"messages":[],"inferenceConfig":{"maxTokens":200}}`, `"code":"token_budget_exceeded"`},
	} {
		if code, body := send(r.path, r.body); code != http.StatusTooManyRequests || !strings.Contains(body, r.shape) {
			t.Errorf("%s after the budget: %d %s; want 429 with %s", r.path, code, body, r.shape)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v", err)
	}

	rows := decode(t, mustRun(t, 0, "report", "--db", db, "--by", "provider", "--until", "2100-01-01", "--format", "json").stdout)["rows"].([]any)
	want := map[string][5]float64{ // input, output, reasoning, cache_read, cache_write
		"openai":    {1144, 2, 0, 1024, 0},
		"anthropic": {4 + 1163, 187, 0, 0, 1163},
		"gemini":    {727 + 34, 108 + 469, 75 + 787, 375, 0},
		"azure":     {16, 22, 0, 0, 0},
		"deepseek":  {2 * 495, 2 * 26, 2 * 118, 2 * 320, 0},
		"bedrock":   {914 + 702, 169 + 130, 0, 0, 0},
	}
	var total float64
	for _, r := range rows {
		row := r.(map[string]any)
		p, _ := row["provider"].(string)
		got := [5]float64{row["input"].(float64), row["output"].(float64), row["reasoning"].(float64), row["cache_read"].(float64), row["cache_write"].(float64)}
		if got != want[p] {
			t.Errorf("provider %s: %v; want %v", p, got, want[p])
		}
		delete(want, p)
		total += row["tokens"].(float64)
	}
	if len(want) > 0 || total != billed {
		t.Errorf("providers missing from the report: %v; tokens %v, want %d", want, total, billed)
	}
}
