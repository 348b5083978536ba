package proxy_test

import (
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/proxy/mock"
)

// TestMockThroughProxy: the mock's streamed chat, behind the proxy, is
// charged by its usage chunk, which the client does not see.
func TestMockThroughProxy(t *testing.T) {
	t.Parallel()
	mock := &mock.Upstream{}
	e := newEnv(t, envOptions{}, mock.ServeHTTP)
	id := e.limit("", "", "tokens", "1h", 10_000)
	r := e.do("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello there"}]}`)
	if r.status != 200 || strings.Contains(r.body, `"usage":{`) {
		t.Fatalf("got %d:\n%s", r.status, r.body)
	}
	if used, _ := e.used(id); used != 7+25 {
		t.Errorf("used %d; want 32", used)
	}
}
