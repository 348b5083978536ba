package mock

import (
	"mime"
	"net/url"

	"github.com/tokenbudget/tokenbudget/proxy/internal/kinds"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// Usage is the usage an answer to a request for path (any route the mock
// answers, escaped as on the wire) reports, read as the proxy reads it:
// the whole body, or a stream (SSE, Gemini's JSON array, Bedrock's
// event-stream) by its Content-Type. Output counts reasoning too. A client
// of the proxy (`budget demo`) shows with it what each answer said it
// cost; found is false when the answer reports no usage (a usage chunk the
// proxy added and stripped, say).
func Usage(path, contentType string, body []byte) (input, output int64, found bool) {
	u, err := url.Parse(path)
	if err != nil {
		return 0, 0, false
	}
	key, tg, ok := kinds.Route(u.Path, u.EscapedPath())
	if !ok {
		return 0, 0, false
	}
	a := kinds.For(formats[key], "")
	ct, _, _ := mime.ParseMediaType(contentType)
	var t wire.Tokens
	if s, _ := a.Stream(ct, tg.Stream); s != nil {
		s.Write(body)
		t, found = s.Result()
	} else {
		t, found, _ = a.Body(body)
	}
	return t.Input, t.Output + t.Reasoning, found
}
