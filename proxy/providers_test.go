package proxy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const providerCapturesDir = capturesDir + "/providers"

// providerCapture is a recorded response of an OpenAI-compatible server and
// the Tokens it must yield: SOURCES.md's counts, mapped to the tracker's
// columns (Output without reasoning, cache read inside Input).
type providerCapture struct {
	file   string
	format Format
	want   Tokens
	none   bool // the response carries no usage
}

var providerCaptures = []providerCapture{
	// DeepSeek: prompt_cache_hit_tokens repeats prompt_tokens_details.cached_tokens: once.
	{file: "deepseek-chat-json-2.json", format: OpenAIChat, want: Tokens{Model: "deepseek-reasoner", Input: 495, Output: 144 - 118, Reasoning: 118, CacheRead: 320}},
	{file: "deepseek-chat-stream-2.txt", format: OpenAIChat, want: Tokens{Model: "deepseek-reasoner", Input: 6, Output: 212 - 198, Reasoning: 198}},
	// Groq: the stream's finish chunk has the same usage twice (usage and x_groq.usage).
	{file: "groq-chat-json-2.json", format: OpenAIChat, want: Tokens{Model: "qwen/qwen3-32b", Input: 17, Output: 649 - 570, Reasoning: 570, ServiceTier: "on_demand"}},
	{file: "groq-chat-stream-2.txt", format: OpenAIChat, want: Tokens{Model: "openai/gpt-oss-120b", Input: 304, Output: 49 - 23, Reasoning: 23}},
	// xAI: reasoning_tokens are outside completion_tokens (total = prompt + completion + reasoning).
	{file: "xai-chat-json-2.json", format: OpenAIChat, want: Tokens{Model: "grok-3-mini", Input: 12, Output: 1, Reasoning: 228, CacheRead: 2}},
	{file: "xai-chat-stream-2.txt", format: OpenAIChat, want: Tokens{Model: "grok-3-mini", Input: 291, Output: 26, Reasoning: 196, CacheRead: 290}},
	// OpenRouter: cost is informational; reasoning inside completion_tokens.
	{file: "openrouter-chat-json-2.json", format: OpenAIChat, want: Tokens{Model: "openai/gpt-4o", Input: 12, Output: 2}},
	{file: "openrouter-chat-json-4.json", format: OpenAIChat, want: Tokens{Model: "openai/o1", Input: 13, Output: 9}},
	{file: "openrouter-chat-stream-2.txt", format: OpenAIChat, want: Tokens{Model: "anthropic/claude-sonnet-4.5", Input: 43, Output: 36 - 13, Reasoning: 13}},
	// Mistral: thinking is inside completion_tokens and not reported apart.
	{file: "mistral-chat-json-2.json", format: OpenAIChat, want: Tokens{Model: "magistral-medium-2507", Input: 10, Output: 46}},
	{file: "mistral-chat-stream-2.txt", format: OpenAIChat, want: Tokens{Model: "magistral-medium-latest", Input: 10, Output: 232}},
	{file: "together-chat-json-2.json", format: OpenAIChat, want: Tokens{Model: "meta-llama/Llama-3.3-70B-Instruct-Turbo", Input: 44, Output: 23}},
	// Azure OpenAI: content-filter fields beside usage; the stream had no include_usage.
	{file: "azure-chat-json-2.json", format: OpenAIChat, want: Tokens{Model: "gpt-5-nano-2025-08-07", Input: 208, Output: 219 - 192, Reasoning: 192}},
	{file: "azure-chat-json-4.json", format: OpenAIChat, want: Tokens{Model: "gpt-4.1-mini-2025-04-14", Input: 16, Output: 22}},
	{file: "azure-chat-stream-2.txt", format: OpenAIChat, none: true},
	// gpt-image-1: input_tokens = text + image input tokens; output_tokens are image tokens.
	{file: "openai-images-json-2.json", format: OpenAIImages, want: Tokens{Input: 239, Output: 1056}},
	{file: "openai-images-json-4.json", format: OpenAIImages, want: Tokens{Input: 478, Output: 8320}},
}

