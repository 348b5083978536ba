package anthropic

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// TestErrorShape: Anthropic's error types by status and its
// {"type":"error","error":{...}} body, the code and a refusal's limit in it.
func TestErrorShape(t *testing.T) {
	var a Adapter
	for status, want := range map[int]string{429: "rate_limit_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 413: "request_too_large", 400: "invalid_request_error", 503: "overloaded_error",
		504: "timeout_error", 502: "api_error"} {
		if got := a.ErrorType(status); got != want {
			t.Errorf("ErrorType(%d) = %q; want %q", status, got, want)
		}
	}
	e := wire.Error{Status: 429, Type: "rate_limit_error", Code: "token_budget_exceeded", Message: "m", Limit: map[string]int{"limit": 5}}
	b, _ := json.Marshal(a.ErrorBody(http.Header{}, &e))
	if want := `{"type":"error","error":{"type":"rate_limit_error","message":"m","code":"token_budget_exceeded","limit":{"limit":5}}}`; string(b) != want {
		t.Errorf("%s\nwant %s", b, want)
	}
}

// TestAdapterRequestAndCredential: the end user from metadata.user_id, the
// client's max_tokens as the cap (none injected: the API requires one),
// the Anthropic key as x-api-key only.
func TestAdapterRequestAndCredential(t *testing.T) {
	var a Adapter
	var r wire.Request
	body := []byte(`{"model":"claude","max_tokens":300,"system":"be brief","metadata":{"user_id":"u1"},"messages":[{"role":"user","content":"hi"}]}`)
	if err := r.Parse(body); err != nil {
		t.Fatal(err)
	}
	ri := wire.RequestInfo{Choices: 1}
	a.Request(&r, body, &ri)
	if ri.Model != "claude" || ri.MaxOutput != 300 || !ri.HasCap || ri.User != "u1" || ri.Messages != 1 || ri.TextBytes != 8+4+2 {
		t.Errorf("request %+v", ri)
	}
	if f := a.CapField(wire.CapAuto); f != "" {
		t.Errorf("cap field %q; want none", f)
	}
	h := http.Header{}
	a.Authorize(h, &wire.Credentials{OpenAIKey: "sk", AnthropicKey: "ant"})
	if h.Get("X-Api-Key") != "ant" || len(h) != 1 {
		t.Errorf("credential headers %v", h)
	}
}

// TestCacheWritesByLifetime: usage.cache_creation's 1-hour count is the
// 1-hour part of the cache writes, in a body and in a stream (where a
// message_delta without the split keeps message_start's, and one with it
// replaces it); the older shape has none; a count above the writes is
// capped at them; a cache_creation of another shape is ignored.
func TestCacheWritesByLifetime(t *testing.T) {
	usage := func(split string) string {
		return `{"model":"claude","usage":{"input_tokens":5,"cache_creation_input_tokens":300,"cache_read_input_tokens":0` + split + `,"output_tokens":7}}`
	}
	for _, c := range []struct {
		name, split string
		want        int64
	}{
		{"split", `,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":200}`, 200},
		{"older shape", ``, 0},
		{"null split", `,"cache_creation":null`, 0},
		{"more 1-hour writes than writes", `,"cache_creation":{"ephemeral_1h_input_tokens":900}`, 300},
		{"another shape", `,"cache_creation":300`, 0},
	} {
		tok, found, err := Body([]byte(usage(c.split)))
		if err != nil || !found || tok.CacheWrite != 300 || tok.CacheWrite1h != c.want || tok.Input != 305 {
			t.Errorf("%s: Body = %+v, %v, %v; want 300 writes, %d of them 1-hour", c.name, tok, found, err, c.want)
		}
	}
	var d Decoder
	for _, ev := range []string{
		`{"type":"message_start","message":{"model":"claude","usage":{"input_tokens":5,"cache_creation_input_tokens":300,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":200},"output_tokens":1}}}`,
		`{"type":"message_delta","usage":{"input_tokens":5,"cache_creation_input_tokens":300,"output_tokens":7}}`,
	} {
		if _, err := d.Event(nil, []byte(ev)); err != nil {
			t.Fatal(err)
		}
	}
	if tok, _ := d.Result(); tok.CacheWrite1h != 200 || tok.Output != 7 {
		t.Errorf("stream without the split in message_delta: %+v; want message_start's 200 1-hour writes", tok)
	}
	if _, err := d.Event(nil, []byte(`{"type":"message_delta","usage":{"cache_creation_input_tokens":300,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":300},"output_tokens":8}}`)); err != nil {
		t.Fatal(err)
	}
	if tok, _ := d.Result(); tok.CacheWrite1h != 300 || tok.Output != 8 {
		t.Errorf("stream with the split in message_delta: %+v; want its 300 1-hour writes", tok)
	}
}
