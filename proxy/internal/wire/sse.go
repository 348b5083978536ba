package wire

import (
	"bytes"
	"errors"
)

// DefaultMaxEventSize is the default cap on the data of one SSE event.
const DefaultMaxEventSize = 1 << 20

// ErrEventTooLarge is recorded (see SSE.Err) when an event's data
// exceeds the parser's MaxEventSize: the event is skipped, not buffered.
var ErrEventTooLarge = errors.New("proxy: SSE event exceeds the size cap; skipped")

// Decoder reads the events of one API's stream: the data of each whole
// event, with its event field's value (name). The SSE and JSON-array
// framers feed it; it keeps the usage.
type Decoder interface {
	// Event consumes one event. usageOnly reports an event a stripped
	// stream leaves out (OpenAI chat's usage-only chunk); err, why an
	// event carrying usage could not be read (it is skipped).
	Event(name, data []byte) (usageOnly bool, err error)
	// Result is the usage of the events so far (found false: none).
	Result() (t Tokens, found bool)
	// Final reports whether the stream's final usage has arrived.
	Final() bool
	// TextBytes is the generated text of the events so far, in bytes.
	TextBytes() int64
}

// keepData is the buffer capacity kept between events; a larger buffer,
// grown by one big event, is released.
const keepData = 64 << 10

// line states
const (
	stLineStart  = iota // at the start of a line
	stName              // in a field name
	stValueStart        // just after the colon: one space is skipped
	stValue             // in a field value
	stSkip              // in a comment line
)

// fields that matter
const (
	fieldOther = iota
	fieldData
	fieldEvent
)

const maxEventName = 64

// SSE reads a streamed (text/event-stream) response's usage from its raw
// bytes, fed through Write in chunks split anywhere (inside a line, a field
// name, a CRLF or a multi-byte character), and hands each event to its
// Decoder. It follows the SSE framing rules of the WHATWG spec: LF, CR or
// CRLF line ends, comment lines, one optional space after the colon,
// multi-line data joined with LF, an event dispatched at a blank line (an
// event still open when the stream ends is discarded).
//
// Memory is bounded: an event whose data exceeds MaxEventSize is skipped.
// The zero value is not usable; call NewSSE. An SSE is not safe for
// concurrent use.
type SSE struct {
	// MaxEventSize caps the data of one event, in bytes; 0 means
	// DefaultMaxEventSize. Set it before the first Write.
	MaxEventSize int

	decoded

	// SSE framing
	st        int
	prevCR    bool // the last byte was a CR ending a line
	firstLine bool // still on the stream's first line (BOM handling)
	name      [8]byte
	nameLen   int // > len(name): too long for a known field
	field     int
	event     []byte
	data      []byte
	hasData   bool
	overflow  bool
	err       error

	// Strip mode: raw bytes held until their event ends
	strip      bool
	usageOnly  bool // the event just dispatched is a usage-only chunk
	hold       []byte
	off        int // hold[off:blockStart] may be read out
	blockStart int // start of the current (unfinished) event in hold
	seg        int // first byte of the current Write not yet in hold
	blockPass  bool
	afterEvent int // an event just ended with CR: eventKept or eventDropped
}

// How the last event ended, for the LF that may follow its CR.
const (
	eventKept = 1 + iota
	eventDropped
)

// NewSSE returns a reader of an SSE stream whose events dec decodes.
func NewSSE(dec Decoder) *SSE { return &SSE{decoded: decoded{dec}, firstLine: true} }

// decoded gives a framer its Decoder's results.
type decoded struct{ dec Decoder }

// Result returns the usage seen so far. found is false when no event carried
// usage (the caller then falls back to its estimate; never record zero).
// Called before the stream ends, it reports what the dispatched events gave.
func (d decoded) Result() (t Tokens, found bool) { return d.dec.Result() }

// Final reports whether the stream's final usage has been seen (see the
// Decoder's Final).
func (d decoded) Final() bool { return d.dec.Final() }

// TextBytes is how many bytes of generated text the events dispatched so
// far carried: what a client that left mid-stream was sent.
func (d decoded) TextBytes() int64 { return d.dec.TextBytes() }

// Err returns the first problem met: ErrEventTooLarge, or why an event
// carrying usage could not be decoded (bad JSON, a count that is not an
// integer from 0 to 2^53-1). Such events are skipped; Result still holds
// what the other events gave. For logging only.
func (p *SSE) Err() error { return p.err }

func (p *SSE) maxEvent() int {
	if p.MaxEventSize > 0 {
		return p.MaxEventSize
	}
	return DefaultMaxEventSize
}

