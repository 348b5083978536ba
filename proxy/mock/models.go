package mock

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// mockModelIDs are the models the mock lists.
var mockModelIDs = map[wire.Format][]string{
	wire.OpenAIChat:        {"gpt-4o", "gpt-4o-mini", "gpt-4.1-mini", "text-embedding-3-small"},
	wire.AnthropicMessages: {"claude-sonnet-4-5", "claude-haiku-4-5"},
}

// mockModels answers GET /v1/models and /v1/models/ID.
func mockModels(w http.ResponseWriter, r *http.Request) {
	f := wire.OpenAIChat
	if r.Header.Get("Anthropic-Version") != "" {
		f = wire.AnthropicMessages
	}
	const created = 1767225600 // 2026-01-01
	model := func(id string) map[string]any {
		if f == wire.AnthropicMessages {
			return map[string]any{"type": "model", "id": id, "display_name": id, "created_at": "2026-01-01T00:00:00Z"}
		}
		return map[string]any{"id": id, "object": "model", "created": created, "owned_by": "tokenbudget-mock"}
	}
	var v any
	if id, ok := strings.CutPrefix(r.URL.Path, modelsPath+"/"); ok {
		v = model(id)
	} else {
		ids := mockModelIDs[f]
		data := make([]any, len(ids))
		for i, id := range ids {
			data[i] = model(id)
		}
		if f == wire.AnthropicMessages {
			v = map[string]any{"data": data, "has_more": false, "first_id": ids[0], "last_id": ids[len(ids)-1]}
		} else {
			v = map[string]any{"object": "list", "data": data}
		}
	}
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}