// readProviderCapture returns a capture's bytes as the wire carries them:
// the xAI stream fixtures were de-framed by their source (one JSON chunk a
// line), so they are framed back as SSE events.
func readProviderCapture(t testing.TB, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(providerCapturesDir, file))
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(file, "xai-") && strings.Contains(file, "-stream-") {
		var b bytes.Buffer
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			b.WriteString("data: ")
			b.Write(line)
			b.WriteString("\n\n")
		}
		b.WriteString("data: [DONE]\n\n")
		data = b.Bytes()
	}
	return data
}

// TestProviderCaptures: every recorded response of an OpenAI-compatible
// server yields SOURCES.md's counts, streamed (split at every 37 bytes)
// and not, each token once.
func TestProviderCaptures(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range providerCaptures {
		covered[c.file] = true
	}
	files, _ := filepath.Glob(filepath.Join(providerCapturesDir, "*"))
	for _, f := range files {
		name := filepath.Base(f)
		// Bedrock's and Gemini's (and Vertex's) captures are tested by
		// their own parser packages, proxy/internal/bedrock and gemini.
		ownPackage := strings.HasPrefix(name, "bedrock-") || strings.HasPrefix(name, "gemini-") || strings.HasPrefix(name, "vertex-")
		if name != "SOURCES.md" && !ownPackage && !covered[name] {
			t.Errorf("provider capture %s is not tested", name)
		}
	}
	for _, c := range providerCaptures {
		t.Run(c.file, func(t *testing.T) {
			data := readProviderCapture(t, c.file)
			var (
				got   Tokens
				found bool
			)
			if strings.Contains(c.file, "-stream-") {
				p := NewStreamParser(c.format)
				for rest := data; len(rest) > 0; {
					n := min(len(rest), 37)
					p.Write(rest[:n])
					rest = rest[n:]
				}
				if err := p.Err(); err != nil {
					t.Fatal(err)
				}
				got, found = p.Result()
			} else {
				var err error
				if got, found, err = ParseJSON(c.format, data); err != nil {
					t.Fatal(err)
				}
			}
			if found == c.none {
				t.Fatalf("found = %v, want %v (%+v)", found, !c.none, got)
			}
			if got != c.want {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// TestOpenAICompatibleUsageShapes: the usage shapes of OpenAI-compatible
// servers that the captures do not show.
func TestOpenAICompatibleUsageShapes(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       Tokens
	}{
		{"deepseek hit count only", `{"usage":{"prompt_tokens":100,"completion_tokens":5,"prompt_cache_hit_tokens":60,"prompt_cache_miss_tokens":40}}`,
			Tokens{Input: 100, Output: 5, CacheRead: 60}},
		{"deepseek both counts once", `{"usage":{"prompt_tokens":100,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":60},"prompt_cache_hit_tokens":60}}`,
			Tokens{Input: 100, Output: 5, CacheRead: 60}},
		{"together cached_tokens", `{"usage":{"prompt_tokens":44,"completion_tokens":23,"total_tokens":67,"cached_tokens":40}}`,
			Tokens{Input: 44, Output: 23, CacheRead: 40}},
		{"openrouter cache write", `{"usage":{"prompt_tokens":1000,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":200,"cache_write_tokens":700},"cost":0.5}}`,
			Tokens{Input: 1000, Output: 3, CacheRead: 200, CacheWrite: 700}},
		{"cache write clamped to the prompt", `{"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8,"cache_write_tokens":700}}}`,
			Tokens{Input: 10, Output: 3, CacheRead: 8, CacheWrite: 2}},
		{"groq x_groq only", `{"choices":[{"delta":{}}],"x_groq":{"id":"req_1","usage":{"prompt_tokens":304,"completion_tokens":49,"completion_tokens_details":{"reasoning_tokens":23}}}}`,
			Tokens{Input: 304, Output: 26, Reasoning: 23}},
		{"groq both places once", `{"x_groq":{"usage":{"prompt_tokens":304,"completion_tokens":49}},"usage":{"prompt_tokens":304,"completion_tokens":49}}`,
			Tokens{Input: 304, Output: 49}},
		{"openai flex", `{"model":"o3","service_tier":"flex","usage":{"prompt_tokens":10,"completion_tokens":5}}`,
			Tokens{Model: "o3", Input: 10, Output: 5, ServiceTier: "flex"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, found, err := ParseJSON(OpenAIChat, []byte(c.body))
			if err != nil || !found || got != c.want {
				t.Errorf("ParseJSON = %+v, %v, %v; want %+v", got, found, err, c.want)
			}
			p := NewStreamParser(OpenAIChat)
			p.Write([]byte("data: " + c.body + "\n\ndata: [DONE]\n\n"))
			if got, found := p.Result(); !found || got != c.want {
				t.Errorf("stream = %+v, %v; want %+v", got, found, c.want)
			}
		})
	}
	// Responses: the tier sits on the response object, streamed and not.
	resp := `{"model":"o3","service_tier":"priority","usage":{"input_tokens":10,"output_tokens":5}}`
	want := Tokens{Model: "o3", Input: 10, Output: 5, ServiceTier: "priority"}
	if got, _, _ := ParseJSON(OpenAIResponses, []byte(resp)); got != want {
		t.Errorf("responses: %+v, want %+v", got, want)
	}
	p := NewStreamParser(OpenAIResponses)
	p.Write([]byte(`data: {"type":"response.completed","response":` + resp + "}\n\n"))
	if got, _ := p.Result(); got != want {
		t.Errorf("responses stream: %+v, want %+v", got, want)
	}
}

// TestImagesStream: a streamed image generation is charged by its
// image_generation.completed event's usage.
func TestImagesStream(t *testing.T) {
	p := NewStreamParser(OpenAIImages)
	p.Write([]byte(`data: {"type":"image_generation.partial_image","b64_json":"iVBO","partial_image_index":0}` + "\n\n"))
	if _, found := p.Result(); found {
		t.Fatal("usage found in a partial image")
	}
	p.Write([]byte(`data: {"type":"image_generation.completed","b64_json":"iVBO","usage":{"input_tokens":50,"input_tokens_details":{"image_tokens":40,"text_tokens":10},"output_tokens":272,"total_tokens":322}}` + "\n\n"))
	if got, found := p.Result(); !found || !p.Final() || got != (Tokens{Input: 50, Output: 272}) {
		t.Errorf("got %+v found %v final %v", got, found, p.Final())
	}
}

// TestImagesEstimate: an image request is estimated at its prompt's text
// and, per image, the output tokens gpt-image models bill for its quality
// and size; an unknown or "auto" one at the largest.
func TestImagesEstimate(t *testing.T) {
	for _, c := range []struct {
		body string
		want int64 // output estimate
	}{
		{`{"model":"gpt-image-1","prompt":"a cat wearing a hat","n":2,"quality":"high","size":"1024x1024"}`, 2 * 4160},
		{`{"model":"gpt-image-1","prompt":"a cat wearing a hat","quality":"medium","size":"1024x1024"}`, 1056},
		{`{"model":"gpt-image-1","prompt":"a cat wearing a hat","quality":"low","size":"1536x1024"}`, 400},
		{`{"model":"gpt-image-1","prompt":"a cat wearing a hat"}`, 6240},
		{`{"model":"gpt-image-1","prompt":"a cat wearing a hat","quality":"auto","size":"auto","n":3}`, 3 * 6240},
	} {
		ri, err := ParseRequest(OpenAIImages, []byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		est := ri.Estimate(OpenAIImages, DefaultMaxOutput, DefaultImageTokens)
		if est.Input != 5 || est.Output != c.want || ri.Model != "gpt-image-1" {
			t.Errorf("%s: estimate %+v model %q; want input 5 output %d", c.body, est, ri.Model, c.want)
		}
	}
	if f, ok := FormatForPath("/v1/images/generations"); !ok || f != OpenAIImages || f.Provider() != "openai" || f.Path() != "/v1/images/generations" {
		t.Errorf("FormatForPath: %v %v", f, ok)
	}
}
