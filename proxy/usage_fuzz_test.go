package proxy

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
)

// addSeeds adds every capture file (each with its own format) and the
// synthetic stream cases to the seed corpus; add builds one entry.
func addSeeds(f *testing.F, add func(data []byte, format Format)) {
	files, err := filepath.Glob(filepath.Join(capturesDir, "*"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no captures: %v", err)
	}
	more, err := filepath.Glob(filepath.Join(providerCapturesDir, "*"))
	if err != nil || len(more) == 0 {
		f.Fatalf("no provider captures: %v", err)
	}
	files = append(files, more...)
	formats := map[string]Format{}
	for _, c := range captures {
		formats[c.file] = c.format
	}
	for _, c := range providerCaptures {
		formats[c.file] = c.format
	}
	for _, file := range files {
		if filepath.Ext(file) == ".md" || filepath.Base(file) == "providers" {
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		name := filepath.Base(file)
		fm, ok := formats[name]
		switch {
		case ok:
		case strings.HasPrefix(name, "gemini-"), strings.HasPrefix(name, "vertex-"):
			fm = GeminiGenerate
		case strings.HasPrefix(name, "bedrock-converse-"):
			fm = BedrockConverse
		case strings.HasPrefix(name, "bedrock-invoke-"):
			fm = BedrockInvoke
		}
		add(data, fm)
	}
	for _, c := range streamCases {
		add([]byte(c.data), c.f)
	}
}

// numFormats is how many Formats there are, Unknown included.
const numFormats = int(BedrockInvoke) + 1

// checkInvariants holds found usage to contract section 1.
func checkInvariants(t *testing.T, what string, tok Tokens, found bool) {
	t.Helper()
	if !found {
		if tok != (Tokens{}) {
			t.Errorf("%s: not found but tokens %+v", what, tok)
		}
		return
	}
	for _, v := range []int64{tok.Input, tok.Output, tok.Reasoning, tok.CacheRead, tok.CacheWrite} {
		if v < 0 || v > budget.MaxTokens {
			t.Errorf("%s: count out of range: %+v", what, tok)
		}
	}
	if tok.CacheRead+tok.CacheWrite > tok.Input {
		t.Errorf("%s: cache breakdown above input: %+v", what, tok)
	}
	if tok.Billable() > budget.MaxTokens {
		t.Errorf("%s: billable %d above 2^53-1", what, tok.Billable())
	}
}

func FuzzParseJSON(f *testing.F) {
	addSeeds(f, func(data []byte, format Format) { f.Add(data, uint8(format)) })
	f.Add([]byte(`{"usage":{"prompt_tokens":9007199254740991,"completion_tokens":0,"prompt_tokens_details":{"cached_tokens":9007199254740991}}}`), uint8(OpenAIChat))
	f.Add([]byte(`{"usage":{"input_tokens":1,"cache_read_input_tokens":2,"cache_creation_input_tokens":3,"output_tokens":-4}}`), uint8(AnthropicMessages))
	f.Fuzz(func(t *testing.T, data []byte, format uint8) {
		orig := bytes.Clone(data)
		for _, fm := range []Format{Format(int(format) % numFormats), OpenAIChat, OpenAIResponses, OpenAIEmbeddings, AnthropicMessages, OpenAIImages,
			GeminiGenerate, BedrockConverse, BedrockInvoke} {
			tok, found, err := ParseJSON(fm, data)
			if err != nil && (found || tok != (Tokens{})) {
				t.Errorf("%v: error %v with usage %+v found=%v", fm, err, tok, found)
			}
			checkInvariants(t, fm.String(), tok, found)
		}
		if IsUsageOnlyChunk(data) && !hasUsageObject(data) {
			t.Error("usage-only chunk without a usage object")
		}
		if !bytes.Equal(data, orig) {
			t.Error("input modified")
		}
	})
}

func FuzzStreamParser(f *testing.F) {
	addSeeds(f, func(data []byte, format Format) {
		f.Add(data, uint8(format), uint64(1), false)
		f.Add(data, uint8(format), uint64(2), true)
	})
	f.Fuzz(func(t *testing.T, data []byte, format uint8, seed uint64, small bool) {
		fm := Format(int(format) % numFormats)
		maxEvent := 0
		if small {
			maxEvent = 64
		}
		orig := bytes.Clone(data)
		newParser := func() *StreamParser {
			p := NewStreamParser(fm)
			p.MaxEventSize = maxEvent
			return p
		}

		// Whole, then in random pieces: the same result.
		whole := newParser()
		whole.Write(data)
		tok, found := whole.Result()
		checkInvariants(t, "whole", tok, found)

		rnd := rand.New(rand.NewPCG(seed, 3))
		split := newParser()
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+rnd.IntN(1+rnd.IntN(64)))
			if w, err := split.Write(rest[:n]); w != n || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			rest = rest[n:]
		}
		if tok2, found2 := split.Result(); tok2 != tok || found2 != found {
			t.Fatalf("chunking changed the result: %+v %v vs %+v %v", tok2, found2, tok, found)
		}
		if whole.Final() != split.Final() || whole.Final() && !found {
			t.Fatalf("Final() = %v (split %v) with found=%v", whole.Final(), split.Final(), found)
		}
		if (whole.Err() == nil) != (split.Err() == nil) {
			t.Fatalf("chunking changed the error: %v vs %v", whole.Err(), split.Err())
		}

		// Through StripUsageChunks, read whole and in random pieces: the
		// same output, a subsequence of the input (whole only for formats
		// other than chat), and the same usage.
		stripWhole := newParser()
		out, err := io.ReadAll(StripUsageChunks(bytes.NewReader(data), stripWhole))
		if err != nil {
			t.Fatal(err)
		}
		stripSplit := newParser()
		out2, err := readRandom(StripUsageChunks(&chunkReader{data: data, rnd: rnd, err: io.EOF}, stripSplit), rnd)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("strip output depends on chunking:\n%q\n%q", out, out2)
		}
		// The writing side (the middleware's) gives the same output.
		var wout bytes.Buffer
		sw := newStripWriter(&wout, newParser())
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+rnd.IntN(1+rnd.IntN(64)))
			if w, err := sw.Write(rest[:n]); w != n || err != nil {
				t.Fatalf("stripWriter.Write = %d, %v", w, err)
			}
			rest = rest[n:]
		}
		if err := sw.Close(); err != nil || !bytes.Equal(wout.Bytes(), out) {
			t.Fatalf("stripWriter output differs from StripUsageChunks (%v):\n%q\n%q", err, wout.Bytes(), out)
		}
		for _, p := range []*StreamParser{stripWhole, stripSplit} {
			if tok2, found2 := p.Result(); tok2 != tok || found2 != found {
				t.Fatalf("strip changed the result: %+v %v vs %+v %v", tok2, found2, tok, found)
			}
		}
		if fm != OpenAIChat && !bytes.Equal(out, data) {
			t.Fatalf("%v stream changed by strip", fm)
		}
		if !isSubsequence(out, data) {
			t.Fatalf("strip output is not a subsequence of the input")
		}
		if len(out) < len(data) && !strings.Contains(string(data), `"usage"`) {
			t.Fatalf("bytes removed from a stream without usage")
		}
		if !bytes.Equal(data, orig) {
			t.Error("input modified")
		}
	})
}

