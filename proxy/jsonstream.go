package proxy

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

// writeJSON frames b, the next bytes of a JSON body, dispatching each
// chunk when its closing brace arrives.
func (p *StreamParser) writeJSON(b []byte) {
	f := &p.jf
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
				} else {
					p.dispatch(p.data)
				}
				f.in, p.data = false, p.data[:0]
			}
		}
	}
	keep(len(b))
}
