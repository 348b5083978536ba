package proxy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/gatekey"
)

// errorBody is an error answer's type and code, in either API's shape
// (OpenAI: error.type and error.code; Anthropic: error.type only, with the
// code in the message's stead, so both are read).
func errorBody(t *testing.T, body string) (typ, code, msg string) {
	t.Helper()
	var v struct {
		Error struct {
			Type    string `json:"type"`
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	return v.Error.Type, v.Error.Code, v.Error.Message
}

// A key limited to some models is refused any other with 403
// model_not_allowed in each API's permission shape, before any upstream
// call and without charging anything; the models it may use go through,
// matched as model-scope limits match (normalised, patterns).
func TestKeyModelsAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{clock: true}, okUpstream)
	models := []string{"gpt-4o*", "claude-3-5-haiku"}
	if _, err := e.db.KeyStore().UpdateKey(context.Background(), "team", gatekey.KeyChange{Models: &models}, testNow); err != nil {
		t.Fatal(err)
	}
	id := e.limit("", "", "", "1h", 1_000_000)
	for _, c := range []struct {
		path, body, wantType string
	}{
		{"/v1/chat/completions", `{"model":"o3","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "invalid_request_error"},
		{"/v1/messages", `{"model":"claude-3-opus","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "permission_error"},
	} {
		r := e.do(c.path, c.body)
		if r.status != http.StatusForbidden {
			t.Fatalf("%s: %d %s; want 403", c.path, r.status, r.body)
		}
		typ, code, msg := errorBody(t, r.body)
		if typ != c.wantType || !strings.Contains(r.body, "model_not_allowed") || !strings.Contains(msg, "gpt-4o*") {
			t.Errorf("%s: type %q code %q message %q; want %s, model_not_allowed, naming the allowed models", c.path, typ, code, msg, c.wantType)
		}
		if r.header.Get("X-Should-Retry") != "false" {
			t.Errorf("%s: x-should-retry %q; want false", c.path, r.header.Get("X-Should-Retry"))
		}
	}
	if n := e.hits.Load(); n != 0 {
		t.Fatalf("the upstream was called %d times for refused models", n)
	}
	if used, reserved := e.used(id); used != 0 || reserved != 0 {
		t.Fatalf("refused requests charged %d (+%d held)", used, reserved)
	}
	for _, body := range []string{
		`{"model":"openai/GPT-4o-mini-2024-07-18","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		if r := e.do("/v1/chat/completions", body); r.status != http.StatusOK {
			t.Errorf("an allowed model: %d %s", r.status, r.body)
		}
	}
}

// An expired key is 401 key_expired, told apart from an unknown key, and
// nothing reaches the upstream; a key expiring later works until then.
func TestKeyExpired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{}, okUpstream)
	later := time.Now().Add(time.Hour)
	ks := e.db.KeyStore()
	if _, err := ks.UpdateKey(context.Background(), "team", gatekey.KeyChange{ExpiresAt: &later}, testNow); err != nil {
		t.Fatal(err)
	}
	const body = `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	if r := e.do("/v1/chat/completions", body); r.status != http.StatusOK {
		t.Fatalf("a key expiring in an hour: %d %s", r.status, r.body)
	}
	// A second key, expired before its first use (the first one's answer
	// is cached for the lookup's TTL).
	secret := addKey(t, ks, "old", gatekey.Key{ExpiresAt: time.Now().Add(-time.Second)})
	hits := e.hits.Load()
	for _, c := range []struct{ path, wantType string }{
		{"/v1/chat/completions", "invalid_request_error"},
		{"/v1/messages", "authentication_error"},
	} {
		r := e.send(c.path, body, "Authorization", "Bearer "+secret)
		e.wait(1)
		if r.status != http.StatusUnauthorized || !strings.Contains(r.body, "key_expired") {
			t.Fatalf("%s with an expired key: %d %s; want 401 key_expired", c.path, r.status, r.body)
		}
		if typ, _, _ := errorBody(t, r.body); typ != c.wantType {
			t.Errorf("%s: type %q; want %s", c.path, typ, c.wantType)
		}
	}
	// The routes that cost nothing take no expired key either: they would
	// still reach the upstream with the operator's credential, or show the
	// key's budget.
	for _, c := range []struct {
		name string
		send func() response
	}{
		{"GET /v1/models", func() response { return e.get("/v1/models", "Authorization", "Bearer "+secret) }},
		{"GET /v1/budget", func() response { return e.get("/v1/budget", "Authorization", "Bearer "+secret) }},
		{"POST /v1/messages/count_tokens", func() response {
			r := e.send("/v1/messages/count_tokens", body, "X-Api-Key", secret, "Anthropic-Version", "2023-06-01")
			e.wait(1)
			return r
		}},
	} {
		if r := c.send(); r.status != http.StatusUnauthorized || !strings.Contains(r.body, "key_expired") {
			t.Errorf("%s with an expired key: %d %s; want 401 key_expired", c.name, r.status, r.body)
		}
	}
	if e.hits.Load() != hits {
		t.Fatal("an expired key's request reached the upstream")
	}
	if r := e.send("/v1/chat/completions", body, "Authorization", "Bearer tbk_unknown"); r.status != http.StatusUnauthorized || strings.Contains(r.body, "key_expired") {
		t.Fatalf("an unknown key: %d %s; want 401 without key_expired", r.status, r.body)
	}
	e.wait(1)
}

// addKey stores a new gateway key name with rules' expiry and models and
// returns its secret.
func addKey(t *testing.T, ks gatekey.Store, name string, rules gatekey.Key) string {
	t.Helper()
	secret := "tbk_" + name + "-secret"
	rules.Name, rules.Hash, rules.CreatedAt = name, gatekey.HashSecret(secret), testNow
	if err := gatekey.Create(context.Background(), ks, rules, false); err != nil {
		t.Fatal(err)
	}
	return secret
}
