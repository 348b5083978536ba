package proxy

import (
	"bufio"
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/tokenbudget/tokenbudget/budget"
)

const capturesDir = "../testdata/captures"

// capture is one recorded response and what it must yield.
type capture struct {
	file   string
	format Format
	stream bool
	found  bool
	want   Tokens
}

var captures = []capture{
	{"openai-chat-json-1.json", OpenAIChat, false, true,
		Tokens{Model: "gpt-4.1-2025-04-14", Input: 1144, CacheRead: 1024, Output: 2, ServiceTier: "default"}},
	{"openai-chat-json-2.json", OpenAIChat, false, true,
		Tokens{Model: "gpt-5-nano-2025-08-07", Input: 11, Output: 36, Reasoning: 192, ServiceTier: "default"}},
	{"openai-chat-stream-1.txt", OpenAIChat, true, true,
		Tokens{Model: "gpt-4.1-2025-04-14", Input: 1144, CacheRead: 1024, Output: 2, ServiceTier: "default"}},
	{"openai-responses-json-1.json", OpenAIResponses, false, true,
		Tokens{Model: "gpt-4.1-2025-04-14", Input: 1144, CacheRead: 1024, Output: 3, ServiceTier: "default"}},
	{"openai-responses-stream-1.txt", OpenAIResponses, true, true,
		Tokens{Model: "gpt-5.5-2026-04-23", Input: 11, Output: 5, ServiceTier: "default"}},
	{"openai-embeddings-json-1.json", OpenAIEmbeddings, false, true,
		Tokens{Model: "text-embedding-3-small", Input: 7}},
	{"anthropic-messages-json-1.json", AnthropicMessages, false, true,
		Tokens{Model: "claude-3-5-sonnet-20240620", Input: 4 + 1163, CacheWrite: 1163, Output: 187}},
	{"anthropic-messages-stream-1.txt", AnthropicMessages, true, true,
		Tokens{Model: "claude-sonnet-4-5-20250929", Input: 17, Output: 10}},
	{"anthropic-messages-stream-2.txt", AnthropicMessages, true, true,
		Tokens{Model: "claude-3-5-sonnet-20240620", Input: 4 + 1165, CacheWrite: 1165, Output: 201}},
	// Counts changed from a real response's shape (captures README): 1000 of
	// the 2500 cache writes in a 1-hour cache; the stream's message_delta
	// repeats the writes without the split, which keeps message_start's.
	{"anthropic-messages-json-1h.json", AnthropicMessages, false, true,
		Tokens{Model: "claude-sonnet-4-5-20250929", Input: 17 + 2500, CacheWrite: 2500, CacheWrite1h: 1000, Output: 10}},
	{"anthropic-messages-stream-1h.txt", AnthropicMessages, true, true,
		Tokens{Model: "claude-sonnet-4-5-20250929", Input: 17 + 2500, CacheWrite: 2500, CacheWrite1h: 1000, Output: 10}},
	{"anthropic-error429-json-1.json", AnthropicMessages, false, false, Tokens{}},
}

func readCapture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(capturesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readmeBillable reads the billable column of the captures README table:
// file name -> billable, -1 for "-" (no usage).
func readmeBillable(t *testing.T) map[string]int64 {
	t.Helper()
	row := regexp.MustCompile(`^\| ([a-z0-9-]+\.(?:json|txt)) \|.*\| ([0-9]+|-) \|$`)
	m := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(readCapture(t, "README.md")))
	for sc.Scan() {
		g := row.FindStringSubmatch(sc.Text())
		if g == nil {
			continue
		}
		v := int64(-1)
		if g[2] != "-" {
			v, _ = strconv.ParseInt(g[2], 10, 64)
		}
		m[g[1]] = v
	}
	return m
}

