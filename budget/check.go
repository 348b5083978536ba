package budget

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/cache"
)

// Check answers whether req may run now, without consuming anything.
func (t *Tracker) Check(ctx context.Context, req Request) (Decision, error) {
	now := t.now()
	return t.check(ctx, req, now, now.UnixNano(), nil)
}

// CheckAt is Check at the instant now: the windows are those holding now.
// It never writes: a window with no counter row yet is seeded from the
// history in memory only.
func (t *Tracker) CheckAt(ctx context.Context, req Request, now time.Time) (Decision, error) {
	return t.check(ctx, req, now, t.now().UnixNano(), nil)
}

// CheckInto is Check at now appending the statuses to buf[:0], so a caller
// that reuses buf between calls checks without allocating. now is the
// caller's clock: it picks the windows and ages the cache, so it must be
// the current time (a proxy passes the request's arrival), which saves
// reading the clock again. A zero now means the tracker's clock.
func (t *Tracker) CheckInto(ctx context.Context, req Request, now time.Time, buf []Status) (Decision, error) {
	if now.IsZero() {
		now = t.now()
	}
	return t.check(ctx, req, now, now.UnixNano(), buf[:0])
}

// check decides req at now; clock is the tracker's clock, which ages the
// cache (now may be any instant a caller asks about).
func (t *Tracker) check(ctx context.Context, req Request, now time.Time, clock int64, statuses []Status) (Decision, error) {
	req, err := normalizeRequest(req)
	if err != nil {
		return Decision{}, err
	}
	kl, err := t.keyLimitsFor(ctx, req.Key, clock)
	if err != nil {
		return Decision{}, err
	}
	model := NormalizeModel(req.Model)
	who := Who{Key: req.Key, Team: kl.team, Org: kl.org, User: req.User}
	for i := range kl.limits {
		l := &kl.limits[i]
		if !l.decidesRequest(&who, req.Provider, model, now) {
			continue
		}
		if statuses == nil {
			statuses = make([]Status, 0, len(kl.limits)-i)
		}
		st, err := t.status(ctx, kl, i, &who, now, clock)
		if err != nil {
			return Decision{}, err
		}
		statuses = append(statuses, st)
	}
	if t.leasesOn() {
		// The room this process may still carve from the route's lease is
		// its own to admit: held from the others, not from itself.
		for i := range statuses {
			st := &statuses[i]
			if st.Limit.Metric == MetricConcurrent || st.Reserved == 0 {
				continue
			}
			k := cache.Key{LimitID: st.Limit.ID, Subject: st.Limit.Subject, Start: st.WindowStart.UnixNano()}
			st.Reserved = max(st.Reserved-t.routeFree(&req, k), 0)
		}
	}
	var unpriced *Unpriced
	var price *Price
	for i := range statuses {
		if statuses[i].Limit.Metric == MetricUSD {
			table, err := t.pricesAt(ctx, clock)
			if err != nil {
				return Decision{}, err
			}
			var ok bool
			if price, ok = priceEstimate(table, statuses, &req, model, now); !ok {
				unpriced = &Unpriced{Provider: req.Provider, Model: req.Model}
			}
			break
		}
	}
	d := Decide(statuses, req.Estimate, now)
	d.Price = price
	if unpriced != nil {
		d.Allowed, d.Unpriced = false, unpriced
	}
	if req.Provider != "" {
		p, err := t.parkedAt(ctx, req.Provider, now, clock)
		if err != nil {
			return Decision{}, err
		}
		if p != nil {
			d.Allowed = false
			d.Parked = p
		}
	}
	return d, nil
}

// Validate checks a request as Check and Reserve will: a key, and token
// estimates from 0 to 2^53-1.
func (req Request) Validate() error {
	_, err := normalizeRequest(req)
	return err
}

func normalizeRequest(req Request) (Request, error) {
	req.Key = strings.TrimSpace(req.Key)
	req.Provider = strings.TrimSpace(req.Provider)
	req.Model = strings.TrimSpace(req.Model)
	req.User = strings.TrimSpace(req.User)
	if req.Key == "" {
		return req, invalid("key", req.Key, "must not be empty")
	}
	if err := checkNames("key", req.Key, "provider", req.Provider, "model", req.Model, "user", req.User); err != nil {
		return req, err
	}
	return req, req.Estimate.validate()
}

