package budget

import (
	"testing"
	"time"
)

// sortCounters moves the counters, their windows and the adds pointing at
// them together: after it, the counters are in (limit, subject, start)
// order, each window knows its new index, and every add still adds to the
// counter of the window it was planned on.
func TestSortCountersKeepsEachAddOnItsWindow(t *testing.T) {
	at := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	lims := []*Limit{{ID: "c"}, {ID: "a", Subject: "k2"}, {ID: "a", Subject: "k1"}, {ID: "b"}}
	var b batch
	for i, l := range []int{0, 1, 2, 3, 2, 0} { // a, k1 twice and c twice: two windows each
		w := &memWindow{l: lims[l], start: at.Add(time.Duration(i) * time.Hour).UnixNano(), cw: int32(i)}
		b.ws.Counters = append(b.ws.Counters, CounterWrite{Ref: WindowRef{Limit: w.l, Start: time.Unix(0, w.start).UTC()}})
		b.touched = append(b.touched, w)
	}
	b.ws.Counters[5].Ref.Start = at.Add(-time.Hour) // c's second window starts first
	b.touched[5].start = at.Add(-time.Hour).UnixNano()
	// Each event adds to two counters; the amount names the window.
	for _, cs := range [][2]int{{0, 1}, {2, 3}, {4, 5}} {
		b.ws.Events = append(b.ws.Events, EventWrite{Adds: []CounterAdd{{Counter: cs[0], Amount: b.touched[cs[0]].start}, {Counter: cs[1], Amount: b.touched[cs[1]].start}}})
	}
	b.sortCounters()
	want := []struct {
		id, subject string
		start       time.Time
	}{{"a", "k1", at.Add(2 * time.Hour)}, {"a", "k1", at.Add(4 * time.Hour)}, {"a", "k2", at.Add(time.Hour)},
		{"b", "", at.Add(3 * time.Hour)}, {"c", "", at.Add(-time.Hour)}, {"c", "", at}}
	for i, w := range want {
		c, tw := b.ws.Counters[i], b.touched[i]
		if c.Ref.Limit.ID != w.id || c.Ref.Limit.Subject != w.subject || !c.Ref.Start.Equal(w.start) {
			t.Errorf("counter %d: %s/%s at %v; want %s/%s at %v", i, c.Ref.Limit.ID, c.Ref.Limit.Subject, c.Ref.Start, w.id, w.subject, w.start)
		}
		if tw.l != c.Ref.Limit || tw.start != c.Ref.Start.UnixNano() || tw.cw != int32(i) {
			t.Errorf("window %d: %s at %d, index %d; want counter %d's", i, tw.l.ID, tw.start, tw.cw, i)
		}
	}
	for i, e := range b.ws.Events {
		for _, a := range e.Adds {
			if got := b.touched[a.Counter].start; got != a.Amount {
				t.Errorf("event %d adds to the window at %d; it was planned on the one at %d", i, got, a.Amount)
			}
		}
	}
}
