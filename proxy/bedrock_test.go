package proxy_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/tokenbudget/tokenbudget/proxy"
)

const converseModelPath = "/model/anthropic.claude-3-sonnet-20240229-v1%3A0/"

// converseBody is a small Converse request; config is its inferenceConfig
// ("" for none).
func converseBody(text, config string) string {
	b := `{"messages":[{"role":"user","content":[{"text":` + mustJSON(text) + `}]}]`
	if config != "" {
		b += `,"inferenceConfig":` + config
	}
	return b + "}"
}

var testAWS = aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", SessionToken: "session"}

// bedrockEnv is an env whose upstream is a Bedrock endpoint signed for with
// testAWS in us-east-1; the upstream checks every request's SigV4
// signature by signing it again (over the headers it names and the body
// received) and answers with serve.
func bedrockEnv(t *testing.T, mode proxy.Mode, serve func(w http.ResponseWriter, r *http.Request, body []byte)) *env {
	return newEnv(t, envOptions{mode: mode, cfg: func(pc *proxy.Config) { pc.Routes = proxy.BedrockRoutes("") },
		up: func(uc *proxy.UpstreamConfig) {
			uc.AWSCredentials, uc.AWSRegion = credentials{testAWS}, "us-east-1"
		}},
		func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if err := checkSigV4(r, body); err != nil {
				t.Errorf("%s: %v", r.URL.Path, err)
				w.WriteHeader(http.StatusForbidden)
				return
			}
			serve(w, r, body)
		})
}

type credentials struct{ c aws.Credentials }

func (c credentials) Retrieve(context.Context) (aws.Credentials, error) { return c.c, nil }

var signedHeaders = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/\d{8}/us-east-1/bedrock/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=[0-9a-f]{64}$`)

// checkSigV4 signs r again as AWS would verify it and compares.
func checkSigV4(r *http.Request, body []byte) error {
	auth := r.Header.Get("Authorization")
	m := signedHeaders.FindStringSubmatch(auth)
	if m == nil {
		return fmt.Errorf("Authorization %q is no SigV4 signature for bedrock in us-east-1", auth)
	}
	if r.Header.Get("X-Amz-Security-Token") != "session" {
		return fmt.Errorf("no session token")
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return fmt.Errorf("X-Amz-Date: %v", err)
	}
	again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	for _, h := range strings.Split(m[1], ";") {
		if h != "host" && h != "x-amz-date" && h != "x-amz-security-token" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	again.ContentLength = int64(len(body))
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), testAWS, again, hex.EncodeToString(sum[:]), "bedrock", "us-east-1", at); err != nil {
		return err
	}
	if got := again.Header.Get("Authorization"); got != auth {
		return fmt.Errorf("signature does not verify:\n got %s\nwant %s", auth, got)
	}
	return nil
}

// TestBedrockCapturesThroughProxy: each recorded Bedrock response (Converse
// bodies, ConverseStream event-streams, an InvokeModel body and an
// InvokeModelWithResponseStream of an Anthropic model) passes through the
// proxy byte for byte, split at every 37 bytes, to a SigV4-signed upstream,
// and its usage lands in its columns: cache reads and writes inside the
// input (Bedrock reports them beside it), the invoke stream by its
// Anthropic events; the model is the path's.
func TestBedrockCapturesThroughProxy(t *testing.T) {
	t.Parallel()
	arn := "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A012345678901%3Ainference-profile%2Fus.anthropic.claude-3-7-sonnet-20250219-v1%3A0/converse"
	for _, c := range []struct {
		file, path, model string
		want              usageCols
	}{
		{"bedrock-converse-json-2.json", arn, "arn:aws:bedrock:us-east-1:012345678901:inference-profile/us.anthropic.claude-3-7-sonnet-20250219-v1:0", usageCols{input: 20, output: 72}},
		{"bedrock-converse-json-4.json", converseModelPath + "converse", "", usageCols{input: 914, output: 169}},
		{"bedrock-converse-json-6.json", converseModelPath + "converse", "", usageCols{input: 2 + 1322, output: 5, cacheRead: 1322}},
		{"bedrock-converse-stream-2.bin", converseModelPath + "converse-stream", "", usageCols{input: 236, output: 58}},
		{"bedrock-converse-stream-4.bin", converseModelPath + "converse-stream", "", usageCols{input: 54, output: 18}},
		{"bedrock-invoke-json-2.json", converseModelPath + "invoke", "", usageCols{input: 4 + 18131, output: 50, cacheRead: 18131}},
		// message_delta's 130 output tokens, not the invocation metrics' 98.
		{"bedrock-invoke-stream-2.bin", converseModelPath + "invoke-with-response-stream", "", usageCols{input: 702, output: 130}},
	} {
		for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
			t.Run(string(mode)+"/"+c.file, func(t *testing.T) {
				t.Parallel()
				data, err := os.ReadFile(filepath.Join(capturesDir, "providers", c.file))
				if err != nil {
					t.Fatal(err)
				}
				var gotPath string
				e := bedrockEnv(t, mode, func(w http.ResponseWriter, r *http.Request, _ []byte) {
					gotPath = r.URL.EscapedPath()
					if strings.HasSuffix(c.file, ".bin") {
						w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
					} else {
						w.Header().Set("Content-Type", "application/json")
					}
					writeChunked(w, data)
				})
				body := converseBody("What is the capital of Japan?", `{"maxTokens":1000}`)
				if strings.Contains(c.path, "/invoke") {
					body = `{"anthropic_version":"bedrock-2023-05-31","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`
				}
				r := e.do(c.path, body) // the gateway key as a bearer token: Bedrock API keys' form
				if r.status != http.StatusOK || r.body != string(data) {
					t.Fatalf("status %d; body differs from the upstream's: %v %q", r.status, r.body != string(data), r.body[:min(len(r.body), 300)])
				}
				if gotPath != c.path {
					t.Errorf("upstream path %s; want %s", gotPath, c.path)
				}
				got := e.usageCols()
				c.want.provider, c.want.model = "bedrock", "anthropic.claude-3-sonnet-20240229-v1:0"
				if c.model != "" {
					c.want.model = c.model
				}
				if got != c.want {
					t.Errorf("recorded %+v\nwant     %+v", got, c.want)
				}
			})
		}
	}
}