// status is limit i of kl as it stands at now for who, from the cache
// when warm.
func (t *Tracker) status(ctx context.Context, kl *keyLimits, i int, who *Who, now time.Time, clock int64) (Status, error) {
	l := &kl.limits[i]
	// A per-user limit's counter depends on the user: the limit's slot
	// remembers only its window, never a counter.
	each := l.EachUser()
	if each {
		l = l.forWho(who) // a copy: st must not have its address taken, or every check allocates it
	}
	st := Status{Limit: *l, Max: l.MaxAt(now)}
	k := cache.Key{LimitID: l.ID, Subject: l.Subject}
	var w *curWindow
	if l.Metric != MetricConcurrent {
		w = kl.window(i, now)
		st.WindowStart, st.ResetAt = w.start, w.end
		k.Start = w.start.UnixNano()
	} else if w = kl.cur[i].Load(); w == nil {
		w = &curWindow{}
		kl.cur[i].Store(w)
	}
	c := w.c
	if each {
		c = t.counters.Peek(k)
	} else if c == nil || c.Dead() {
		if c = t.counters.Peek(k); c != nil {
			kl.cur[i].Store(&curWindow{start: w.start, end: w.end, c: c})
		}
	}
	used := int64(-1)
	if c == nil || !t.fresh(c.LoadedAt(), clock) {
		var err error
		var committed int64
		if c, committed, err = t.loadCounter(ctx, l, k, st.WindowStart, st.ResetAt); err != nil {
			return st, err
		}
		if !each {
			kl.cur[i].Store(&curWindow{start: w.start, end: w.end, c: c})
		}
		if c.LoadedAt() == 0 {
			used = committed + c.Pending()
		}
	}
	held, n, next := c.Reserved(now.UnixNano())
	if l.Metric == MetricConcurrent {
		st.Used = n
		if next != 0 {
			st.NextExpiry = time.Unix(0, next).UTC()
		}
		return st, nil
	}
	if used < 0 {
		used = c.Used()
	}
	st.Used = used
	st.Reserved = held
	return st, nil
}

// loadCounter reads one counter from the store into the cache: the stored
// row, or the history's sum when the window has no row yet, and its live
// holds. It returns the committed total to use with the counter's pending
// deltas. A read that overlaps a local commit is not installed (it may or
// may not include the commit, which pending still holds); after a few
// tries it is used uninstalled, counting the in-flight delta possibly
// twice: an over-count that refuses early, never one that admits too much,
// and never a check that hangs on a stuck writer.
func (t *Tracker) loadCounter(ctx context.Context, l *Limit, k cache.Key, start, end time.Time) (*cache.Counter, int64, error) {
	c := t.counters.Acquire(k)
	for attempt := 0; ; attempt++ {
		seq := c.Seq()
		if seq%2 == 1 && c.LoadedAt() != 0 {
			return c, c.Committed(), nil // a commit is landing; cached total plus pending is still exact
		}
		if seq%2 == 1 && attempt < 8 {
			if err := pause(ctx, attempt); err != nil {
				return nil, 0, err
			}
			continue
		}
		loadedAt := t.now().UnixNano()
		var used int64
		var holds []cache.Hold
		err := t.store.View(ctx, func(tx Tx) error {
			var err error
			used, holds, err = readCounter(ctx, tx, l, start, end, time.Unix(0, loadedAt))
			return err
		})
		if err != nil {
			return nil, 0, fmt.Errorf("load counter of limit %s: %w", l.ID, err)
		}
		if c.Refresh(seq, used, holds, loadedAt) {
			return c, c.Committed(), nil
		}
		if c.LoadedAt() != 0 {
			return c, c.Committed(), nil
		}
		if attempt >= 8 {
			return c, used, nil
		}
		if err := pause(ctx, attempt); err != nil {
			return nil, 0, err
		}
	}
}

// pause waits a little before retrying a read that raced a commit.
func pause(ctx context.Context, attempt int) error {
	d := time.Duration(min(attempt+1, 50)) * 100 * time.Microsecond
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
