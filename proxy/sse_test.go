package proxy

import (
	"errors"
	"strings"
	"testing"
)

// streamCase is a synthetic stream and the usage it must yield.
type streamCase struct {
	name  string
	f     Format
	data  string
	found bool
	want  Tokens
}

const chatUsage = `{"id":"c","model":"gpt-x","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":3}}}`

var chatWant = Tokens{Model: "gpt-x", Input: 12, CacheRead: 4, Output: 2, Reasoning: 3}

var streamCases = []streamCase{
	{"chat plain", OpenAIChat, "data: " + chatUsage + "\n\ndata: [DONE]\n\n", true, chatWant},
	{"data without space", OpenAIChat, "data:" + chatUsage + "\n\n", true, chatWant},
	{"padded json", OpenAIChat, "data:    " + chatUsage + "   \t \n\n", true, chatWant},
	{"comments, id, retry, unknown fields", OpenAIChat,
		": keep-alive\n\n:\nid: 7\nretry: 100\nfoo: bar\nevent: chunk\ndata: " + chatUsage + "\n: inside\n\n", true, chatWant},
	{"multi-line data", OpenAIChat,
		"data: {\"model\":\"gpt-x\",\"choices\":[],\ndata: \"usage\":{\"prompt_tokens\":12,\ndata:\"completion_tokens\":5}}\n\n", true,
		Tokens{Model: "gpt-x", Input: 12, Output: 5}},
	{"byte order mark", OpenAIChat, "\xef\xbb\xbfdata: " + chatUsage + "\n\n", true, chatWant},
	{"byte order mark before comment", OpenAIChat, "\xef\xbb\xbf: hi\n\ndata: " + chatUsage + "\n\n", true, chatWant},
	{"last usage wins", OpenAIChat,
		"data: {\"choices\":[{}],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":1}}\n\ndata: {\"choices\":[{}],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":9}}\n\n",
		true, Tokens{Input: 12, Output: 9}},
	{"empty data and no-colon data lines", OpenAIChat, "data\n\ndata:\n\ndata: " + chatUsage + "\n\n", true, chatWant},
	{"multi-byte text around usage", OpenAIChat,
		"data: {\"choices\":[{\"delta\":{\"content\":\"h\u00e9llo \u4e16\u754c \U0001F600\"}}]}\n\ndata: " + chatUsage + "\n\n", true, chatWant},
	{"usage key in content is no usage", OpenAIChat,
		"data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\":{\\\"prompt_tokens\\\":99}\"}}],\"usage\":null}\n\n", false, Tokens{}},
	{"responses incomplete", OpenAIResponses,
		"event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"model\":\"o\",\"status\":\"incomplete\",\"usage\":{\"input_tokens\":20,\"output_tokens\":64,\"output_tokens_details\":{\"reasoning_tokens\":64},\"total_tokens\":84}}}\n\n",
		true, Tokens{Model: "o", Input: 20, Reasoning: 64}},
	{"responses failed", OpenAIResponses,
		"event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"model\":\"o\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\"},\"usage\":{\"input_tokens\":20,\"input_tokens_details\":{\"cached_tokens\":8},\"output_tokens\":3}}}\n\n",
		true, Tokens{Model: "o", Input: 20, CacheRead: 8, Output: 3}},
	{"responses failed without usage", OpenAIResponses,
		"event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"usage\":null}}\n\n", false, Tokens{}},
	{"anthropic old-style delta keeps input and cache", AnthropicMessages,
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":7,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":30}}\n\n",
		true, Tokens{Model: "c", Input: 112, CacheRead: 100, CacheWrite: 7, Output: 30}},
	{"anthropic new-style delta repeats counts", AnthropicMessages,
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":7,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":7,\"output_tokens\":30}}\n\n",
		true, Tokens{Model: "c", Input: 112, CacheRead: 100, CacheWrite: 7, Output: 30}},
	{"anthropic delta updates input (server tools)", AnthropicMessages,
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":900,\"output_tokens\":30}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":31,\"cache_read_input_tokens\":null}}\n\n",
		true, Tokens{Model: "c", Input: 900, Output: 31}},
	{"anthropic start only (cut mid-stream)", AnthropicMessages,
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\"",
		true, Tokens{Model: "c", Input: 5, Output: 1}},
	{"anthropic type from the event field", AnthropicMessages,
		"event: message_start\ndata: {\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\nevent: message_delta\ndata: {\"usage\":{\"output_tokens\":8}}\n\n",
		true, Tokens{Model: "c", Input: 5, Output: 8}},
	{"anthropic other events ignored", AnthropicMessages,
		"event: message_stop\ndata: {\"type\":\"message_stop\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}\n\n", false, Tokens{}},
}

