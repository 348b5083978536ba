package proxy_test

import (
	"encoding/json"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// TestEstimate holds the documented rule (proxy.RequestInfo.Estimate) to examples.
func TestEstimate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		f    proxy.Format
		body string
		want budget.Estimate
	}{
		{"chat: text and overhead, max_tokens", proxy.OpenAIChat,
			`{"model":"m","max_tokens":100,"messages":[{"role":"system","content":"abcdefgh"},{"role":"user","content":"hello"}]}`,
			// strings: system(6) abcdefgh(8) user(4) hello(5) = 23 bytes -> 6, + 2 messages x 4
			budget.Estimate{Input: 14, Output: 100}},
		{"chat: default output, n choices", proxy.OpenAIChat,
			`{"model":"m","n":3,"messages":[{"role":"user","content":"hi"}]}`,
			budget.Estimate{Input: 2 + 4, Output: 3 * proxy.DefaultMaxOutput}},
		{"chat: the largest cap wins", proxy.OpenAIChat,
			`{"model":"m","max_tokens":9,"max_completion_tokens":70,"messages":[]}`,
			budget.Estimate{Input: 1, Output: 70}},
		{"chat: the largest cap wins, whatever field holds it", proxy.OpenAIChat,
			`{"model":"m","max_output_tokens":1,"max_tokens":5000,"n":2,"messages":[]}`,
			budget.Estimate{Input: 1, Output: 10000}},
		{"responses: max_tokens counts too", proxy.OpenAIResponses,
			`{"model":"m","max_output_tokens":1,"max_tokens":300,"input":[]}`,
			budget.Estimate{Input: 1, Output: 300}},
		{"chat: image parts cost a fixed amount, their data is not text", proxy.OpenAIChat,
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"what is it"},` +
				`{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}]}]}`,
			// user(4) text(4) what is it(10) = 18 -> 5, + 4, + 1000
			budget.Estimate{Input: 5 + 4 + proxy.DefaultImageTokens, Output: 10}},
		{"chat: tools count as their JSON", proxy.OpenAIChat,
			`{"model":"m","max_tokens":1,"messages":[],"tools":[{"type":"function","function":{"name":"f"}}]}`,
			budget.Estimate{Input: 12, Output: 1}}, // 46 bytes of JSON -> 12
		{"anthropic: system and image blocks", proxy.AnthropicMessages,
			`{"model":"c","max_tokens":50,"system":"be brief","messages":[{"role":"user","content":[` +
				`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}},{"type":"text","text":"describe"}]}]}`,
			// be brief(8) user(4) text(4) describe(8) = 24 -> 6, + 4, + 1000
			budget.Estimate{Input: 6 + 4 + proxy.DefaultImageTokens, Output: 50}},
		{"responses: string input, max_output_tokens", proxy.OpenAIResponses,
			`{"model":"o","input":"abcdefghij","instructions":"xy","max_output_tokens":30}`,
			budget.Estimate{Input: 3 + 4, Output: 30}},
		{"responses: input items, input_image", proxy.OpenAIResponses,
			`{"model":"o","input":[{"role":"user","content":[{"type":"input_text","text":"abcd"},{"type":"input_image","image_url":"https://x/y.png"}]}]}`,
			// user(4) input_text(10) abcd(4) = 18 -> 5, + 4, + 1000
			budget.Estimate{Input: 5 + 4 + proxy.DefaultImageTokens, Output: proxy.DefaultMaxOutput}},
		{"embeddings: strings, no output, no overhead", proxy.OpenAIEmbeddings,
			`{"model":"e","input":["abcd","efgh","i"]}`,
			budget.Estimate{Input: 3}},
		{"embeddings: token ids count one each", proxy.OpenAIEmbeddings,
			`{"model":"e","input":[[1,2,3],[4,5]]}`,
			budget.Estimate{Input: 5}},
		{"empty: at least one input token", proxy.OpenAIEmbeddings, `{}`, budget.Estimate{Input: 1}},
		{"wrong types are ignored", proxy.OpenAIChat, `{"model":7,"max_tokens":"x","messages":"hey","stream":"yes"}`,
			budget.Estimate{Input: 1 + 4, Output: proxy.DefaultMaxOutput}},
	}
	for _, c := range cases {
		ri, err := proxy.ParseRequest(c.f, []byte(c.body))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := ri.Estimate(c.f, proxy.DefaultMaxOutput, proxy.DefaultImageTokens); got != c.want {
			t.Errorf("%s: got %+v; want %+v (parsed %+v)", c.name, got, c.want, ri)
		}
	}
	for _, bad := range []string{``, `[]`, `null`, `"x"`, `{"a":`, `{} {}`} {
		if _, err := proxy.ParseRequest(proxy.OpenAIChat, []byte(bad)); err == nil {
			t.Errorf("ParseRequest(%q): no error", bad)
		}
	}
}

// TestParseRequestFlags: model, stream, include_usage, and whether the
// client set a cap of its own (any of the three fields, not null).
func TestParseRequestFlags(t *testing.T) {
	t.Parallel()
	ri, err := proxy.ParseRequest(proxy.OpenAIChat, []byte(`{"model":" gpt-4o ","stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil || ri.Model != " gpt-4o " || !ri.Stream || !ri.IncludeUsage || ri.HasCap {
		t.Errorf("got %+v %v", ri, err)
	}
	for body, want := range map[string]bool{
		`{}`: false, `{"max_tokens":null}`: false, `{"max_tokens":5}`: true, `{"max_completion_tokens":0}`: true,
		`{"max_output_tokens":"x"}`: true, `{"max_tokens":null,"max_output_tokens":7}`: true,
	} {
		if ri, err := proxy.ParseRequest(proxy.OpenAIChat, []byte(body)); err != nil || ri.HasCap != want {
			t.Errorf("%s: HasCap %v (%v); want %v", body, ri.HasCap, err, want)
		}
	}
}

