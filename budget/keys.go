package budget

import (
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tokenbudget/tokenbudget/cache"
)

// keyLimits is the cached definitions of one API key, in listing order,
// with the counter each limit was last checked on (so a warm check skips
// the counter cache) and the routes its requests took (so a warm check
// neither validates nor normalises names again, nor matches scopes).
//
// It is kept small, since a gateway caches one per key: each limit is its
// id and a pointer to a definition shared by every key with the same (see
// intern.go), and a Limit is written out (limitInto) only where one is
// shown or handed on.
type keyLimits struct {
	key  string // the key, validated and normalised: the cache's key
	lims []limSlot
	// meta is the rest, shared by every key with the same (intern.go) and
	// replaced whole when the key's requests take a new route.
	meta atomic.Pointer[keyMeta]
}

// keyMeta is what a key's entry holds besides its key and limits: the
// store's limits version they were read at, the key's team and
// organisation then ("" for none), and the routes its requests took. Keys
// of one team with the same routes share one, so a key's own entry is 48
// bytes.
type keyMeta struct {
	version   int64
	team, org string
	routes    routeSet
}

func (kl *keyLimits) version() int64 { return kl.meta.Load().version }
func (kl *keyLimits) team() string   { return kl.meta.Load().team }
func (kl *keyLimits) org() string    { return kl.meta.Load().org }

// limSlot is one limit of a key: its id, its definition, and the counter
// of the window it was last checked in.
//
// The window's bounds are the definition's (limDef.windowAt, shared by
// every key with the same definition); the counter is current for them
// while its key's Start is their start. A counter's key never changes, so
// a reader that loads c once never pairs one window's bounds with another
// window's counter, and a warm check finds its counter with no object of
// the slot's own beyond the pointer.
type limSlot struct {
	id  string
	def *limDef
	c   atomic.Pointer[cache.Counter]
}

// curWindow is a limit's window holding an instant (Unix nanos) and, when
// the limit's slot holds it, the window's counter.
type curWindow struct {
	start, end int64
	c          *cache.Counter
}

func (t *Tracker) newKeyLimits(key string, ls []Limit, version int64, team, org string) *keyLimits {
	sortLimits(ls)
	kl := &keyLimits{key: key, lims: make([]limSlot, len(ls))}
	kl.meta.Store(t.interned.meta(keyMeta{version: version, team: team, org: org}))
	for i := range ls {
		kl.lims[i].id, kl.lims[i].def = ls[i].ID, t.interned.def(&ls[i])
	}
	return kl
}

// limitInto writes limit i out as a Limit: its definition with its id and
// the key it counts for (a key's own limit's owner, a default's subject).
func (kl *keyLimits) limitInto(i int, l *Limit) {
	s := &kl.lims[i]
	*l = s.def.proto
	l.ID = s.id
	switch s.def.for_ {
	case forOwn:
		l.Key = kl.key
	case forDefault:
		l.Subject = kl.key
	}
}

// limits are every limit written out, for the writer, which keeps them.
func (kl *keyLimits) limits() []Limit {
	ls := make([]Limit, len(kl.lims))
	for i := range ls {
		kl.limitInto(i, &ls[i])
	}
	return ls
}

// hasUSD reports whether a usd limit is among kl's.
func (kl *keyLimits) hasUSD() bool {
	for i := range kl.lims {
		if kl.lims[i].def.proto.Metric == MetricUSD {
			return true
		}
	}
	return false
}

// routeSlots is how many (provider, model) pairs a key remembers: a key
// that alternates between more re-validates its names on some checks,
// which costs time, never a wrong answer.
const routeSlots = 4

// route is what the requests of one key to one (provider, model), as
// sent, need besides the user and the instant: the names validated once
// and normalised, and the limits that may decide them. Routes are shared
// by the keys whose limits give the same (intern.go).
type route struct {
	*routeNames
	// idx are the limits enabled and applying to the key, its team and org
	// and this provider and model, in listing order; a user-scope limit
	// among them applies by the request's user, a once limit by its
	// instant, both decided per check.
	idx []int32
	usd bool // a usd limit is among idx: the check prices the estimate
}