// Write parses b, the next bytes of the stream. It never fails and always
// returns len(b), nil, so it can sit behind io.TeeReader or io.MultiWriter.
func (p *SSE) Write(b []byte) (int, error) {
	p.seg = 0
	for i := 0; i < len(b); {
		c := b[i]
		switch p.st {
		case stLineStart:
			if c == '\n' && p.prevCR { // the LF of a CRLF
				p.prevCR = false
				if p.strip && p.afterEvent != 0 { // it ends the event before
					if p.afterEvent == eventDropped {
						p.keep(b[p.seg:i])
					} else {
						p.keep(b[p.seg : i+1])
					}
					p.seg = i + 1
					p.blockStart = len(p.hold)
				}
				p.afterEvent = 0
				i++
				continue
			}
			p.prevCR, p.afterEvent = false, 0
			switch c {
			case '\r', '\n': // blank line: dispatch
				p.prevCR = c == '\r'
				i++
				p.endEvent(b, i)
				continue
			case ':':
				p.st = stSkip
				i++
				continue
			}
			p.st, p.nameLen = stName, 0
		case stName:
			j := i
			for j < len(b) && b[j] != ':' && b[j] != '\r' && b[j] != '\n' {
				j++
			}
			p.addName(b[i:j])
			if i = j; i == len(b) {
				continue
			}
			p.startField()
			if b[i] == ':' {
				p.st = stValueStart
				i++
				continue
			}
			p.endField() // a line without a colon: the field with an empty value
			p.endLine(b[i])
			i++
		case stValueStart:
			p.st = stValue
			if c == ' ' {
				i++
			}
		case stValue, stSkip:
			j := indexEOL(b[i:])
			if j < 0 {
				if p.st == stValue {
					p.addValue(b[i:])
				}
				i = len(b)
				continue
			}
			if p.st == stValue {
				p.addValue(b[i : i+j])
				p.endField()
			}
			i += j
			p.endLine(b[i])
			i++
		}
	}
	if p.strip {
		p.keep(b[p.seg:])
	}
	return len(b), nil
}

// indexEOL returns the index of the first CR or LF in b, or -1.
func indexEOL(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	s := b
	if i >= 0 {
		s = b[:i]
	}
	if j := bytes.IndexByte(s, '\r'); j >= 0 {
		return j
	}
	return i
}

func (p *SSE) endLine(c byte) {
	p.prevCR = c == '\r'
	p.st = stLineStart
	p.firstLine = false
}

func (p *SSE) addName(b []byte) {
	if p.nameLen+len(b) > len(p.name) {
		p.nameLen = len(p.name) + 1
		return
	}
	p.nameLen += copy(p.name[p.nameLen:], b)
}

// startField decides which field the name just read is.
func (p *SSE) startField() {
	p.field = fieldOther
	if p.nameLen > len(p.name) {
		return
	}
	name := p.name[:p.nameLen]
	if p.firstLine { // a byte order mark may open the stream
		name = bytes.TrimPrefix(name, []byte("\xef\xbb\xbf"))
	}
	switch string(name) {
	case "data":
		p.field = fieldData
		p.hasData = true
	case "event":
		p.field = fieldEvent
		p.event = p.event[:0]
	}
}

func (p *SSE) addValue(b []byte) {
	switch p.field {
	case fieldData:
		if p.overflow {
			return
		}
		if len(p.data)+len(b) > p.maxEvent() {
			p.tooLarge()
			return
		}
		p.data = append(p.data, b...)
	case fieldEvent:
		if len(p.event)+len(b) > maxEventName {
			b = b[:max(0, maxEventName-len(p.event))]
		}
		p.event = append(p.event, b...)
	}
}

func (p *SSE) endField() {
	if p.field == fieldData && !p.overflow {
		if len(p.data) >= p.maxEvent() {
			p.tooLarge()
		} else {
			p.data = append(p.data, '\n')
		}
	}
	p.field = fieldOther
}

// tooLarge drops the data of the current event: it will be skipped.
func (p *SSE) tooLarge() {
	p.overflow = true
	p.data = p.data[:0]
}

// endEvent ends the event at a blank line; i is the index in b just past
// the blank line's line end.
func (p *SSE) endEvent(b []byte, i int) {
	p.firstLine = false
	p.usageOnly = false
	if p.hasData {
		if p.overflow {
			p.fail(ErrEventTooLarge)
		} else {
			p.dispatch(bytes.TrimSuffix(p.data, []byte{'\n'}))
		}
	}
	if p.strip {
		p.keep(b[p.seg:i])
		p.seg = i
		p.afterEvent = eventKept
		if p.usageOnly && !p.blockPass {
			p.hold = p.hold[:p.blockStart]
			p.afterEvent = eventDropped
		}
		if !p.prevCR {
			p.afterEvent = 0
		}
		p.blockStart, p.blockPass = len(p.hold), false
	}
	p.hasData, p.overflow = false, false
	p.event = p.event[:0]
	if cap(p.data) > keepData {
		p.data = nil
	} else {
		p.data = p.data[:0]
	}
}

func (p *SSE) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// dispatch hands the data of one complete event to the decoder.
func (p *SSE) dispatch(data []byte) {
	uo, err := p.dec.Event(p.event, data)
	if err != nil {
		p.fail(err)
	}
	p.usageOnly = uo
}
