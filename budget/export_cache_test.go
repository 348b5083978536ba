package budget

import "github.com/tokenbudget/tokenbudget/cache"

// SlotCounter is the counter that limit id's slot in key's cached entry
// holds for a warm check (nil when none), and the counter cache's counter
// for the same window (nil when none).
func SlotCounter(t *Tracker, key, id string) (slot, cached *cache.Counter) {
	e, ok := t.limits.Peek(key)
	if !ok {
		return nil, nil
	}
	for i := range e.Value.lims {
		if s := &e.Value.lims[i]; s.id == id {
			if slot = s.c.Load(); slot != nil {
				cached = t.counters.Peek(slot.Key())
			}
		}
	}
	return slot, cached
}

// WindowMemo is the window (Unix nanos) that limit id's definition, as key
// k's entry holds it, remembers for the checks; ok is false when none.
func WindowMemo(t *Tracker, key, id string) (start, end int64, ok bool) {
	e, found := t.limits.Peek(key)
	if !found {
		return 0, 0, false
	}
	for i := range e.Value.lims {
		if s := &e.Value.lims[i]; s.id == id {
			if w := s.def.win.Load(); w != nil {
				return w.start, w.end, true
			}
		}
	}
	return 0, 0, false
}