// TestCapturesCovered holds the table above to the README and the files on
// disk: every capture is tested, with the README's billable count.
func TestCapturesCovered(t *testing.T) {
	readme := readmeBillable(t)
	files, err := filepath.Glob(filepath.Join(capturesDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	byFile := map[string]capture{}
	for _, c := range captures {
		byFile[c.file] = c
	}
	for _, f := range files {
		name := filepath.Base(f)
		if name == "README.md" || name == "providers" { // providers: see providers_test.go
			continue
		}
		c, ok := byFile[name]
		if !ok {
			t.Errorf("capture %s has no test case", name)
			continue
		}
		b, ok := readme[name]
		if !ok {
			t.Errorf("capture %s is not in the README table", name)
			continue
		}
		if !c.found && b != -1 || c.found && c.want.Billable() != b {
			t.Errorf("%s: test expects billable %d (found %v), README says %d", name, c.want.Billable(), c.found, b)
		}
	}
	if len(readme) != len(captures) {
		t.Errorf("README lists %d captures, tests have %d", len(readme), len(captures))
	}
}

func checkTokens(t *testing.T, what string, got Tokens, found bool, c capture) {
	t.Helper()
	if found != c.found || got != c.want {
		t.Errorf("%s: got %+v found=%v (billable %d), want %+v found=%v (billable %d)",
			what, got, found, got.Billable(), c.want, c.found, c.want.Billable())
	}
}

func TestParseJSONCaptures(t *testing.T) {
	for _, c := range captures {
		if c.stream {
			continue
		}
		t.Run(c.file, func(t *testing.T) {
			data := readCapture(t, c.file)
			orig := bytes.Clone(data)
			got, found, err := ParseJSON(c.format, data)
			if err != nil {
				t.Fatal(err)
			}
			checkTokens(t, "ParseJSON", got, found, c)
			if !bytes.Equal(data, orig) {
				t.Error("ParseJSON modified its input")
			}
		})
	}
}

// chunkings splits b in several ways: whole, byte by byte, and at random
// points (fixed seeds).
func chunkings(b []byte) map[string][][]byte {
	out := map[string][][]byte{"whole": {b}}
	var one [][]byte
	for i := range b {
		one = append(one, b[i:i+1])
	}
	out["bytes"] = one
	for seed := range uint64(5) {
		r := rand.New(rand.NewPCG(seed, 42))
		var parts [][]byte
		for rest := b; len(rest) > 0; {
			n := min(len(rest), 1+r.IntN(1+r.IntN(200)))
			parts, rest = append(parts, rest[:n]), rest[n:]
		}
		out["random"+strconv.FormatUint(seed, 10)] = parts
	}
	return out
}

// lineEnds gives b with LF, CRLF and CR line ends.
func lineEnds(b []byte) map[string][]byte {
	return map[string][]byte{
		"LF":   b,
		"CRLF": bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")),
		"CR":   bytes.ReplaceAll(b, []byte("\n"), []byte("\r")),
	}
}

func feed(f Format, parts [][]byte) *StreamParser {
	p := NewStreamParser(f)
	for _, part := range parts {
		if n, err := p.Write(part); n != len(part) || err != nil {
			panic("Write must not fail")
		}
	}
	return p
}

func TestStreamParserCaptures(t *testing.T) {
	for _, c := range captures {
		if !c.stream {
			continue
		}
		t.Run(c.file, func(t *testing.T) {
			for endName, data := range lineEnds(readCapture(t, c.file)) {
				for chunkName, parts := range chunkings(data) {
					p := feed(c.format, parts)
					got, found := p.Result()
					checkTokens(t, endName+"/"+chunkName, got, found, c)
					if !p.Final() {
						t.Errorf("%s/%s: Final() = false at the end of the stream", endName, chunkName)
					}
					if err := p.Err(); err != nil {
						t.Errorf("%s/%s: Err() = %v", endName, chunkName, err)
					}
				}
			}
		})
	}
}

// TestStreamParserTee is how the middleware reads a stream it does not
// rewrite: through an io.TeeReader, the client getting every byte.
func TestStreamParserTee(t *testing.T) {
	data := readCapture(t, "anthropic-messages-stream-2.txt")
	p := NewStreamParser(AnthropicMessages)
	var client bytes.Buffer
	if _, err := io.Copy(&client, io.TeeReader(iotest.HalfReader(bytes.NewReader(data)), p)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(client.Bytes(), data) {
		t.Error("the client did not get the stream unchanged")
	}
	if got, found := p.Result(); !found || got.Billable() != 1370 {
		t.Errorf("got %+v found=%v, want billable 1370", got, found)
	}
}

func TestStreamWithoutUsage(t *testing.T) {
	// The chat capture without its include_usage chunk: what a client that
	// did not ask for usage gets from an upstream the proxy did not rewrite.
	var kept []string
	for _, ev := range strings.SplitAfter(string(readCapture(t, "openai-chat-stream-1.txt")), "\n\n") {
		if !strings.Contains(ev, `"usage":{`) {
			kept = append(kept, ev)
		}
	}
	noUsage := []byte(strings.Join(kept, ""))
	if bytes.Contains(noUsage, []byte("prompt_tokens")) || !bytes.Contains(noUsage, []byte("[DONE]")) {
		t.Fatal("bad test stream")
	}
	cases := map[string]struct {
		f    Format
		data []byte
	}{
		"chat without usage chunk": {OpenAIChat, noUsage},
		"empty stream":             {OpenAIChat, nil},
		"error event": {AnthropicMessages, []byte("event: error\ndata: " +
			`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` + "\n\n")},
		"responses cut before completed": {OpenAIResponses, readCapture(t, "openai-responses-stream-1.txt")[:3000]},
		"anthropic stream as chat":       {OpenAIChat, readCapture(t, "anthropic-messages-stream-1.txt")},
		"only ping":                      {AnthropicMessages, []byte("event: ping\ndata: {\"type\": \"ping\"}\n\n")},
		"event not ended by blank line": {OpenAIChat, []byte(`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}` +
			"\n")},
	}
	for name, c := range cases {
		for chunkName, parts := range chunkings(c.data) {
			p := feed(c.f, parts)
			if got, found := p.Result(); found {
				t.Errorf("%s/%s: found usage %+v in a stream without usage", name, chunkName, got)
			}
			if err := p.Err(); err != nil {
				t.Errorf("%s/%s: Err() = %v", name, chunkName, err)
			}
		}
	}
}

func TestParseJSONNotFound(t *testing.T) {
	for name, body := range map[string]string{
		"anthropic error":  string(readCapture(t, "anthropic-error429-json-1.json")),
		"openai error":     `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
		"null usage":       `{"id":"resp_1","status":"queued","usage":null}`,
		"null":             `null`,
		"empty usage":      `{"usage":{}}`,
		"total only, chat": `{"usage":{"total_tokens":12}}`,
	} {
		for _, f := range []Format{OpenAIChat, OpenAIResponses, AnthropicMessages} {
			got, found, err := ParseJSON(f, []byte(body))
			if err != nil || found || got != (Tokens{}) {
				t.Errorf("%s as %v: got %+v, %v, %v; want not found, no error", name, f, got, found, err)
			}
		}
	}
}

func TestParseJSONInvalid(t *testing.T) {
	for name, body := range map[string]string{
		"not json":        `<html>502 Bad Gateway</html>`,
		"truncated":       `{"usage":{"prompt_tokens":5`,
		"array":           `[1,2]`,
		"negative":        `{"usage":{"prompt_tokens":-1,"completion_tokens":2}}`,
		"float":           `{"usage":{"prompt_tokens":1.5,"completion_tokens":2}}`,
		"exponent":        `{"usage":{"prompt_tokens":1e3,"completion_tokens":2}}`,
		"string":          `{"usage":{"prompt_tokens":"5","completion_tokens":2}}`,
		"too large":       `{"usage":{"prompt_tokens":9007199254740992,"completion_tokens":2}}`,
		"int64 overflow":  `{"usage":{"prompt_tokens":99999999999999999999,"completion_tokens":2}}`,
		"negative cached": `{"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":-3}}}`,
		"sum too large":   `{"usage":{"prompt_tokens":9007199254740991,"completion_tokens":1}}`,
	} {
		got, found, err := ParseJSON(OpenAIChat, []byte(body))
		if err == nil || found || got != (Tokens{}) {
			t.Errorf("%s: got %+v, %v, %v; want an error", name, got, found, err)
		}
	}
	// Anthropic's input is a sum of three counts: each valid, the sum not.
	body := `{"usage":{"input_tokens":9007199254740991,"cache_read_input_tokens":9007199254740991,"cache_creation_input_tokens":9007199254740991,"output_tokens":9007199254740991}}`
	if _, found, err := ParseJSON(AnthropicMessages, []byte(body)); err == nil || found {
		t.Errorf("anthropic sum overflow: found=%v err=%v, want an error", found, err)
	}
	// The largest valid billable sum is accepted.
	body = `{"usage":{"prompt_tokens":9007199254740990,"completion_tokens":1}}`
	if got, found, err := ParseJSON(OpenAIChat, []byte(body)); err != nil || !found || got.Billable() != budget.MaxTokens {
		t.Errorf("max sum: got %+v %v %v", got, found, err)
	}
}

func TestParseJSONMapping(t *testing.T) {
	cases := []struct {
		name string
		f    Format
		body string
		want Tokens
	}{
		{"chat cached and reasoning", OpenAIChat,
			`{"model":"m","usage":{"prompt_tokens":100,"completion_tokens":50,"total_tokens":150,"prompt_tokens_details":{"cached_tokens":80},"completion_tokens_details":{"reasoning_tokens":30}}}`,
			Tokens{Model: "m", Input: 100, CacheRead: 80, Output: 20, Reasoning: 30}},
		{"chat cached above prompt is clamped", OpenAIChat,
			`{"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":99}}}`,
			Tokens{Input: 10, CacheRead: 10, Output: 5}},
		{"chat reasoning above completion is clamped", OpenAIChat,
			`{"usage":{"prompt_tokens":10,"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":9}}}`,
			Tokens{Input: 10, Reasoning: 5}},
		{"reasoning reported beside completion (total says so)", OpenAIChat,
			`{"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":24,"completion_tokens_details":{"reasoning_tokens":9}}}`,
			Tokens{Input: 10, Output: 5, Reasoning: 9}},
		{"null details", OpenAIChat,
			`{"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":null,"completion_tokens_details":null}}`,
			Tokens{Input: 10, Output: 5}},
		{"completion only", OpenAIChat, `{"usage":{"completion_tokens":5}}`, Tokens{Output: 5}},
		{"responses reasoning", OpenAIResponses,
			`{"model":"o","usage":{"input_tokens":7,"input_tokens_details":{"cached_tokens":2},"output_tokens":40,"output_tokens_details":{"reasoning_tokens":32},"total_tokens":47}}`,
			Tokens{Model: "o", Input: 7, CacheRead: 2, Output: 8, Reasoning: 32}},
		{"embeddings total only", OpenAIEmbeddings, `{"usage":{"total_tokens":9}}`, Tokens{Input: 9}},
		{"anthropic cache read and write", AnthropicMessages,
			`{"model":"c","usage":{"input_tokens":3,"cache_read_input_tokens":100,"cache_creation_input_tokens":20,"output_tokens":7,"server_tool_use":{"web_search_requests":1},"cache_creation":{"ephemeral_5m_input_tokens":20}}}`,
			Tokens{Model: "c", Input: 123, CacheRead: 100, CacheWrite: 20, Output: 7}},
		{"anthropic null cache counts", AnthropicMessages,
			`{"usage":{"input_tokens":3,"cache_read_input_tokens":null,"cache_creation_input_tokens":null,"output_tokens":7}}`,
			Tokens{Input: 3, Output: 7}},
	}
	for _, c := range cases {
		got, found, err := ParseJSON(c.f, []byte(c.body))
		if err != nil || !found || got != c.want {
			t.Errorf("%s: got %+v %v %v, want %+v", c.name, got, found, err, c.want)
		}
	}
}

func TestFormatForPath(t *testing.T) {
	for path, want := range map[string]Format{
		"/v1/chat/completions": OpenAIChat,
		"/v1/responses":        OpenAIResponses,
		"/v1/embeddings":       OpenAIEmbeddings,
		"/v1/messages":         AnthropicMessages,
	} {
		if got, ok := FormatForPath(path); got != want || !ok {
			t.Errorf("FormatForPath(%q) = %v, %v", path, got, ok)
		}
	}
	for _, path := range []string{"", "/", "/v1/models", "/v1/messages/count_tokens", "/chat/completions", "/v1/chat/completions/x"} {
		if got, ok := FormatForPath(path); got != Unknown || ok {
			t.Errorf("FormatForPath(%q) = %v, %v; want Unknown", path, got, ok)
		}
	}
	for f, want := range map[Format][2]string{
		OpenAIChat:        {"openai-chat", "openai"},
		OpenAIResponses:   {"openai-responses", "openai"},
		OpenAIEmbeddings:  {"openai-embeddings", "openai"},
		AnthropicMessages: {"anthropic-messages", "anthropic"},
		Unknown:           {"unknown", ""},
	} {
		if f.String() != want[0] || f.Provider() != want[1] {
			t.Errorf("%d: String %q Provider %q", int(f), f.String(), f.Provider())
		}
	}
}

func TestTokensFill(t *testing.T) {
	u := budget.Usage{Key: "k", Model: "gpt-4.1", Input: 99}
	Tokens{Model: "gpt-4.1-2025-04-14", Input: 11, Output: 36, Reasoning: 192, CacheRead: 3, CacheWrite: 4}.Fill(&u)
	want := budget.Usage{Key: "k", Model: "gpt-4.1", Input: 11, Output: 36, Reasoning: 192, CacheRead: 3, CacheWrite: 4}
	if u != want {
		t.Errorf("got %+v, want %+v", u, want)
	}
	if u.Billable() != 239 {
		t.Errorf("billable %d", u.Billable())
	}
}

func TestHasUsageObject(t *testing.T) {
	for data, want := range map[string]bool{
		`{"usage":{}}`:             true,
		"{\"usage\" \t\r\n:\n {}}": true,
		`{"usage":null}`:           false,
		`{"usage":`:                false,
		`{"usage"`:                 false,
		`"usage"`:                  false,
		`{"usage":null,"usage":{`:  true,
		`{"x":"usage","usage":{}}`: true,
		`{"usage_x":{}}`:           false,
	} {
		if got := hasUsageObject([]byte(data)); got != want {
			t.Errorf("hasUsageObject(%s) = %v, want %v", data, got, want)
		}
	}
}