func TestStreamParserFraming(t *testing.T) {
	for _, c := range streamCases {
		for endName, data := range lineEnds([]byte(c.data)) {
			for chunkName, parts := range chunkings(data) {
				p := feed(c.f, parts)
				got, found := p.Result()
				if found != c.found || got != c.want {
					t.Errorf("%s/%s/%s: got %+v found=%v, want %+v found=%v", c.name, endName, chunkName, got, found, c.want, c.found)
				}
				if err := p.Err(); err != nil {
					t.Errorf("%s/%s/%s: Err() = %v", c.name, endName, chunkName, err)
				}
			}
		}
	}
}

func TestStreamParserFinal(t *testing.T) {
	anthStart := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"
	responses := string(readCapture(t, "openai-responses-stream-1.txt"))
	cut := strings.Index(responses, "event: response.completed")
	for _, c := range []struct {
		name         string
		f            Format
		data         string
		found, final bool
	}{
		{"anthropic start only", AnthropicMessages, anthStart, true, false},
		{"anthropic start and delta", AnthropicMessages, anthStart + "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n", true, true},
		{"responses cut before completed", OpenAIResponses, responses[:cut], false, false},
		{"responses usage before completed", OpenAIResponses,
			"data: {\"type\":\"response.in_progress\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n", true, false},
		{"responses completed", OpenAIResponses, responses, true, true},
		{"chat usage chunk", OpenAIChat, "data: " + chatUsage + "\n\n", true, true},
		{"chat without usage", OpenAIChat, "data: {\"choices\":[{}],\"usage\":null}\n\ndata: [DONE]\n\n", false, false},
	} {
		p := feed(c.f, [][]byte{[]byte(c.data)})
		if _, found := p.Result(); found != c.found || p.Final() != c.final {
			t.Errorf("%s: found=%v final=%v, want %v %v", c.name, found, p.Final(), c.found, c.final)
		}
	}
}

func TestStreamParserBadEvents(t *testing.T) {
	for name, ev := range map[string]string{
		"negative":  `{"choices":[],"usage":{"prompt_tokens":-5,"completion_tokens":1}}`,
		"float":     `{"choices":[],"usage":{"prompt_tokens":5.0,"completion_tokens":1}}`,
		"truncated": `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1`,
	} {
		data := "data: " + chatUsage + "\n\ndata: " + ev + "\n\n"
		p := feed(OpenAIChat, [][]byte{[]byte(data)})
		if got, found := p.Result(); !found || got != chatWant {
			t.Errorf("%s: a bad event changed the result: %+v %v", name, got, found)
		}
		if p.Err() == nil {
			t.Errorf("%s: Err() = nil", name)
		}
	}
}

