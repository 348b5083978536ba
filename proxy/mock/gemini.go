package mock

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// writeGemini answers a generateContent call as the Gemini API does: one
// GenerateContentResponse, or a stream of them (SSE with alt=sse, else a
// JSON array), each chunk one word with the usage so far, the last with
// its finishReason.
func (c *mockCall) writeGemini(w http.ResponseWriter, stream, sse bool) {
	finish := "STOP"
	if c.finish == "length" {
		finish = "MAX_TOKENS"
	}
	chunk := func(text string, out int64, last bool) map[string]any {
		cand := map[string]any{"content": map[string]any{"parts": []any{map[string]any{"text": text}}, "role": "model"}, "index": 0}
		if last {
			cand["finishReason"] = finish
		}
		return map[string]any{"candidates": []any{cand}, "modelVersion": c.model, "responseId": fmt.Sprintf("mock%d", c.n),
			"usageMetadata": map[string]any{"promptTokenCount": c.in, "candidatesTokenCount": out, "totalTokenCount": c.in + out,
				"promptTokensDetails": []any{map[string]any{"modality": "TEXT", "tokenCount": c.in}}}}
	}
	if !stream {
		b, _ := json.Marshal(chunk(c.text(), c.out, true))
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
		return
	}
	words := c.words
	if len(words) == 0 {
		words = []string{""}
	}
	if sse {
		s := c.newSSE(w)
		for i, wd := range words {
			if i > 0 {
				wd = " " + wd
			}
			if !s.event("", chunk(wd, int64(min(i+1, len(c.words))), i == len(words)-1)) {
				return
			}
		}
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for i, wd := range words {
		if i > 0 {
			wd = " " + wd
			if c.delay > 0 {
				time.Sleep(c.delay)
			}
		}
		b, _ := json.Marshal(chunk(wd, int64(min(i+1, len(c.words))), i == len(words)-1))
		sep := ",\r\n"
		if i == 0 {
			sep = "["
		}
		if _, err := w.Write(append([]byte(sep), b...)); err != nil || rc.Flush() != nil {
			return
		}
	}
	w.Write([]byte("]"))
}
