package wire

import "bytes"

// Scan counts the text bytes, messages and parts of valid JSON values: what
// a request's input estimate is made of (RequestInfo.Estimate).
type Scan struct {
	Text, Msgs, Parts, Tokens int64
}

// Fill copies the counts into ri.
func (s *Scan) Fill(ri *RequestInfo) {
	ri.TextBytes, ri.Messages, ri.Parts, ri.PreTokens = s.Text, s.Msgs, s.Parts, s.Tokens
}

// Messages counts a messages or input value: each element of an array is a
// message; a string is one message.
func (s *Scan) Messages(b []byte) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return
	}
	if b[0] == '[' {
		Elements(b, func(e []byte) {
			s.Msgs++
			s.walk(e)
		})
		return
	}
	if b[0] == '"' {
		s.Msgs++
	}
	s.walk(b)
}

// Value counts the text of a value without counting it as a message.
func (s *Scan) Value(b []byte) {
	if b = bytes.TrimSpace(b); len(b) > 0 {
		s.walk(b)
	}
}

// Raw counts the bytes of a value as written: tool definitions, which
// providers bill as prompt, JSON and all.
func (s *Scan) Raw(b []byte) { s.Text += int64(len(bytes.TrimSpace(b))) }

// Embeddings counts an embeddings input: a string, an array of strings, an
// array of token ids or an array of such arrays.
func (s *Scan) Embeddings(b []byte) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return
	}
	var count func(b []byte)
	count = func(b []byte) {
		switch b[0] {
		case '"':
			s.Text += int64(StringLen(b))
		case '[':
			Elements(b, count)
		case 'n', 't', 'f', '{':
			s.walk(b)
		default:
			s.Tokens++
		}
	}
	count(b)
}

// attachments are the content part types with a fixed cost.
var attachments = map[string]bool{
	"image_url": true, "input_image": true, "image": true, "document": true,
	"file": true, "input_file": true, "input_audio": true,
}

// walk counts one valid JSON value: the bytes of its strings, and an
// attachment for an object whose "type" names one (its contents skipped).
func (s *Scan) walk(b []byte) {
	switch b[0] {
	case '"':
		s.Text += int64(StringLen(b))
	case '[':
		Elements(b, s.walk)
	case '{':
		var typ []byte
		media := false
		Members(b, func(k, v []byte) {
			if string(k) == `"type"` && len(v) > 0 && v[0] == '"' {
				typ = v
			}
			// Gemini's parts (inline bytes, a file) and Bedrock Converse's
			// content blocks (image, document, video): not text.
			switch string(k) {
			case `"inlineData"`, `"fileData"`:
				media = true
			case `"image"`, `"document"`, `"video"`:
				media = media || len(v) > 0 && v[0] == '{'
			}
		})
		if media || typ != nil && attachments[string(typ[1:len(typ)-1])] {
			s.Parts++
			return
		}
		Members(b, func(k, v []byte) {
			// Gemini's opaque token of a thought, sent back with the
			// turn: not prompt text.
			if string(k) != `"thoughtSignature"` {
				s.walk(v)
			}
		})
	}
}
