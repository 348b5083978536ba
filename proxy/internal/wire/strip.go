package wire

import "io"

// keep appends raw stream bytes to the hold buffer (StripUsageChunks mode).
// An event whose raw bytes outgrow the cap is let through as it comes: it
// is too large to be a usage-only chunk the parser would decode.
func (p *SSE) keep(b []byte) {
	p.hold = append(p.hold, b...)
	if p.blockPass || len(p.hold)-p.blockStart > p.maxEvent() {
		p.blockPass, p.blockStart = true, len(p.hold)
	}
}

// StripUsageChunks returns a reader of r's bytes that feeds all of them to
// p and leaves out every event p's Decoder calls usage-only (an OpenAI chat
// usage-only chunk): for a client that did not ask for
// stream_options.include_usage when the proxy added it. Every other byte is
// yielded unchanged; each event is yielded once its blank line has arrived
// (an event larger than p's cap as it comes), and whatever is still held
// when r ends (EOF or error) is yielded before r's error. Only OpenAI chat
// streams have usage-only chunks: for other APIs nothing is left out.
//
// p must be new (no Write yet) and from then on be fed only by the reader.
// Without stripping, io.TeeReader(r, p) does the same job.
func StripUsageChunks(r io.Reader, p *SSE) io.Reader {
	p.strip = true
	return &stripReader{r: r, p: p}
}

type stripReader struct {
	r   io.Reader
	p   *SSE
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
func (p *SSE) releasable() []byte { return p.hold[p.off:p.blockStart] }

// released marks the first n bytes of releasable as let out.
func (p *SSE) released(n int) {
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
func (p *SSE) endHold() { p.blockStart = len(p.hold) }

// StripWriter is StripUsageChunks on the writing side: it feeds p and
// writes every byte but usage-only chunks to w as soon as each event is
// complete. Close writes what is still held (an unfinished event).
type StripWriter struct {
	w io.Writer
	p *SSE
}

// NewStripWriter returns a StripWriter to w fed by p, which must be new.
func NewStripWriter(w io.Writer, p *SSE) *StripWriter {
	p.strip = true
	return &StripWriter{w: w, p: p}
}

// Write consumes all of b; it fails only when w does.
func (s *StripWriter) Write(b []byte) (int, error) {
	s.p.Write(b)
	if err := s.drain(); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (s *StripWriter) drain() error {
	for r := s.p.releasable(); len(r) > 0; r = s.p.releasable() {
		n, err := s.w.Write(r)
		s.p.released(n)
		if err != nil {
			return err
		}
	}
	return nil
}

// Close writes what is still held.
func (s *StripWriter) Close() error {
	s.p.endHold()
	return s.drain()
}