// TestWithIncludeUsage: the flag is set; every other member is kept.
func TestWithIncludeUsage(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{`{"model":"m","stream":true}`, `{"stream_options":{"include_usage":true},"model":"m","stream":true}`},
		{` {}`, ` {"stream_options":{"include_usage":true}}`},
		{`{"stream_options":{"include_obfuscation":false,"include_usage":false},"b":[1]}`,
			`{"b":[1],"stream_options":{"include_obfuscation":false,"include_usage":true}}`},
		{`{"stream_options":null,"a":1}`, `{"a":1,"stream_options":{"include_usage":true}}`},
	}
	for _, c := range cases {
		got, err := proxy.WithIncludeUsage([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("WithIncludeUsage(%s): got %s %v; want %s", c.in, got, err, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("WithIncludeUsage(%s): invalid JSON %s", c.in, got)
		}
	}
}

// FuzzParseRequest: no panic on any body; a parsed body gives an estimate
// within the token range.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"hi"}]}]}`,
		`{"input":[[1,2],[3]]}`, `{"input":"x","instructions":"y","tools":[{}]}`, `{"system":[{"type":"text","text":"a\"b"}],"messages":[]}`,
		`{"max_tokens":9007199254740993,"n":1000000}`, `{"messages":[[[[[[]]]]]]}`, `{"stream_options":{"a":1}}`} {
		for _, fm := range []proxy.Format{proxy.OpenAIChat, proxy.OpenAIEmbeddings, proxy.AnthropicMessages, proxy.OpenAIResponses} {
			f.Add(s, int(fm))
		}
	}
	f.Add(`{"contents":[{"parts":[{"text":"hi"},{"inlineData":{}}]}],"generationConfig":{"maxOutputTokens":5,"candidateCount":3}}`, int(proxy.GeminiGenerate))
	f.Add(`{"messages":[{"content":[{"text":"hi"},{"image":{}}]}],"inferenceConfig":{"maxTokens":5},"toolConfig":{}}`, int(proxy.BedrockConverse))
	f.Add(`{"anthropic_version":"x","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, int(proxy.BedrockInvoke))
	f.Add(`{"model":"gpt-image-1","prompt":"a cat","n":2,"quality":"low","size":"1024x1024"}`, int(proxy.OpenAIImages))
	f.Fuzz(func(t *testing.T, body string, fm int) {
		// Every format's adapter, Unknown's too.
		format := proxy.Format(uint(fm) % uint(proxy.BedrockInvoke+1))
		ri, err := proxy.ParseRequest(format, []byte(body))
		if err != nil {
			return
		}
		e := ri.Estimate(format, proxy.DefaultMaxOutput, proxy.DefaultImageTokens)
		if e.Input < 1 || e.Output < 0 || e.Input+e.Output > budget.MaxTokens {
			t.Errorf("estimate %+v out of range for %q", e, body)
		}
		if out, err := proxy.WithIncludeUsage([]byte(body)); err == nil && !json.Valid(out) {
			t.Errorf("WithIncludeUsage(%q) gave invalid JSON %q", body, out)
		}
	})
}
