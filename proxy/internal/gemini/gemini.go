// Package gemini is the Gemini API / Vertex AI generateContent wire layer
// for the proxy: the request path and the usageMetadata of a response body
// or of one alt=sse stream event, mapped to wire.Tokens. It is pure: no
// network, no proxy types.
package gemini

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// Path is what a generateContent request path says.
type Path struct {
	Model  string
	Stream bool // :streamGenerateContent
	// Vertex is true for a Vertex AI publisher path
	// (/{version}/projects/{p}/locations/{l}/publishers/google/models/...).
	Vertex bool
}

// ErrPath reports a path that is not a models/{model}:generateContent or
// :streamGenerateContent call.
var ErrPath = errors.New("not a Gemini or Vertex models/{model}:generateContent path")

// ParsePath parses a request path: the Gemini API's
// /{version}/models/{model}:generateContent and Vertex AI's
// /{version}/projects/{p}/locations/{l}/publishers/google/models/{model}:...,
// each with :streamGenerateContent for a stream.
func ParsePath(escaped string) (Path, error) {
	bad := func(why string) (Path, error) {
		return Path{}, fmt.Errorf("path %q: %s: %w", escaped, why, ErrPath)
	}
	seg := strings.Split(strings.TrimPrefix(escaped, "/"), "/")
	var p Path
	var last string
	switch {
	case len(seg) == 3 && seg[1] == "models":
		last = seg[2]
	case len(seg) == 9 && seg[1] == "projects" && seg[3] == "locations" &&
		seg[5] == "publishers" && seg[6] == "google" && seg[7] == "models":
		if seg[2] == "" || seg[4] == "" {
			return bad("empty project or location")
		}
		last, p.Vertex = seg[8], true
	default:
		return bad("unknown shape")
	}
	if !strings.HasPrefix(seg[0], "v1") {
		return bad("version " + seg[0])
	}
	model, method, ok := strings.Cut(last, ":")
	switch {
	case !ok:
		return bad("no :method")
	case method == "generateContent":
	case method == "streamGenerateContent":
		p.Stream = true
	default:
		return bad("method " + method)
	}
	m, err := url.PathUnescape(model)
	if err != nil || m == "" {
		return bad("model " + model)
	}
	p.Model = m
	return p, nil
}

type usageMetadata struct {
	Prompt     wire.Count `json:"promptTokenCount"`
	Candidates wire.Count `json:"candidatesTokenCount"`
	Thoughts   wire.Count `json:"thoughtsTokenCount"`
	Cached     wire.Count `json:"cachedContentTokenCount"`
	ToolUse    wire.Count `json:"toolUsePromptTokenCount"`
}

// response is the part of a GenerateContentResponse read here.
type response struct {
	Usage        *usageMetadata `json:"usageMetadata"`
	ModelVersion string         `json:"modelVersion"`
	Candidates   []struct {
		// FinishReason is a string ("STOP") or, with Vertex's
		// enum-encoding=int, a number: present on the last chunk.
		FinishReason json.RawMessage `json:"finishReason"`
		Content      struct {
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"content"`
	} `json:"candidates"`
}

// tokens maps usageMetadata to the counting rules: promptTokenCount already
// includes cachedContentTokenCount; toolUsePromptTokenCount (search and
// other tools' prompts) is billed and outside it, so it joins Input;
// candidatesTokenCount excludes the thoughts, which are Reasoning.
func (r *response) tokens() (wire.Tokens, bool) {
	u := r.Usage
	if u == nil || (!u.Prompt.OK && !u.Candidates.OK && !u.Thoughts.OK) {
		return wire.Tokens{}, false
	}
	return wire.Tokens{
		Model:     r.ModelVersion,
		Input:     u.Prompt.V + u.ToolUse.V,
		Output:    u.Candidates.V,
		Reasoning: u.Thoughts.V,
		CacheRead: u.Cached.V,
	}, true
}

func (r *response) textBytes() (n int64) {
	for _, c := range r.Candidates {
		for _, p := range c.Content.Parts {
			n += int64(len(p.Text))
		}
	}
	return n
}

// finished reports whether a candidate carries its finishReason: the
// chunk ends the stream.
func (r *response) finished() bool {
	for _, c := range r.Candidates {
		if v := string(c.FinishReason); v != "" && v != "null" && v != `""` && v != "0" {
			return true
		}
	}
	return false
}

// Usage returns the usage of a generateContent response body (one
// GenerateContentResponse). found is false when it has no usageMetadata.
func Usage(body []byte) (t wire.Tokens, found bool, err error) {
	var r response
	if err := json.Unmarshal(body, &r); err != nil {
		return wire.Tokens{}, false, fmt.Errorf("gemini response: %w", err)
	}
	t, found = r.tokens()
	return t, found, nil
}

// SSE reads an alt=sse streamGenerateContent response one event at a time:
// each event's data is one GenerateContentResponse. Usage is cumulative and
// repeated across chunks, so the last chunk carrying it wins; chunks are
// never summed. The zero value is ready to use; not safe for concurrent use.
type SSE struct {
	tok   wire.Tokens
	found bool
	final bool
	text  int64
	err   error
}

// Event consumes one event's data (or one chunk of a JSON-array
// stream); it returns why the data could not be read.
func (s *SSE) Event(_, data []byte) (bool, error) {
	var r response
	if err := json.Unmarshal(data, &r); err != nil {
		err = fmt.Errorf("gemini stream event: %w", err)
		if s.err == nil {
			s.err = err
		}
		return false, err
	}
	s.text += r.textBytes()
	if t, ok := r.tokens(); ok {
		s.tok, s.found = t, true
	}
	s.final = s.final || r.finished()
	return false, nil
}

// Final reports whether a chunk with a finishReason has arrived after
// usage: the usage seen is the whole response's. Before it, a stream cut
// short has whole prompt counts and the output generated so far.
func (s *SSE) Final() bool { return s.final && s.found }

// Result returns the usage of the last event that carried it. A stream cut
// short reports the usage of its last chunk so far: the prompt counts are
// whole, the output counts only what was generated up to then.
func (s *SSE) Result() (t wire.Tokens, found bool) { return s.tok, s.found }

// TextBytes is how many bytes of generated text (parts' text, thoughts
// included, as decoded strings) the events so far carried.
func (s *SSE) TextBytes() int64 { return s.text }

// Err returns the first event that could not be decoded. For logging only.
func (s *SSE) Err() error { return s.err }
