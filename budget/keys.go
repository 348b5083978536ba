package budget

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tokenbudget/tokenbudget/cache"
)

// keyLimits is the cached definitions of one API key, in listing order,
// with the last window each limit was seen in (so a warm check skips the
// calendar arithmetic).
type keyLimits struct {
	version   int64  // the store's limits version they were read at
	team, org string // the key's placement then
	limits    []Limit
	cur       []atomic.Pointer[curWindow] // the last window each limit was seen in
}

// curWindow is a limit's last window and, once looked up, its counter.
type curWindow struct {
	start, end time.Time
	c          *cache.Counter
}

func newKeyLimits(ls []Limit, version int64, team, org string) *keyLimits {
	sortLimits(ls)
	return &keyLimits{version: version, team: team, org: org, limits: ls, cur: make([]atomic.Pointer[curWindow], len(ls))}
}

// window is limits[i]'s window holding at, with its counter when known:
// remembered while at stays in it, so a warm check skips the calendar
// arithmetic and the counter LRU.
func (k *keyLimits) window(i int, at time.Time) *curWindow {
	if w := k.cur[i].Load(); w != nil && !at.Before(w.start) && at.Before(w.end) {
		return w
	}
	start, end := k.limits[i].Window.Bounds(at)
	w := &curWindow{start: start, end: end}
	k.cur[i].Store(w)
	return w
}

// keyLimitsFor returns key's limits from the cache, re-reading them once
// they are older than the refresh interval.
func (t *Tracker) keyLimitsFor(ctx context.Context, key string, clock int64) (*keyLimits, error) {
	if e, ok := t.limits.Peek(key); ok && t.fresh(e.LoadedAt, clock) {
		return e.Value, nil
	}
	loadedAt := t.now().UnixNano()
	var ls []Limit
	var version int64
	var team, org string
	err := t.store.View(ctx, func(tx Tx) error {
		var err error
		if version, err = tx.LimitsVersion(ctx); err != nil {
			return err
		}
		if team, org, err = tx.Placement(ctx, key); err != nil {
			return err
		}
		ls, err = loadLimits(ctx, tx, key, team, org)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("load limits of %q: %w", key, err)
	}
	kl := newKeyLimits(ls, version, team, org)
	t.limits.Put(key, kl, loadedAt)
	return kl, nil
}

// InvalidateLimits drops the cached definitions of key (every key when key
// is ""), so the next check reads them again. Changes to a team or an
// organisation drop every key's.
func (t *Tracker) InvalidateLimits(key string) {
	if key == "" {
		t.limits.Purge()
		return
	}
	t.limits.Remove(key)
}
