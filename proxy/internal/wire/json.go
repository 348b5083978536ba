package wire

import (
	"bytes"
	"encoding/json"
)

// The scanners below walk JSON the caller has validated (json.Valid) without
// decoding it: the proxy reads a few members of large bodies, and decoding
// the rest (the prompt, the answer's text) through reflection took most of
// a request's parse.

// Elements calls fn with each element of a valid JSON array.
func Elements(b []byte, fn func([]byte)) {
	i := SkipSpace(b, 1)
	for i < len(b) && b[i] != ']' {
		end := ValueEnd(b, i)
		fn(b[i:end])
		i = SkipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = SkipSpace(b, i+1)
		}
	}
}

// Members calls fn with each key (a string literal, quotes included) and
// value of a valid JSON object.
func Members(b []byte, fn func(k, v []byte)) {
	i := SkipSpace(b, 1)
	for i < len(b) && b[i] == '"' {
		kEnd := ValueEnd(b, i)
		j := SkipSpace(b, kEnd)
		j = SkipSpace(b, j+1) // the colon
		vEnd := ValueEnd(b, j)
		fn(b[i:kEnd], b[j:vEnd])
		i = SkipSpace(b, vEnd)
		if i < len(b) && b[i] == ',' {
			i = SkipSpace(b, i+1)
		}
	}
}

// ValueEnd returns the index just past the valid JSON value starting at i.
func ValueEnd(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
		return len(b)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = ValueEnd(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' &&
		b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j
}

// SkipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// StringLen is the length of a JSON string literal's contents as written
// (escapes count as the bytes they take).
func StringLen(lit []byte) int { return max(0, len(lit)-2) }

// HasUsageObject is a cheap pre-filter: it reports whether data contains
// the key "usage" followed by an object, so events without usage (or with
// "usage":null) are not decoded at all. A string value cannot hold the
// bytes `"usage"` unescaped, so a match outside a key is at worst a false
// positive that the decoder then rejects.
func HasUsageObject(data []byte) bool {
	for i := 0; i < len(data); {
		j := bytes.Index(data[i:], usageKey)
		if j < 0 {
			return false
		}
		k := SkipSpace(data, i+j+len(usageKey))
		if k < len(data) && data[k] == ':' {
			k = SkipSpace(data, k+1)
			if k < len(data) && data[k] == '{' {
				return true
			}
		}
		i += j + 1
	}
	return false
}

var usageKey = []byte(`"usage"`)

// DeltaEvent returns the raw "type" and "delta" members of an event that
// may stream text: valid JSON, an object, holding a "delta" key (every
// event that streams text does). ok is false for any other data.
func DeltaEvent(data []byte) (typ, delta []byte, ok bool) {
	if !bytes.Contains(data, deltaKey) || !json.Valid(data) {
		return nil, nil, false
	}
	b := bytes.TrimSpace(data)
	if len(b) == 0 || b[0] != '{' {
		return nil, nil, false
	}
	Members(b, func(k, v []byte) {
		switch string(k) {
		case `"type"`:
			typ = v
		case `"delta"`:
			delta = v
		}
	})
	return typ, delta, true
}

// InsertFirst returns the JSON object body with member (`"name":value`)
// inserted as its first member, every other byte kept; empty says the
// object has no members (no comma follows).
func InsertFirst(body []byte, member string, empty bool) []byte {
	i := bytes.IndexByte(body, '{')
	out := make([]byte, 0, len(body)+len(member)+1)
	out = append(out, body[:i+1]...)
	out = append(out, member...)
	if !empty {
		out = append(out, ',')
	}
	return append(out, body[i+1:]...)
}

var deltaKey = []byte(`"delta"`)
