package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestProxySDKGeminiAndBedrock: the official @google/genai and
// @aws-sdk/client-bedrock-runtime clients (run by Node.js), pointed at
// `budget proxy --mock-upstream` with the gateway key as their API key
// (Gemini's x-goog-api-key; Bedrock's API key, a bearer token, over the
// HTTP/2 the AWS SDK speaks), each get a call, its stream (SSE; AWS
// event-stream) with its usage, and a budget refusal in the shape they
// decode: status 429 (Gemini), ThrottlingException (Bedrock). The key's
// limit counts exactly the tokens the SDKs were told of.
func TestProxySDKGeminiAndBedrock(t *testing.T) {
	t.Parallel()
	modules := sdkModules(t)
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "2000", "--window", "daily")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	line, done := startCLI(t, ctx, nil, "proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0")
	base := listenURL(t, line)

	type usage struct {
		Total int64 `json:"totalTokenCount"` // Gemini
		Sum   int64 `json:"totalTokens"`     // Bedrock
	}
	var seen int64
	for _, script := range []string{"google.cjs", "bedrock.cjs"} {
		out := nodeScript(t, modules, script, base, secret, "AWS_BEARER_TOKEN_BEDROCK="+secret, "REFUSE=1", "NODE_NO_WARNINGS=1")
		var got struct {
			Text          string `json:"text"`
			Usage         usage  `json:"usage"`
			StreamText    string `json:"stream_text"`
			StreamUsage   usage  `json:"stream_usage"`
			Refused       bool   `json:"refused"`
			RefusalStatus int    `json:"refusal_status"`
			RefusalName   string `json:"refusal_name"`
			RefusalMsg    string `json:"refusal_message"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("node %s printed %q: %v", script, out, err)
		}
		total := got.Usage.Total + got.Usage.Sum + got.StreamUsage.Total + got.StreamUsage.Sum
		if got.Text == "" || got.StreamText == "" || got.Usage.Total+got.Usage.Sum == 0 || got.StreamUsage.Total+got.StreamUsage.Sum == 0 {
			t.Errorf("%s: the SDK got %+v; want text and usage, streamed and not", script, got)
		}
		if !got.Refused || got.RefusalStatus != 429 || !strings.Contains(got.RefusalMsg, "token budget exceeded") ||
			(script == "bedrock.cjs" && got.RefusalName != "ThrottlingException") {
			t.Errorf("%s: refusal %+v; want a 429 the SDK decodes", script, got)
		}
		seen += total
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v", err)
	}
	v := decode(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout)
	if l := v["limits"].([]any)[0].(map[string]any); l["used"] != float64(seen) {
		t.Errorf("limit used %v; want %d, the tokens the SDKs were told of", l["used"], seen)
	}
}
