package bedrock

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tokenbudget/tokenbudget/proxy/internal/captures"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// The counts are SOURCES.md's: input = inputTokens + cache read + cache
// write, each cache field counted once although the legacy duplicate names
// carry it again.
var converseJSON = []struct {
	file string
	want wire.Tokens
}{
	{"bedrock-converse-json-2.json", wire.Tokens{Input: 20, Output: 72}},
	{"bedrock-converse-json-4.json", wire.Tokens{Input: 914, Output: 169}},
	{"bedrock-converse-json-6.json", wire.Tokens{Input: 2 + 1322, Output: 5, CacheRead: 1322}},
}

func TestConverseUsageCaptures(t *testing.T) {
	for _, c := range converseJSON {
		t.Run(c.file, func(t *testing.T) {
			got, found, err := ConverseUsage(captures.Provider(t, c.file))
			if err != nil || !found || got != c.want {
				t.Fatalf("ConverseUsage = %+v, %v, %v; want %+v", got, found, err, c.want)
			}
		})
	}
}

func TestConverseUsageLegacyOnly(t *testing.T) {
	got, found, err := ConverseUsage([]byte(`{"usage":{"inputTokens":3,"outputTokens":4,"cacheReadInputTokenCount":10,"cacheWriteInputTokenCount":5}}`))
	want := wire.Tokens{Input: 18, Output: 4, CacheRead: 10, CacheWrite: 5}
	if err != nil || !found || got != want {
		t.Fatalf("got %+v, %v, %v; want %+v", got, found, err, want)
	}
}

func TestConverseUsageBad(t *testing.T) {
	if _, found, err := ConverseUsage([]byte(`{"usage":{"inputTokens":-1}}`)); found || !errors.Is(err, wire.ErrCount) {
		t.Fatalf("negative count: found %v err %v", found, err)
	}
	if _, found, err := ConverseUsage([]byte(`{"output":{}}`)); found || err != nil {
		t.Fatalf("no usage: found %v err %v", found, err)
	}
}

var converseStream = []struct {
	file string
	want wire.Tokens
}{
	{"bedrock-converse-stream-2.bin", wire.Tokens{Input: 236, Output: 58}},
	{"bedrock-converse-stream-4.bin", wire.Tokens{Input: 54, Output: 18}},
}

func TestStreamParserCaptures(t *testing.T) {
	for _, c := range converseStream {
		body := captures.Provider(t, c.file)
		// Whole, and one byte per Write: frames split at every offset.
		for _, step := range []int{len(body), 1, 7} {
			var p StreamParser
			for i := 0; i < len(body); i += step {
				p.Write(body[i:min(i+step, len(body))])
			}
			got, found := p.Result()
			if !found || !p.Final() || got != c.want || p.Err() != nil {
				t.Fatalf("%s step %d: Result %+v %v final %v err %v; want %+v", c.file, step, got, found, p.Final(), p.Err(), c.want)
			}
			if p.TextBytes() == 0 {
				t.Fatalf("%s: TextBytes 0", c.file)
			}
		}
	}
}

func TestStreamParserCut(t *testing.T) {
	body := captures.Provider(t, "bedrock-converse-stream-4.bin")
	var whole StreamParser
	whole.Write(body)
	var p StreamParser
	p.Write(body[:len(body)/2])
	if _, found := p.Result(); found || p.Final() {
		t.Fatal("a stream cut before its metadata event reported usage")
	}
	if p.TextBytes() == 0 || p.TextBytes() > whole.TextBytes() {
		t.Fatalf("cut TextBytes %d, whole %d", p.TextBytes(), whole.TextBytes())
	}
}

func TestStreamParserOversizedFrameSkipped(t *testing.T) {
	body := captures.Provider(t, "bedrock-converse-stream-4.bin")
	p := StreamParser{MaxFrameSize: 200}
	p.Write(body)
	if !errors.Is(p.Err(), ErrFrameTooLarge) {
		t.Fatalf("Err = %v", p.Err())
	}
}

