package wire

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// lastEvent is a Decoder that keeps the last event's data as usage found.
type lastEvent struct {
	data  string
	found bool
}

func (d *lastEvent) Event(_, data []byte) (bool, error) {
	d.data, d.found = string(data), true
	return false, nil
}
func (d *lastEvent) Result() (Tokens, bool) { return Tokens{Model: d.data}, d.found }
func (d *lastEvent) Final() bool            { return d.found }
func (d *lastEvent) TextBytes() int64       { return 0 }

// TestSSEBounded feeds endless events that never end (no blank line) and
// endless name-only data lines: memory stays under the cap, and the next
// whole event still arrives.
func TestSSEBounded(t *testing.T) {
	d := &lastEvent{}
	p := NewSSE(d)
	p.MaxEventSize = 4096
	chunk := []byte(strings.Repeat("a", 1000))
	p.Write([]byte("data: "))
	for range 1000 {
		p.Write(chunk)
	}
	p.Write([]byte("\n"))
	for range 10000 {
		p.Write([]byte("data\n"))
	}
	if cap(p.data) > 2*4096 || len(p.event) > maxEventName {
		t.Errorf("buffers grew: data %d, event %d", cap(p.data), cap(p.event))
	}
	p.Write([]byte("event: " + strings.Repeat("e", 10000) + "\n"))
	if len(p.event) > maxEventName {
		t.Errorf("event name buffer grew to %d", len(p.event))
	}
	p.Write([]byte("\ndata: {\"x\":1}\n\n"))
	if got, found := p.Result(); !found || got.Model != `{"x":1}` {
		t.Errorf("after the big event: %+v %v", got, found)
	}
}

// FuzzSSEBuffers: whatever the input and its chunking, the event buffers
// stay within twice the cap (the proxy's fuzz targets check the usage).
func FuzzSSEBuffers(f *testing.F) {
	f.Add([]byte("data: {\"usage\":{}}\n\nevent: x\ndata: y\n\n"), uint64(1), true)
	f.Add([]byte(strings.Repeat("data: "+strings.Repeat("z", 50)+"\n", 10)+"\n"), uint64(2), true)
	f.Fuzz(func(t *testing.T, data []byte, seed uint64, small bool) {
		limit := DefaultMaxEventSize
		if small {
			limit = 64
		}
		p := NewSSE(&lastEvent{})
		p.MaxEventSize = limit
		rnd := rand.New(rand.NewPCG(seed, 3))
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+rnd.IntN(1+rnd.IntN(64)))
			p.Write(rest[:n])
			rest = rest[n:]
			if cap(p.data) > 2*limit+8192 || cap(p.event) > 2*maxEventName {
				t.Fatalf("buffers over the cap: %d %d", cap(p.data), cap(p.event))
			}
		}
	})
}

// FuzzScalars: the request's scalar members read without reflection (str,
// integer) give what json.Unmarshal gives, for any valid JSON value.
func FuzzScalars(f *testing.F) {
	for _, s := range []string{`"gpt-4o"`, `"h\u00e9"`, `"a\"b"`, `"é"`, `12`, `-3`, `1e3`, `1.0`, `9223372036854775808`, `null`, `true`, `"\u0000"`, `{}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if !json.Valid([]byte(raw)) {
			return
		}
		var s1, s2 string
		ok1 := str(json.RawMessage(raw), &s1)
		ok2 := json.Unmarshal([]byte(raw), &s2) == nil
		if ok1 != ok2 || s1 != s2 {
			t.Errorf("str(%s) = %q %v; json.Unmarshal %q %v", raw, s1, ok1, s2, ok2)
		}
		var i1, i2 int64
		ok1 = integer(json.RawMessage(raw), &i1)
		ok2 = json.Unmarshal([]byte(raw), &i2) == nil
		if ok1 != ok2 || i1 != i2 {
			t.Errorf("integer(%s) = %d %v; json.Unmarshal %d %v", raw, i1, ok1, i2, ok2)
		}
	})
}
