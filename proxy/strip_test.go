package proxy

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

var errUpstream = errors.New("upstream reset")

func TestIsUsageOnlyChunk(t *testing.T) {
	for data, want := range map[string]bool{
		`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`:         true,
		`{"choices":null,"usage":{"prompt_tokens":1}}`:                             true,
		`{"usage" : {"prompt_tokens":1}}`:                                          true,
		`{"choices":[{"index":0,"delta":{}}],"usage":{"prompt_tokens":1}}`:         false,
		`{"choices":[{"index":0,"delta":{"content":"\"usage\":{"}}],"usage":null}`: false,
		`{"choices":[],"usage":null}`:                                              false,
		`{"choices":[]}`:                                                           false,
		`[DONE]`:                                                                   false,
		`{"choices":[],"usage":{"prompt_tokens":-1}}`:                              false,
		`{"choices":[],"usage":{"prompt_tokens":1}`:                                false,
		``: false,
		`{"choices":[],"x":{"usage":{}}, "usage": {}}`:                                true,
		`{"choices":[],"x":"\"usage\":{"}`:                                            false,
		`{"choices":[],"usage":{"prompt_tokens":1},"obfuscation":"abc"}`:              true,
		`  {"choices":[],"usage":{"prompt_tokens":1}}  `:                              true,
		`{"id":"c","choices":[],"usage":{"prompt_tokens":1},"choices":[{"index":0}]}`: false,
	} {
		if got := IsUsageOnlyChunk([]byte(data)); got != want {
			t.Errorf("IsUsageOnlyChunk(%s) = %v, want %v", data, got, want)
		}
	}
}

// chunkReader yields data in random pieces of 1 to 64 bytes, then err.
type chunkReader struct {
	data []byte
	rnd  *rand.Rand
	err  error
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, c.err
	}
	n := min(len(p), len(c.data), 1+c.rnd.IntN(64))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// readRandom reads r to its end with buffers of random sizes.
func readRandom(r io.Reader, rnd *rand.Rand) ([]byte, error) {
	var out []byte
	for {
		buf := make([]byte, 1+rnd.IntN(100))
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return out, err
		}
	}
}

// stripAll runs data through StripUsageChunks in several ways and checks
// they agree; it returns the output and the parser of the last run.
func stripAll(t *testing.T, f Format, data []byte, max int) ([]byte, *StreamParser) {
	t.Helper()
	run := func(r io.Reader, read func(io.Reader) ([]byte, error)) ([]byte, *StreamParser) {
		p := NewStreamParser(f)
		p.MaxEventSize = max
		out, err := read(StripUsageChunks(r, p))
		if err != nil {
			t.Fatal(err)
		}
		return out, p
	}
	want, p0 := run(bytes.NewReader(data), io.ReadAll)
	got, p := run(iotest.OneByteReader(bytes.NewReader(data)), io.ReadAll)
	if !bytes.Equal(got, want) || !sameResult(p, p0) {
		t.Errorf("byte by byte: output or usage differ")
	}
	for seed := range uint64(5) {
		rnd := rand.New(rand.NewPCG(seed, 7))
		got, p = run(&chunkReader{data: data, rnd: rnd, err: io.EOF}, func(r io.Reader) ([]byte, error) { return readRandom(r, rnd) })
		if !bytes.Equal(got, want) || !sameResult(p, p0) {
			t.Errorf("random chunks %d: output or usage differ", seed)
		}
	}
	return want, p
}

func TestStripUsageChunks(t *testing.T) {
	seps := map[string]string{"LF": "\n", "CRLF": "\r\n", "CR": "\r"}
	for endName, data := range lineEnds(readCapture(t, "openai-chat-stream-1.txt")) {
		sep := seps[endName]
		var want []string
		for _, ev := range strings.SplitAfter(string(data), sep+sep) {
			if !strings.Contains(ev, `"choices":[],"usage":{`) {
				want = append(want, ev)
			}
		}
		got, p := stripAll(t, OpenAIChat, data, 0)
		if string(got) != strings.Join(want, "") || len(got) >= len(data) {
			t.Errorf("%s: stripped stream:\n%q\nwant\n%q", endName, got, strings.Join(want, ""))
		}
		if tok, found := p.Result(); !found || tok.Billable() != 1146 || tok.CacheRead != 1024 {
			t.Errorf("%s: usage %+v %v", endName, tok, found)
		}
		// What stays is a valid stream without usage that still ends with [DONE].
		if !bytes.HasSuffix(got, []byte("data: [DONE]"+sep+sep)) {
			t.Errorf("%s: [DONE] lost", endName)
		}
		if _, found := feed(OpenAIChat, [][]byte{got}).Result(); found {
			t.Errorf("%s: usage left in the stripped stream", endName)
		}
	}
}

func TestStripUsageChunksKeeps(t *testing.T) {
	// Other formats, and chat events that are not usage-only, pass unchanged.
	for _, c := range captures {
		if !c.stream || c.format == OpenAIChat {
			continue
		}
		data := readCapture(t, c.file)
		got, p := stripAll(t, c.format, data, 0)
		if !bytes.Equal(got, data) {
			t.Errorf("%s changed", c.file)
		}
		if tok, found := p.Result(); !found || tok != c.want {
			t.Errorf("%s: usage %+v %v", c.file, tok, found)
		}
	}
	for name, data := range map[string]string{
		"usage with choices": "data: {\"choices\":[{\"index\":0,\"delta\":{}}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n",
		"unfinished event":   "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n",
		"comments only":      ": a\n: b\n\n\n\n",
		"bad usage event":    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":-3}}\n\n",
	} {
		if got, _ := stripAll(t, OpenAIChat, []byte(data), 0); string(got) != data {
			t.Errorf("%s: got %q", name, got)
		}
	}
	// A usage-only chunk over the cap is not stripped (nor counted).
	data := "data: " + chatUsage + "\n\ndata: [DONE]\n\n"
	got, p := stripAll(t, OpenAIChat, []byte(data), 100)
	if string(got) != data {
		t.Errorf("oversized chunk: got %q", got)
	}
	if _, found := p.Result(); found || !errors.Is(p.Err(), ErrEventTooLarge) {
		t.Errorf("oversized chunk counted: %v", p.Err())
	}
}

func TestStripUsageChunksUpstreamError(t *testing.T) {
	data := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[],\"usa"
	p := NewStreamParser(OpenAIChat)
	r := StripUsageChunks(&chunkReader{data: []byte(data), rnd: rand.New(rand.NewPCG(1, 2)), err: errUpstream}, p)
	got, err := io.ReadAll(r)
	if !errors.Is(err, errUpstream) {
		t.Errorf("err = %v, want the upstream's", err)
	}
	if string(got) != data {
		t.Errorf("held bytes lost: %q", got)
	}
	if n, err := r.Read(make([]byte, 10)); n != 0 || !errors.Is(err, errUpstream) {
		t.Errorf("read after error: %d %v", n, err)
	}
}

func sameResult(a, b *StreamParser) bool {
	ta, fa := a.Result()
	tb, fb := b.Result()
	return ta == tb && fa == fb
}