// routeNames are a (provider, model) pair as sent and as used, shared by
// every route to it.
type routeNames struct {
	rawProvider, rawModel string // as sent: what a request is matched on
	provider, model       string // trimmed
	norm                  string // the model normalised (NormalizeModel)
	// park is the provider's parking entry as last looked up, valid while
	// the parking cache's generation is the one it was found at.
	park atomic.Pointer[parkMemo]
}

type parkMemo struct {
	gen uint64
	e   *cache.Entry[*ProviderState]
}

// routeFor is the route of a request sent with provider and model as
// they are, from kl's memory or, the first time, validated and built.
func (t *Tracker) routeFor(kl *keyLimits, provider, model string) (*route, error) {
	m := kl.meta.Load()
	for _, r := range m.routes {
		if r != nil && r.rawProvider == provider && r.rawModel == model {
			return r, nil
		}
	}
	names, err := t.interned.routeNames(provider, model)
	if err != nil {
		return nil, err
	}
	var idx []int32
	usd := false
	// Every user-scope limit stays a candidate: Applies then sees a user
	// that matches it; every tag-scope limit too, decided by the request's
	// tags per check.
	who := Who{Key: kl.key, Team: m.team, Org: m.org}
	var l Limit
	for i := range kl.lims {
		kl.limitInto(i, &l)
		if !l.Enabled {
			continue
		}
		if l.Scope == ScopeUser {
			who.User = l.ScopeValue
			if l.EachUser() {
				who.User = "-"
			}
		}
		if l.Scope == ScopeTag || l.Applies(&who, names.provider, names.norm) { // tag limits too, as user ones
			idx = append(idx, int32(i))
			usd = usd || l.Metric == MetricUSD
		}
		who.User = ""
	}
	r := t.interned.route(names, idx, usd)
	// An empty slot first, else the one a hash of the pair picks, so a
	// key's few pairs settle in distinct slots; a collision only costs a
	// rebuild. The set is replaced whole, with the key's meta (a check
	// racing this one may lose its route, which costs it a rebuild), and
	// shared by the keys whose requests took the same routes.
	next := *m
	slot := maphash.String(routeSeed, provider+"\x00"+model) % routeSlots
	for i := range next.routes {
		if next.routes[i] == nil {
			slot = uint64(i)
			break
		}
	}
	next.routes[slot] = r
	kl.meta.Store(t.interned.meta(next))
	return r, nil
}

// routeSet is the routes a key's requests took, up to routeSlots.
type routeSet [routeSlots]*route

var routeSeed = maphash.MakeSeed()

// window is limit i's window holding at, with its counter when the slot
// holds the window's: the bounds are remembered (by the definition) while
// at stays in them, so a warm caller skips the calendar arithmetic and
// the counter cache. clock is the tracker's clock if the caller read it,
// else 0 (see limDef.newWindow).
func (kl *keyLimits) window(i int, at time.Time, clock int64) curWindow {
	s := &kl.lims[i]
	w := s.def.windowAt(at, clock)
	return curWindow{start: w.start, end: w.end, c: s.counter(w.start)}
}

// counter is the slot's counter if it is the one of the window starting
// at start (Unix nanos), else nil.
func (s *limSlot) counter(start int64) *cache.Counter {
	if c := s.c.Load(); c != nil && c.Start() == start {
		return c
	}
	return nil
}

// keyLimitsFor returns key's limits from the cache, re-reading them once
// they are older than the refresh interval.
func (t *Tracker) keyLimitsFor(ctx context.Context, key string, clock int64) (*keyLimits, error) {
	if e, ok := t.limits.Peek(key); ok && t.fresh(e.LoadedAt, clock) {
		return e.Value, nil
	}
	loadedAt := t.now().UnixNano()
	// Cached, with the defaults' subjects that Effective sets to it: not a
	// view into a request's memory.
	key = strings.Clone(key)
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
	kl := t.newKeyLimits(key, ls, version, team, org)
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
