package mock

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/proxy/internal/kinds"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// TestMockUpstream: every route answers, streamed or not, in a shape the
// usage parsers read, with a dated model name and the documented counts.
func TestMockUpstream(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&Upstream{})
	defer srv.Close()
	// text bytes: user(4) + "hello there"(11) = 15 -> 4, + 3 per message
	const msgs = `"messages":[{"role":"user","content":"hello there"}]`
	cases := []struct {
		path, body string
		stream     bool
		want       wire.Tokens
	}{
		{"/v1/chat/completions", `{"model":"gpt-4o",` + msgs + `}`, false, wire.Tokens{Model: "gpt-4o-2026-01-01", Input: 7, Output: 25, ServiceTier: "default"}},
		{"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":5,"stream":true,"stream_options":{"include_usage":true},` + msgs + `}`, true,
			wire.Tokens{Model: "gpt-4o-2026-01-01", Input: 7, Output: 5}},
		{"/v1/responses", `{"model":"o4","input":"hello there"}`, false, wire.Tokens{Model: "o4-2026-01-01", Input: 6, Output: 25}},
		{"/v1/responses", `{"model":"o4","input":"hello there","stream":true,"max_output_tokens":3}`, true, wire.Tokens{Model: "o4-2026-01-01", Input: 6, Output: 3}},
		{"/v1/embeddings", `{"model":"e","input":"hello there"}`, false, wire.Tokens{Model: "e-2026-01-01", Input: 3}},
		{"/openai/deployments/prod/chat/completions", `{` + msgs + `}`, false, wire.Tokens{Model: "prod-2026-01-01", Input: 7, Output: 25, ServiceTier: "default"}},
		{"/v1/images/generations", `{"model":"gpt-image-1","prompt":"a cat wearing a hat","n":2,"quality":"low","size":"1024x1024"}`, false, wire.Tokens{Input: 5, Output: 2 * 272}},
		{"/v1/messages", `{"model":"claude","max_tokens":100,` + msgs + `}`, false, wire.Tokens{Model: "claude-2026-01-01", Input: 7, Output: 25}},
		{"/v1/messages", `{"model":"claude","max_tokens":100,"stream":true,` + msgs + `}`, true, wire.Tokens{Model: "claude-2026-01-01", Input: 7, Output: 25}},
	}
	for _, c := range cases {
		resp, err := http.Post(srv.URL+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		f, ok := wire.ForPath(c.path)
		if !ok { // an Azure deployment path
			f = wire.OpenAIChat
		}
		a := kinds.For(f, "")
		var got wire.Tokens
		var found bool
		if c.stream {
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Errorf("%s: content type %q", c.path, ct)
			}
			p, _ := a.Stream("text/event-stream", true)
			p.Write(b)
			got, found = p.Result()
			if !p.Final() || p.Err() != nil {
				t.Errorf("%s stream: final %v err %v", c.path, p.Final(), p.Err())
			}
		} else {
			got, found, err = a.Body(b)
		}
		if !found || err != nil || got != c.want {
			t.Errorf("%s stream=%v: got %+v found=%v err=%v; want %+v\n%s", c.path, c.stream, got, found, err, c.want, b)
		}
	}
	// A stream without include_usage has no usage chunk, as OpenAI's.
	resp, _ := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), `"usage":{`) || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Errorf("chat stream without include_usage:\n%s", b)
	}
	// Asked failures.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(`{}`))
	req.Header.Set("X-Mock-Status", "529")
	req.Header.Set("X-Mock-Retry-After", "7")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 529 || resp.Header.Get("Retry-After") != "7" {
		t.Errorf("X-Mock-Status: got %d retry-after %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp, _ := http.Post(srv.URL+"/v1/models", "application/json", nil); resp.StatusCode != 404 {
		t.Errorf("unknown path: %d", resp.StatusCode)
	}
	// count_tokens answers the input count a Messages call would report.
	resp, err = http.Post(srv.URL+"/v1/messages/count_tokens", "application/json", strings.NewReader(`{"model":"claude",`+msgs+`}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"input_tokens":7}` {
		t.Errorf("count_tokens: %d %s", resp.StatusCode, b)
	}
}
