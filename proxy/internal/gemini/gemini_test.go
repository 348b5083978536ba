package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/tokenbudget/tokenbudget/proxy/internal/captures"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// Counts from SOURCES.md: Input = promptTokenCount (cache included) +
// toolUsePromptTokenCount; Input + Output + Reasoning is its billable column.
var jsonCaptures = []struct {
	file string
	want wire.Tokens
}{
	{"gemini-generatecontent-json-2.json", wire.Tokens{Input: 8, Output: 8, Reasoning: 90}},
	{"gemini-generatecontent-json-4.json", wire.Tokens{Input: 727, Output: 108, Reasoning: 75, CacheRead: 375}},
	{"gemini-generatecontent-json-6.json", wire.Tokens{Input: 32 + 720, Output: 341, Reasoning: 103}},
	{"vertex-generatecontent-json-2.json", wire.Tokens{Input: 11, Output: 17, Reasoning: 190}},
}

func TestUsageCaptures(t *testing.T) {
	for _, c := range jsonCaptures {
		got, found, err := Usage(captures.Provider(t, c.file))
		if got.Model == "" {
			t.Errorf("%s: no model", c.file)
		}
		got.Model = ""
		if err != nil || !found || got != c.want {
			t.Errorf("%s: Usage = %+v, %v, %v; want %+v", c.file, got, found, err, c.want)
		}
	}
}

func sseData(b []byte) [][]byte {
	var out [][]byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if d, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data: ")); ok {
			out = append(out, d)
		}
	}
	return out
}

// The alt=sse captures: usage grows across chunks and the last one wins.
// The JSON-array captures go through the same per-chunk handler element by
// element here, to check the counts their chunks yield.
var streamCaptures = []struct {
	file  string
	array bool
	want  wire.Tokens
}{
	{"gemini-generatecontent-stream-2.txt", false, wire.Tokens{Input: 34, Output: 469, Reasoning: 787}},
	{"gemini-generatecontent-stream-4.txt", false, wire.Tokens{Input: 32 + 764, Output: 477, Reasoning: 240}},
	{"gemini-generatecontent-stream-6.json", true, wire.Tokens{Input: 32, Output: 12, Reasoning: 42}},
	{"vertex-generatecontent-stream-2.json", true, wire.Tokens{Input: 11, Output: 16, Reasoning: 232}},
}

func events(t testing.TB, file string, array bool) [][]byte {
	b := captures.Provider(t, file)
	if !array {
		return sseData(b)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, len(raw))
	for i, r := range raw {
		out[i] = r
	}
	return out
}

func TestSSECaptures(t *testing.T) {
	for _, c := range streamCaptures {
		ev := events(t, c.file, c.array)
		var s SSE
		for _, e := range ev {
			s.Event(nil, e)
		}
		got, found := s.Result()
		got.Model = ""
		if !found || got != c.want || s.Err() != nil || s.TextBytes() == 0 {
			t.Errorf("%s: Result %+v %v err %v text %d; want %+v", c.file, got, found, s.Err(), s.TextBytes(), c.want)
		}
	}
}

func TestSSECutKeepsLastUsageAndText(t *testing.T) {
	ev := events(t, "gemini-generatecontent-stream-4.txt", false)
	if len(ev) < 2 {
		t.Fatal("capture has one event")
	}
	var s SSE
	s.Event(nil, ev[0])
	got, found := s.Result()
	if !found || got.Input != 32 || got.Output >= 477 || s.TextBytes() == 0 {
		t.Fatalf("cut after the first chunk: %+v %v text %d", got, found, s.TextBytes())
	}
}

func TestParsePath(t *testing.T) {
	for _, c := range []struct {
		path string
		want Path
	}{
		{"/v1beta/models/gemini-3-pro-preview:generateContent", Path{Model: "gemini-3-pro-preview"}},
		{"/v1beta/models/gemini-2.5-pro:streamGenerateContent", Path{Model: "gemini-2.5-pro", Stream: true}},
		{"/v1beta1/projects/test-project/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent", Path{Model: "gemini-2.5-flash", Vertex: true}},
		{"/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-flash:streamGenerateContent", Path{Model: "gemini-2.5-flash", Stream: true, Vertex: true}},
	} {
		got, err := ParsePath(c.path)
		if err != nil || got != c.want {
			t.Errorf("ParsePath(%q) = %+v, %v; want %+v", c.path, got, err, c.want)
		}
	}
	for _, bad := range []string{"/v1beta/models/gemini-2.5-flash:countTokens", "/v1beta/models/gemini", "/v1beta/models/:generateContent",
		"/v1/projects/p/locations/l/publishers/anthropic/models/claude:generateContent", "/x/models/m:generateContent"} {
		if _, err := ParsePath(bad); !errors.Is(err, ErrPath) {
			t.Errorf("ParsePath(%q) err %v, want ErrPath", bad, err)
		}
	}
}

func TestUsageBadCount(t *testing.T) {
	if _, found, err := Usage([]byte(`{"usageMetadata":{"promptTokenCount":1.5}}`)); found || !errors.Is(err, wire.ErrCount) {
		t.Fatalf("found %v err %v", found, err)
	}
}

func FuzzUsage(f *testing.F) {
	for _, c := range jsonCaptures {
		f.Add(captures.Provider(f, c.file))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, found, err := Usage(b)
		if found && (err != nil || tok.Input < 0) {
			t.Fatalf("%+v %v", tok, err)
		}
		var s SSE
		s.Event(nil, b)
		if st, sf := s.Result(); sf != found || (found && st != tok) {
			t.Fatalf("SSE %+v %v, Usage %+v %v", st, sf, tok, found)
		}
	})
}
