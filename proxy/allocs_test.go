//go:build !race

// The race detector's instrumentation moves closures to the heap, so
// allocation counts hold only without it: .ci/run runs these tests a
// second time without -race.

package proxy

import "testing"

func TestStreamParserAllocs(t *testing.T) {
	chunk := []byte("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"finish_reason\":null}],\"usage\":null}\n\n")
	anth := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" Captain\"}}          \n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n")
	for name, c := range map[string]struct {
		f     Format
		chunk []byte
	}{"chat": {OpenAIChat, chunk}, "anthropic": {AnthropicMessages, anth}} {
		p := NewStreamParser(c.f)
		p.Write(c.chunk)
		if n := testing.AllocsPerRun(100, func() {
			p.Write(c.chunk[:17])
			p.Write(c.chunk[17:])
		}); n != 0 {
			t.Errorf("%s: %v allocations per content event", name, n)
		}
	}
}
