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
//
// A warm check makes one lookup (the key's cached definitions, which hold
// the routes its requests took and each limit's window and counter) and
// validates only what a route cannot remember: the user and the estimate.
func (t *Tracker) check(ctx context.Context, req Request, now time.Time, clock int64, statuses []Status) (Decision, error) {
	kl, r, err := t.routeOf(ctx, &req, clock)
	if err != nil {
		return Decision{}, err
	}
	who := Who{Key: kl.key, Team: kl.team(), Org: kl.org(), User: req.User, Tags: req.Tags}
	none := statuses == nil // Check's: nil unless a limit decides
	for _, i := range r.idx {
		if statuses == nil {
			statuses = make([]Status, 0, len(r.idx))
		}
		// The limit is written out into the next status, kept only if it
		// decides the request.
		n := len(statuses)
		if n < cap(statuses) {
			statuses = statuses[:n+1] // status sets every field: no zeroing first
		} else {
			statuses = append(statuses, Status{})
		}
		st := &statuses[n]
		kl.limitInto(int(i), &st.Limit)
		if l := &st.Limit; (l.Scope == ScopeUser || l.Scope == ScopeTag) && !l.Applies(&who, r.provider, r.norm) || !l.Covers(now) {
			statuses = statuses[:n]
			continue
		}
		if err := t.status(ctx, kl, int(i), &who, now, clock, st); err != nil {
			return Decision{}, err
		}
	}
	if none && len(statuses) == 0 {
		statuses = nil
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
	if r.usd {
		for i := range statuses {
			if statuses[i].Limit.Metric == MetricUSD {
				table, err := t.pricesAt(ctx, clock)
				if err != nil {
					return Decision{}, err
				}
				var ok bool
				if price, ok = priceEstimate(table, statuses, &req, r.norm, now); !ok {
					unpriced = &Unpriced{Provider: req.Provider, Model: req.Model}
				}
				break
			}
		}
	}
	d := Decide(statuses, req.Estimate, now)
	d.Price = price
	if unpriced != nil {
		d.Allowed, d.Unpriced = false, unpriced
	}
	if req.Provider != "" {
		p, err := t.parkedOn(ctx, r, now, clock)
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

// routeOf validates and normalises req in place as normalizeRequest does,
// and returns its key's definitions and its route: from the cache when
// warm, where the key and the provider and model as sent were validated
// when they were cached, so only the user and the estimate are checked.
func (t *Tracker) routeOf(ctx context.Context, req *Request, clock int64) (*keyLimits, *route, error) {
	var kl *keyLimits
	if e, ok := t.limits.Peek(req.Key); ok && t.fresh(e.LoadedAt, clock) {
		kl = e.Value // only validated, normalised keys are cached
	} else {
		n, err := normalizeRequest(*req)
		if err != nil {
			return nil, nil, err
		}
		if kl, err = t.keyLimitsFor(ctx, n.Key, clock); err != nil {
			return nil, nil, err
		}
	}
	r, err := t.routeFor(kl, req.Provider, req.Model)
	if err != nil {
		return nil, nil, err
	}
	req.Key, req.Provider, req.Model = kl.key, r.provider, r.model
	if req.User != "" {
		if req.User = strings.TrimSpace(req.User); req.User != "" {
			if err := CheckName("user", req.User); err != nil {
				return nil, nil, err
			}
		}
	}
	if req.Tags != "" {
		var err error
		if req.Tags, err = NormalizeTags("tags", req.Tags); err != nil {
			return nil, nil, err
		}
	}
	return kl, r, req.Estimate.validate()
}

// parkedOn is parkedAt for r's provider, from the entry r remembers while
// it is current, so a warm check makes no second lookup.
func (t *Tracker) parkedOn(ctx context.Context, r *route, now time.Time, clock int64) (*Parked, error) {
	if m := r.park.Load(); m != nil && m.gen == t.parked.Gen() && t.fresh(m.e.LoadedAt, clock) {
		return parkedOf(m.e.Value, now), nil
	}
	gen := t.parked.Gen() // before the lookup: a change after it moves Gen past the memo
	p, err := t.parkedAt(ctx, r.provider, now, clock)
	if err != nil {
		return nil, err
	}
	if e, ok := t.parked.Peek(r.provider); ok {
		r.park.Store(&parkMemo{gen: gen, e: e})
	}
	return p, nil
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
	var err error
	if req.Tags, err = NormalizeTags("tags", req.Tags); err != nil {
		return req, err
	}
	return req, req.Estimate.validate()
}

// status is limit i of kl as it stands at now for who, from the cache
// when warm; st.Limit holds the limit written out (limitInto).
func (t *Tracker) status(ctx context.Context, kl *keyLimits, i int, who *Who, now time.Time, clock int64, st *Status) error {
	l := &st.Limit
	// A per-user (per-tag-value) limit's counter depends on the user (the
	// value): the limit's slot never holds one.
	each := l.Each()
	if each {
		l.Subject = l.subjectFor(who)
	}
	// st is reused from the caller's buffer: every field is set.
	st.Max = l.MaxAt(now)
	st.NextExpiry = time.Time{}
	ns := now.UnixNano()
	s := &kl.lims[i]
	var w span // none for a concurrent limit: its counter's Start is 0
	if l.Metric != MetricConcurrent {
		if p := s.def.win.Load(); p != nil && p.has(ns) { // windowAt, inlined by hand
			w = *p
		} else {
			w = s.def.newWindow(now, clock)
		}
		st.WindowStart, st.ResetAt = time.Unix(0, w.start).UTC(), time.Unix(0, w.end).UTC()
	} else {
		st.WindowStart, st.ResetAt = time.Time{}, time.Time{}
	}
	// The counter's key, only when the slot has no live counter.
	key := func() cache.Key { return cache.Key{LimitID: l.ID, Subject: l.Subject, Start: w.start} }
	var c, held *cache.Counter
	if each {
		c = t.counters.Peek(key())
	} else if held = s.counter(w.start); held != nil && !held.Dead() {
		c = held
	} else {
		c = t.counters.Peek(key())
	}
	used := int64(-1)
	if c == nil || !t.fresh(c.LoadedAt(), clock) {
		var err error
		var committed int64
		if c, committed, err = t.loadCounter(ctx, l, key(), st.WindowStart, st.ResetAt); err != nil {
			return err
		}
		if c.LoadedAt() == 0 {
			used = committed + c.Pending()
		}
	}
	if !each && c != held { // the slot's next warm check finds it there
		s.c.Store(c)
	}
	reserved, n, next := c.Reserved(ns)
	if l.Metric == MetricConcurrent {
		st.Used, st.Reserved = n, 0
		if next != 0 {
			st.NextExpiry = time.Unix(0, next).UTC()
		}
		return nil
	}
	if used < 0 {
		used = c.Used()
	}
	st.Used, st.Reserved = used, reserved
	return nil
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