// TestBedrockCapAndRefusal: a Converse request without
// inferenceConfig.maxTokens gets the injected cap there, its other settings
// kept; a refusal is a 429 ThrottlingException in Bedrock's error shape
// (x-amzn-ErrorType, message) with the proxy's code and the limit; a
// Bedrock API key as the upstream credential is sent as a bearer token and
// nothing is signed.
func TestBedrockCapAndRefusal(t *testing.T) {
	t.Parallel()
	var sent []byte
	var auth string
	e := newEnv(t, envOptions{mode: proxy.ModeReserve, cfg: func(pc *proxy.Config) { pc.Routes = proxy.BedrockRoutes("") },
		up: func(uc *proxy.UpstreamConfig) { uc.BedrockToken = "bedrock-api-key" }},
		func(w http.ResponseWriter, r *http.Request) {
			sent, _ = io.ReadAll(r.Body)
			auth = r.Header.Get("Authorization") + r.Header.Get("X-Amz-Date")
			writeJSON(w, http.StatusOK, `{"output":{"message":{"content":[{"text":"ok"}],"role":"assistant"}},"stopReason":"end_turn","usage":{"inputTokens":5,"outputTokens":1,"totalTokens":6}}`)
		})
	e.limit("", "", "output", "1h", 300)
	r := e.do(converseModelPath+"converse", converseBody("hi", `{"temperature":0.2}`))
	var got struct {
		InferenceConfig json.RawMessage `json:"inferenceConfig"`
	}
	json.Unmarshal(sent, &got)
	if r.status != http.StatusOK || string(got.InferenceConfig) != `{"maxTokens":300,"temperature":0.2}` || auth != "Bearer bedrock-api-key" {
		t.Errorf("status %d; sent inferenceConfig %s, credential %q", r.status, got.InferenceConfig, auth)
	}
	r = e.do(converseModelPath+"converse", converseBody("hi", `{"maxTokens":1000}`))
	var refusal struct {
		Message string         `json:"message"`
		Code    string         `json:"code"`
		Limit   map[string]any `json:"limit"`
	}
	json.Unmarshal([]byte(r.body), &refusal)
	if r.status != http.StatusTooManyRequests || r.header.Get("X-Amzn-Errortype") != "ThrottlingException" ||
		refusal.Code != proxy.CodeBudgetExceeded || refusal.Limit == nil || refusal.Message == "" {
		t.Errorf("refusal %d %v %s", r.status, r.header, r.body)
	}
}

// TestBedrockCancelledStreamCharged: a client that leaves a ConverseStream
// before its metadata event is charged the input estimate and the text
// streamed to it (ceil(bytes / 4)), not the cap; the reservation is settled.
func TestBedrockCancelledStreamCharged(t *testing.T) {
	t.Parallel()
	var frames bytes.Buffer
	enc := eventstream.NewEncoder()
	for _, ev := range []struct{ typ, payload string }{
		{"messageStart", `{"role":"assistant"}`},
		{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Tokyo is the capital"}}`}, // 20 bytes: 5 tokens
	} {
		m := eventstream.Message{Payload: []byte(ev.payload)}
		m.Headers.Set(":event-type", eventstream.StringValue(ev.typ))
		m.Headers.Set(":message-type", eventstream.StringValue("event"))
		enc.Encode(&frames, m)
	}
	sentFirst := make(chan struct{})
	var once sync.Once
	e := bedrockEnv(t, proxy.ModeReserve, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		w.Write(frames.Bytes())
		http.NewResponseController(w).Flush()
		once.Do(func() { close(sentFirst) })
		<-r.Context().Done()
	})
	id := e.limit("", "", "tokens", "1h", 100_000)
	ctx, cancel := context.WithCancel(context.Background())
	body := converseBody("What is the capital of Japan?", `{"maxTokens":4000}`) // 29 bytes + 4 + 4: 12 tokens
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.proxy.URL+converseModelPath+"converse-stream", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-sentFirst
	got := make([]byte, frames.Len())
	if _, err := io.ReadFull(resp.Body, got); err != nil || !bytes.Equal(got, frames.Bytes()) {
		t.Fatalf("frames %v", err)
	}
	cancel()
	resp.Body.Close()
	e.wait(1)
	ri, _ := proxy.ParseRequest(proxy.BedrockConverse, []byte(body))
	in := ri.Estimate(proxy.BedrockConverse, proxy.DefaultMaxOutput, proxy.DefaultImageTokens).Input
	if used, reserved := e.used(id); used != in+5 || reserved != 0 {
		t.Errorf("used %d reserved %d; want %d (the input estimate and 5 streamed tokens) and 0", used, reserved, in+5)
	}
}
