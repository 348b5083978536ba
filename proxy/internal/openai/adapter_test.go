package openai

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/tokenbudget/tokenbudget/proxy/internal/captures"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// TestCapField: chat takes max_completion_tokens, Responses
// max_output_tokens, either the operator's field when named, none with
// none; embeddings and images never get one.
func TestCapField(t *testing.T) {
	for _, c := range []struct {
		f             wire.Format
		setting, want string
	}{
		{wire.OpenAIChat, wire.CapAuto, MaxCompletionTokens},
		{wire.OpenAIChat, "", MaxCompletionTokens},
		{wire.OpenAIChat, MaxTokens, MaxTokens},
		{wire.OpenAIChat, wire.CapNone, ""},
		{wire.OpenAIResponses, wire.CapAuto, MaxOutputTokens},
		{wire.OpenAIEmbeddings, wire.CapAuto, ""},
		{wire.OpenAIImages, MaxTokens, ""},
		{wire.Unknown, wire.CapAuto, ""},
	} {
		if got := (Adapter{F: c.f}).CapField(c.setting); got != c.want {
			t.Errorf("%v %q: %q; want %q", c.f, c.setting, got, c.want)
		}
	}
}

// TestPrepare: only a chat stream whose client did not ask for usage gets
// include_usage, and its usage-only chunk is then stripped.
func TestPrepare(t *testing.T) {
	body := []byte(`{"model":"m","stream":true}`)
	for _, c := range []struct {
		f            wire.Format
		ri           wire.RequestInfo
		want         string
		strip, fails bool
	}{
		{wire.OpenAIChat, wire.RequestInfo{Stream: true}, `{"stream_options":{"include_usage":true},"model":"m","stream":true}`, true, false},
		{wire.OpenAIChat, wire.RequestInfo{Stream: true, IncludeUsage: true}, string(body), false, false},
		{wire.OpenAIChat, wire.RequestInfo{}, string(body), false, false},
		{wire.OpenAIResponses, wire.RequestInfo{Stream: true}, string(body), false, false},
	} {
		out, strip, err := (Adapter{F: c.f}).Prepare(body, &c.ri)
		if string(out) != c.want || strip != c.strip || err != nil {
			t.Errorf("%v %+v: %s strip=%v err=%v; want %s strip=%v", c.f, c.ri, out, strip, err, c.want, c.strip)
		}
	}
}

// TestAuthorize: OpenAI's key as a bearer token, Azure's as api-key, none
// on a path the proxy does not know.
func TestAuthorize(t *testing.T) {
	c := &wire.Credentials{OpenAIKey: "sk", AzureKey: "az", GeminiKey: "g"}
	for _, tc := range []struct {
		a           Adapter
		bearer, api string
	}{
		{Adapter{F: wire.OpenAIChat}, "Bearer sk", ""},
		{Adapter{F: wire.OpenAIEmbeddings, Azure: true}, "", "az"},
		{Adapter{F: wire.Unknown}, "", ""},
	} {
		h := http.Header{}
		tc.a.Authorize(h, c)
		if h.Get("Authorization") != tc.bearer || h.Get("Api-Key") != tc.api || len(h) > 1 {
			t.Errorf("%+v: %v", tc.a, h)
		}
	}
}

// TestErrorBody: OpenAI's shape, param null unless named, the limit only
// on a budget refusal.
func TestErrorBody(t *testing.T) {
	a := Adapter{F: wire.OpenAIChat}
	for _, c := range []struct {
		e    wire.Error
		want string
	}{
		{wire.Error{Status: 429, Type: "rate_limit_error", Code: "token_budget_exceeded", Message: "m", Limit: map[string]int{"limit": 5}},
			`{"error":{"message":"m","type":"rate_limit_error","param":null,"code":"token_budget_exceeded","limit":{"limit":5}}}`},
		{wire.Error{Status: 400, Type: a.ErrorType(400), Code: "invalid_request", Message: "m", Param: "user"},
			`{"error":{"message":"m","type":"invalid_request_error","param":"user","code":"invalid_request"}}`},
	} {
		if b, _ := json.Marshal(a.ErrorBody(http.Header{}, &c.e)); string(b) != c.want {
			t.Errorf("%s\nwant %s", b, c.want)
		}
	}
}

// TestBodyAndStream: a recorded DeepSeek chat body gives its counts (cache
// hits, reasoning) through the adapter; an SSE answer is read as a stream,
// any other answer whole, whatever the request asked.
func TestBodyAndStream(t *testing.T) {
	a := Adapter{F: wire.OpenAIChat}
	tok, found, err := a.Body(captures.Provider(t, "deepseek-chat-json-2.json"))
	if !found || err != nil || tok.Input != 495 || tok.CacheRead != 320 || tok.Reasoning != 118 || tok.Output != 26 {
		t.Errorf("deepseek body: %+v %v %v", tok, found, err)
	}
	if s, streamed := a.Stream("application/json", true); s != nil || streamed {
		t.Errorf("a JSON answer to a stream request is read whole")
	}
	s, streamed := a.Stream("text/event-stream", false)
	if _, ok := s.(*wire.SSE); !ok || !streamed {
		t.Errorf("an SSE answer is read as a stream")
	}
}