func TestStreamParserBadEventsByFormat(t *testing.T) {
	const start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"
	for _, c := range []struct {
		name         string
		f            Format
		data         string
		found, isErr bool
	}{
		{"responses truncated", OpenAIResponses, "data: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":1}\n\n", false, true},
		{"responses sum too large", OpenAIResponses, "data: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":9007199254740991,\"output_tokens\":1}}}\n\n", false, true},
		{"anthropic truncated", AnthropicMessages, start + "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":1\n\n", true, true},
		{"anthropic sum too large", AnthropicMessages, start + "data: {\"type\":\"message_delta\",\"usage\":{\"cache_read_input_tokens\":9007199254740991}}\n\n", true, true},
		{"anthropic delta without counts", AnthropicMessages, "data: {\"type\":\"message_delta\",\"usage\":{\"cache_read_input_tokens\":4}}\n\n", false, false},
	} {
		p := feed(c.f, [][]byte{[]byte(c.data)})
		tok, found := p.Result()
		if found != c.found || (p.Err() != nil) != c.isErr {
			t.Errorf("%s: found=%v err=%v", c.name, found, p.Err())
		}
		if c.found && tok.Input != 5 {
			t.Errorf("%s: the bad event changed the result: %+v", c.name, tok)
		}
	}
}

func TestStreamParserEventCap(t *testing.T) {
	const max = 300
	big := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", 1000) + "\"}}]}\n\n"
	bigUsage := "data: {\"pad\":\"" + strings.Repeat("y", max) + "\",\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":1}}\n\n"
	multi := strings.Repeat("data: "+strings.Repeat("z", 50)+"\n", 10) + "\n"
	for name, c := range map[string]struct {
		data         string
		found, isErr bool
	}{
		"big event skipped":       {big + "data: " + chatUsage + "\n\n", true, true},
		"big usage event skipped": {bigUsage, false, true},
		"multi-line over the cap": {multi + "data: " + chatUsage + "\n\n", true, true},
		"at the cap is kept":      {"data: " + chatUsage + strings.Repeat(" ", max-len(chatUsage)-1) + "\n\n", true, false},
	} {
		for chunkName, parts := range chunkings([]byte(c.data)) {
			p := NewStreamParser(OpenAIChat)
			p.MaxEventSize = max
			for _, part := range parts {
				p.Write(part)
			}
			got, found := p.Result()
			if found != c.found || found && got != chatWant {
				t.Errorf("%s/%s: got %+v found=%v, want found=%v", name, chunkName, got, found, c.found)
			}
			if err := p.Err(); c.isErr != errors.Is(err, ErrEventTooLarge) || !c.isErr && err != nil {
				t.Errorf("%s/%s: Err() = %v, want ErrEventTooLarge: %v", name, chunkName, err, c.isErr)
			}
		}
	}
}

// TestStreamParserAllocs: content chunks without usage cost no allocation.
func BenchmarkStreamParser(b *testing.B) {
	for _, c := range captures {
		if !c.stream {
			continue
		}
		data := readCapture(b, c.file)
		b.Run(c.file, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				p := NewStreamParser(c.format)
				for rest := data; len(rest) > 0; rest = rest[min(len(rest), 512):] {
					p.Write(rest[:min(len(rest), 512)])
				}
				if _, found := p.Result(); !found {
					b.Fatal("no usage")
				}
			}
		})
	}
}

func BenchmarkParseJSON(b *testing.B) {
	for _, c := range captures {
		if c.stream || !c.found {
			continue
		}
		data := readCapture(b, c.file)
		b.Run(c.file, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, found, err := ParseJSON(c.format, data); !found || err != nil {
					b.Fatal("no usage")
				}
			}
		})
	}
}

// TestStreamParserTextBytes: the generated text of each format's delta
// events is counted in bytes of its string literals as written; roles,
// ids, signatures, audio, usage and anything that is not valid JSON are
// not text.
func TestStreamParserTextBytes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		f      Format
		stream string
		want   int64
	}{
		{OpenAIChat, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
			"data: {\"choices\":[{\"delta\":{\"content\":\"caf\\u00e9\"}},{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n" + // 9 + 2
			"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"call_1\",\"function\":{\"name\":\"get\",\"arguments\":\"{}\"}}]}}]}\n\n" + // 3 + 2
			"data: {\"choices\":[{\"delta\":{\"refusal\":\"no\"}}],\"usage\":null}\n\n" + // 2
			"data: {\"choices\":[{\"delta\":{\"content\":\"broken\"}\n\n" + // not JSON
			"data: [DONE]\n\n", 18},
		{OpenAIResponses, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hello\"}\n\n" +
			"data: {\"type\":\"response.function_call_arguments.delta\",\"delta\":\"{\\\"a\\\"\"}\n\n" + // 6 as written
			"data: {\"type\":\"response.audio.delta\",\"delta\":\"QUJD\"}\n\n" +
			"data: {\"type\":\"response.output_text.done\",\"text\":\"Hello\"}\n\n", 11},
		{AnthropicMessages, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
			"data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"abc\"}}\n\n" +
			"data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"c2lnbmF0dXJl\"}}\n\n" +
			"data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n" +
			"data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n", 7},
	}
	for _, c := range cases {
		p := NewStreamParser(c.f)
		for i := 0; i < len(c.stream); i += 7 { // split anywhere
			p.Write([]byte(c.stream[i:min(i+7, len(c.stream))]))
		}
		if got := p.TextBytes(); got != c.want {
			t.Errorf("%v: %d text bytes; want %d", c.f, got, c.want)
		}
	}
}
