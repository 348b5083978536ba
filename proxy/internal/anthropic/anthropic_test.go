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