// FuzzBinaryStreams: the streams that are not SSE (Bedrock's AWS
// event-stream, Converse and InvokeModel; Gemini's JSON array) give the
// same usage, Final and TextBytes read whole or in random pieces, within
// the counting rules, never panicking and never modifying their input.
func FuzzBinaryStreams(f *testing.F) {
	addSeeds(f, func(data []byte, format Format) { f.Add(data, uint8(format), uint64(1)) })
	f.Fuzz(func(t *testing.T, data []byte, format uint8, seed uint64) {
		orig := bytes.Clone(data)
		for _, mk := range []struct {
			name string
			new  func() usageStream
		}{
			{"converse", func() usageStream { return newEventStream(BedrockConverse) }},
			{"invoke", func() usageStream { return newEventStream(BedrockInvoke) }},
			{"gemini-array", func() usageStream { return newJSONStreamParser(GeminiGenerate) }},
		} {
			whole := mk.new()
			whole.Write(data)
			tok, found := whole.Result()
			checkInvariants(t, mk.name, tok, found)
			rnd := rand.New(rand.NewPCG(seed, 5))
			split := mk.new()
			for rest := data; len(rest) > 0; {
				n := min(len(rest), 1+rnd.IntN(1+rnd.IntN(64)))
				if w, err := split.Write(rest[:n]); w != n || err != nil {
					t.Fatalf("%s: Write = %d, %v", mk.name, w, err)
				}
				rest = rest[n:]
			}
			if tok2, found2 := split.Result(); tok2 != tok || found2 != found || split.Final() != whole.Final() || split.TextBytes() != whole.TextBytes() {
				t.Fatalf("%s: chunking changed the result: %+v %v vs %+v %v", mk.name, tok2, found2, tok, found)
			}
			if whole.Final() && !found {
				t.Fatalf("%s: final without usage", mk.name)
			}
		}
		if !bytes.Equal(data, orig) {
			t.Error("input modified")
		}
	})
}

func isSubsequence(sub, s []byte) bool {
	for _, c := range sub {
		i := bytes.IndexByte(s, c)
		if i < 0 {
			return false
		}
		s = s[i+1:]
	}
	return true
}
