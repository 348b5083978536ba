package proxy

import (
	"encoding/json"
	"io"
)

// IsUsageOnlyChunk reports whether data, the data field of one OpenAI chat
// stream event (the JSON after "data:"), is the usage-only chunk that
// stream_options.include_usage adds: a usage object and no choices (the
// "choices" field empty, null or absent). StripUsageChunks removes such
// events from a stream.
func IsUsageOnlyChunk(data []byte) bool {
	if !hasUsageObject(data) {
		return false
	}
	var b body
	return json.Unmarshal(data, &b) == nil && b.Usage != nil && len(b.Choices) == 0
}

// keep appends raw stream bytes to the hold buffer (StripUsageChunks mode).
// An event whose raw bytes outgrow the cap is let through as it comes: it
// is too large to be a usage-only chunk the parser would decode.
func (p *StreamParser) keep(b []byte) {
	p.hold = append(p.hold, b...)
	if p.blockPass || len(p.hold)-p.blockStart > p.maxEvent() {
		p.blockPass, p.blockStart = true, len(p.hold)
	}
}

// StripUsageChunks returns a reader of r's bytes that feeds all of them to
// p and leaves out every event p finds to be an OpenAI chat usage-only chunk
// (see IsUsageOnlyChunk): for a client that did not ask for
// stream_options.include_usage when the proxy added it. Every other byte is
// yielded unchanged; each event is yielded once its blank line has arrived
// (an event larger than p's cap as it comes), and whatever is still held
// when r ends (EOF or error) is yielded before r's error. Only OpenAIChat
// streams have usage-only chunks: for other formats nothing is left out.
//
// p must be new (no Write yet) and from then on be fed only by the reader.
// Without stripping, io.TeeReader(r, p) does the same job.
func StripUsageChunks(r io.Reader, p *StreamParser) io.Reader {
	p.strip = true
	return &stripReader{r: r, p: p}
}

type stripReader struct {
	r   io.Reader
	p   *StreamParser
	err error
}

func (s *stripReader) Read(out []byte) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	p := s.p
	for {
		if r := p.releasable(); len(r) > 0 {
			n := copy(out, r)
			p.released(n)
			return n, nil
		}
		if s.err != nil {
			return 0, s.err
		}
		n, err := s.r.Read(out)
		if n > 0 {
			p.Write(out[:n])
		}
		if err != nil {
			s.err = err
			p.endHold()
		}
	}
}

// releasable returns the held bytes (strip mode) that may be let out now:
// whole events that are not usage-only chunks, and the raw bytes of events
// too large to be one.
func (p *StreamParser) releasable() []byte { return p.hold[p.off:p.blockStart] }

// released marks the first n bytes of releasable as let out.
func (p *StreamParser) released(n int) {
	p.off += n
	if p.off == p.blockStart { // all read out: move the open event to the front
		rest := copy(p.hold, p.hold[p.blockStart:])
		p.hold = p.hold[:rest]
		p.off, p.blockStart = 0, 0
		if cap(p.hold) > keepData && rest <= keepData {
			p.hold = append([]byte(nil), p.hold...)
		}
	}
}

// endHold lets the unfinished event through: the stream has ended.
func (p *StreamParser) endHold() { p.blockStart = len(p.hold) }

// stripWriter is StripUsageChunks on the writing side: it feeds p and
// writes every byte but usage-only chunks to w as soon as each event is
// complete. close writes what is still held (an unfinished event).
type stripWriter struct {
	w io.Writer
	p *StreamParser
}

func newStripWriter(w io.Writer, p *StreamParser) *stripWriter {
	p.strip = true
	return &stripWriter{w: w, p: p}
}

// Write consumes all of b; it fails only when w does.
func (s *stripWriter) Write(b []byte) (int, error) {
	s.p.Write(b)
	if err := s.drain(); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (s *stripWriter) drain() error {
	for r := s.p.releasable(); len(r) > 0; r = s.p.releasable() {
		n, err := s.w.Write(r)
		s.p.released(n)
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *stripWriter) close() error {
	s.p.endHold()
	return s.drain()
}
