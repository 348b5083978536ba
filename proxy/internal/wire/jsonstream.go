package wire

// A Gemini streamGenerateContent without alt=sse answers a JSON array of
// chunks, sent as they are generated: the parser frames each element as
// it completes, so a stream cut short keeps the usage of its last whole
// chunk, as an SSE stream does. A body that is one object is one chunk.

// jsonFrame is the framing state of a JSON body read as a stream.
type jsonFrame struct {
	depth  int
	array  bool // the top value is an array: its elements are the chunks
	inStr  bool
	esc    bool
	in     bool // inside a chunk: its bytes are kept
	over   bool // the chunk outgrew MaxEventSize: skipped
	top    bool // the top value has started
	closed bool // the top value has ended
}

// JSONArray reads a JSON body as a stream: each element of a top-level
// array (or the one top-level object) is a chunk handed to the Decoder as
// soon as its closing brace arrives. Memory is bounded: a chunk over
// MaxEventSize is skipped. Not safe for concurrent use.
type JSONArray struct {
	// MaxEventSize caps one chunk, in bytes; 0 means DefaultMaxEventSize.
	MaxEventSize int

	decoded
	f    jsonFrame
	data []byte
	err  error
}

// NewJSONArray returns a reader of a JSON-array stream whose chunks dec
// decodes.
func NewJSONArray(dec Decoder) *JSONArray { return &JSONArray{decoded: decoded{dec}} }

// Err is the first chunk that could not be read, or ErrEventTooLarge.
func (p *JSONArray) Err() error { return p.err }

func (p *JSONArray) maxEvent() int {
	if p.MaxEventSize > 0 {
		return p.MaxEventSize
	}
	return DefaultMaxEventSize
}

// Write frames b, the next bytes of the JSON body, dispatching each chunk
// when its closing brace arrives. It never fails.
func (p *JSONArray) Write(b []byte) (int, error) {
	f := &p.f
	start := 0 // of the current chunk's bytes in b
	keep := func(end int) {
		if !f.in || f.over {
			return
		}
		if len(p.data)+end-start > p.maxEvent() {
			f.over, p.data = true, p.data[:0]
			return
		}
		p.data = append(p.data, b[start:end]...)
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if f.inStr {
			switch {
			case f.esc:
				f.esc = false
			case c == '\\':
				f.esc = true
			case c == '"':
				f.inStr = false
			}
			continue
		}
		switch c {
		case '"':
			f.inStr = true
		case '[', '{':
			if f.closed {
				continue
			}
			if !f.top {
				f.top, f.array = true, c == '['
			}
			base := 0
			if f.array {
				base = 1
			}
			if c == '{' && f.depth == base && !f.in {
				f.in, f.over, start = true, false, i
			}
			f.depth++
		case ']', '}':
			if f.depth == 0 {
				continue
			}
			f.depth--
			if f.depth == 0 {
				f.closed = true
			}
			base := 0
			if f.array {
				base = 1
			}
			if f.in && f.depth == base {
				keep(i + 1)
				if f.over {
					p.fail(ErrEventTooLarge)
				} else if _, err := p.dec.Event(nil, p.data); err != nil {
					p.fail(err)
				}
				f.in, p.data = false, p.data[:0]
			}
		}
	}
	keep(len(b))
	return len(b), nil
}

func (p *JSONArray) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}