func TestParsePath(t *testing.T) {
	for _, c := range []struct {
		path string
		want Path
	}{
		{"/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A012345678901%3Ainference-profile%2Fus.anthropic.claude-3-7-sonnet-20250219-v1%3A0/converse",
			Path{"arn:aws:bedrock:us-east-1:012345678901:inference-profile/us.anthropic.claude-3-7-sonnet-20250219-v1:0", Converse}},
		{"/model/us.anthropic.claude-sonnet-4-6/converse", Path{"us.anthropic.claude-sonnet-4-6", Converse}},
		{"/model/amazon.nova-lite-v1%3A0/converse-stream", Path{"amazon.nova-lite-v1:0", ConverseStream}},
		{"/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke", Path{"anthropic.claude-3-5-haiku-20241022-v1:0", Invoke}},
		{"/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/invoke-with-response-stream", Path{"anthropic.claude-3-5-sonnet-20240620-v1:0", InvokeWithResponseStream}},
	} {
		got, err := ParsePath(c.path)
		if err != nil || got != c.want {
			t.Errorf("ParsePath(%q) = %+v, %v; want %+v", c.path, got, err, c.want)
		}
	}
	for _, bad := range []string{"/v1/chat/completions", "/model//converse", "/model/x/y/converse", "/model/x/count-tokens", "/model/%zz/converse"} {
		if _, err := ParsePath(bad); !errors.Is(err, ErrPath) {
			t.Errorf("ParsePath(%q) err %v, want ErrPath", bad, err)
		}
	}
}

func FuzzStreamParser(f *testing.F) {
	for _, c := range converseStream {
		f.Add(captures.Provider(f, c.file))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p StreamParser
		p.Write(b)
		if tok, found := p.Result(); found && (tok.Input < tok.CacheRead+tok.CacheWrite || tok.Output < 0) {
			t.Fatalf("inconsistent %+v", tok)
		}
	})
}

func FuzzConverseUsage(f *testing.F) {
	for _, c := range converseJSON {
		f.Add(captures.Provider(f, c.file))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if tok, found, err := ConverseUsage(b); found && (err != nil || tok.Input < tok.CacheRead+tok.CacheWrite) {
			t.Fatalf("%+v %v", tok, err)
		}
	})
}

// TestInvokeStreamChunks: an InvokeModelWithResponseStream capture's chunk
// events reach Chunk decoded, one Anthropic stream event each, and the last
// one's amazon-bedrock-invocationMetrics are kept apart.
func TestInvokeStreamChunks(t *testing.T) {
	b := captures.Provider(t, "bedrock-invoke-stream-2.bin")
	var types []string
	p := StreamParser{Chunk: func(data []byte) {
		var e struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(data, &e); err != nil {
			t.Errorf("chunk %q: %v", data, err)
		}
		types = append(types, e.Type)
	}}
	for rest := b; len(rest) > 0; {
		n := min(len(rest), 37)
		p.Write(rest[:n])
		rest = rest[n:]
	}
	if p.Err() != nil || len(types) < 3 || types[0] != "message_start" || types[len(types)-1] != "message_stop" {
		t.Fatalf("chunks %v err %v", types, p.Err())
	}
	// As recorded: the metrics say 98 output tokens where message_delta says 130.
	if inv, ok := p.Invocation(); !ok || inv != (wire.Tokens{Input: 702, Output: 98}) {
		t.Errorf("invocation metrics %+v %v", inv, ok)
	}
	if _, found := p.Result(); found {
		t.Error("an invoke stream has no Converse metadata usage")
	}
}

// TestInvokeBodyOneHourCacheWrites: an InvokeModel body is Anthropic's and
// is read by its reader, 1-hour cache writes included (the capture's counts
// changed from a real response's shape; see the captures README).
func TestInvokeBodyOneHourCacheWrites(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(captures.Dir(), "..", "anthropic-messages-json-1h.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, found, err := Adapter{Invoke: true}.Body(b)
	if err != nil || !found || tok.CacheWrite != 2500 || tok.CacheWrite1h != 1000 || tok.Input != 17+2500 {
		t.Errorf("invoke body = %+v, %v, %v; want 2500 cache writes, 1000 of them 1-hour", tok, found, err)
	}
}
