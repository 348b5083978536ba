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
// with the last window each limit was seen in (so a warm check skips the
// calendar arithmetic) and the routes its requests took (so a warm check
// neither validates nor normalises names again, nor matches scopes).
type keyLimits struct {
	version   int64  // the store's limits version they were read at
	key       string // the key, validated and normalised: the cache's key
	team, org string // the key's placement then
	limits    []Limit
	cur       []atomic.Pointer[curWindow] // the last window each limit was seen in
	routes    [routeSlots]atomic.Pointer[route]
}

// curWindow is a limit's last window and, once looked up, its counter.
type curWindow struct {
	start, end time.Time
	c          *cache.Counter
}

func newKeyLimits(key string, ls []Limit, version int64, team, org string) *keyLimits {
	sortLimits(ls)
	return &keyLimits{version: version, key: key, team: team, org: org, limits: ls, cur: make([]atomic.Pointer[curWindow], len(ls))}
}

// routeSlots is how many (provider, model) pairs a key remembers: a key
// that alternates between more re-validates its names on some checks,
// which costs time, never a wrong answer.
const routeSlots = 4

// route is what the requests of one key to one (provider, model), as sent,
// need besides the user and the instant: the names validated once and
// normalised, and the limits that may decide them.
type route struct {
	rawProvider, rawModel string // as sent: what a request is matched on
	provider, model       string // trimmed
	norm                  string // the model normalised (NormalizeModel)
	// idx are the limits enabled and applying to the key, its team and org
	// and this provider and model, in listing order; a user-scope limit
	// among them applies by the request's user, a once limit by its
	// instant, both decided per check.
	idx []int32
	usd bool // a usd limit is among idx: the check prices the estimate
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
func (kl *keyLimits) routeFor(provider, model string) (*route, error) {
	for i := range kl.routes {
		if r := kl.routes[i].Load(); r != nil && r.rawProvider == provider && r.rawModel == model {
			return r, nil
		}
	}
	// Cloned: a request's names may point into its body, which the route
	// must not keep alive.
	provider, model = strings.Clone(provider), strings.Clone(model)
	r := &route{rawProvider: provider, rawModel: model, provider: strings.TrimSpace(provider), model: strings.TrimSpace(model)}
	if err := checkNames("provider", r.provider, "model", r.model); err != nil {
		return nil, err
	}
	r.norm = NormalizeModel(r.model)
	// Every user-scope limit stays a candidate: Applies then sees a user
	// that matches it; every tag-scope limit too, decided by the request's
	// tags per check.
	who := Who{Key: kl.key, Team: kl.team, Org: kl.org}
	for i := range kl.limits {
		l := &kl.limits[i]
		if !l.Enabled {
			continue
		}
		if l.Scope == ScopeUser {
			who.User = l.ScopeValue
			if l.EachUser() {
				who.User = "-"
			}
		}
		if l.Scope == ScopeTag || l.Applies(&who, r.provider, r.norm) { // tag limits too, as user ones
			r.idx = append(r.idx, int32(i))
			r.usd = r.usd || l.Metric == MetricUSD
		}
		who.User = ""
	}
	// An empty slot first, else the one a hash of the pair picks, so a
	// key's few pairs settle in distinct slots; a collision only costs a
	// rebuild.
	slot := maphash.String(routeSeed, provider+"\x00"+model) % routeSlots
	for i := range kl.routes {
		if kl.routes[i].Load() == nil {
			slot = uint64(i)
			break
		}
	}
	kl.routes[slot].Store(r)
	return r, nil
}

var routeSeed = maphash.MakeSeed()

// window is limits[i]'s window holding at, with its counter when known:
// remembered while at stays in it, so a warm check skips the calendar
// arithmetic and the counter cache.
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
	kl := newKeyLimits(key, ls, version, team, org)
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
