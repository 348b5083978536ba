package proxy

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// Output cap fields, the values of Config.CapField.
const (
	// CapAuto puts an injected cap in the field the route's API reads:
	// max_completion_tokens on chat completions (max_tokens is deprecated
	// there and refused by reasoning models), max_output_tokens on
	// Responses, max_tokens elsewhere.
	CapAuto = wire.CapAuto
	// CapNone injects no cap: a request without one is estimated at
	// DefaultMaxOutput and refused when that does not fit.
	CapNone             = wire.CapNone
	CapMaxTokens        = "max_tokens"
	CapMaxCompletion    = "max_completion_tokens"
	CapMaxOutputTokens  = "max_output_tokens"
	defaultCapFieldName = CapAuto
)

// MinInjectedOutput is the smallest output cap the proxy injects: a
// request without a cap of its own is admitted with the largest cap up to
// DefaultMaxOutput that fits the room left, and refused only when not even
// this many output tokens fit. Fewer would make answers too short to be of
// use while still charging the prompt.
const MinInjectedOutput = 16

// ParseCapField validates a Config.CapField value ("" is CapAuto).
func ParseCapField(s string) (string, error) {
	switch f := strings.TrimSpace(s); f {
	case "":
		return defaultCapFieldName, nil
	case CapAuto, CapNone, CapMaxTokens, CapMaxCompletion, CapMaxOutputTokens:
		return f, nil
	}
	return "", budget.Invalid("cap-field", s, "want auto, none, max_tokens, max_completion_tokens or max_output_tokens")
}

// withCap returns body with the top-level member field set to n, every
// other member kept. A body without the member gets it inserted first,
// byte for byte otherwise; one that has it (null: the client gave no cap)
// has it replaced, so no parser can read a duplicate.
func withCap(body []byte, field string, n int64) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return nil, wire.ErrBody
	}
	val := strconv.FormatInt(n, 10)
	if parent, member, nested := strings.Cut(field, "."); nested {
		obj := top[parent]
		if t := bytes.TrimSpace(obj); len(t) == 0 || t[0] != '{' {
			obj = []byte("{}") // absent or null: a new object
		}
		inner, err := withCap(obj, member, n)
		if err != nil {
			return nil, err
		}
		field, val = parent, string(inner)
	}
	if _, ok := top[field]; ok {
		top[field] = json.RawMessage(val)
		return json.Marshal(top)
	}
	return wire.InsertFirst(body, `"`+field+`":`+val, len(top) == 0), nil
}
