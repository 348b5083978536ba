package budget

import (
	"encoding/binary"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// What the keys' cache entries share. A gateway caches one entry per key,
// and most keys have the same few limits: the defaults every key gets, a
// team's, or the same limits set on each key by a provisioning script. So
// a key's entry holds each limit as its id and a pointer to a definition
// (limDef) shared by every key with the same one, the rest of the entry
// (its limits version, team, organisation and the routes its requests
// took: keyMeta) is shared by the keys with the same, and the (provider,
// model) pairs are held once.
//
// The tables are the tracker's own (a route's parking memo is per
// tracker), written on the cache's slow path only, under one mutex. Each
// is bounded: past maxInterned entries it starts over, which costs only
// sharing, since what was handed out stays valid. Every value is
// immutable but two memos, each an atomic pointer to an immutable value
// that a reader checks before use, so a racing or stale one costs a
// recomputation, never a wrong answer: a route's parking memo, which
// checks its generation, and a definition's window (limDef.win), which
// checks that it holds the instant asked about.

// maxInterned bounds each table.
const maxInterned = 1 << 14

// limDef is a limit apart from its id and the key it counts for: proto is
// the Limit with no ID, no Subject and, for a key's own limit, no Key.
type limDef struct {
	proto Limit
	for_  limitFor
	// win is the last window computed for the definition, which every key
	// sharing it reuses while the instants checked stay in it: written
	// once per window, not once per key.
	win atomic.Pointer[span]
}

// windowAt is d's window holding at, from memory while at stays in the
// last one memoised. clock is the tracker's clock (Unix nanos), 0 when
// the caller has not read it.
func (d *limDef) windowAt(at time.Time, clock int64) span {
	if w := d.win.Load(); w != nil && w.has(at.UnixNano()) {
		return *w
	}
	return d.newWindow(at, clock)
}

// newWindow is windowAt's calendar arithmetic, which a check's warm path
// skips (Tracker.status inlines windowAt's first lines). It memoises only
// the window holding the clock: the memo is shared by every key with the
// definition, and the instants asked about are not all now. Usage for
// requests that began before a boundary keeps arriving with instants in
// the old window, a check may ask about any instant (a day ahead, a
// caller's clock running fast), and a memo moved to any of them would
// send every current check on every key sharing the definition to the
// arithmetic (~430 ns and an allocation, against ~2 ns) until it moved
// back, writing a line every core reads. A caller without the clock
// (Record of an event that carries its instant, which skips reading it)
// computes and leaves the memo to the checks.
func (d *limDef) newWindow(at time.Time, clock int64) span {
	start, end := d.proto.Window.Bounds(at)
	w := span{start: nsOf(start), end: nsOf(end)}
	if clock != 0 && w.has(clock) {
		if old := d.win.Load(); old == nil || *old != w {
			p := new(span)
			*p = w
			d.win.Store(p)
		}
	}
	return w
}

// limitFor says whose key limitInto writes into a definition.
type limitFor uint8

const (
	forOwner   limitFor = iota // a team's or an organisation's: shared as it is
	forOwn                     // a key's own: Key is the key
	forDefault                 // a default: Subject is the key
)

// defKey is what makes two definitions the same: every field of the proto
// but the raises and alerts (a limit with either is not shared).
type defKey struct {
	team, org string
	for_      limitFor
	scope     Scope
	value     string
	metric    Metric
	max       int64
	window    Window
	enabled   bool
}

// sharedRoute is what makes two routes the same.
type sharedRoute struct {
	names *routeNames
	idx   string // the indexes' bytes
	usd   bool
}

type interner struct {
	mu     sync.Mutex
	defs   map[defKey]*limDef
	pairs  map[[2]string]*routeNames
	routes map[sharedRoute]*route
	metas  map[keyMeta]*keyMeta
}

func (in *interner) init() {
	in.defs = make(map[defKey]*limDef)
	in.pairs = make(map[[2]string]*routeNames)
	in.routes = make(map[sharedRoute]*route)
	in.metas = make(map[keyMeta]*keyMeta)
}

// hold returns m's value for k under mu, else v, which it keeps there
// (starting m over once it holds maxInterned).
func hold[K comparable, V any](mu *sync.Mutex, m map[K]V, k K, v V) V {
	mu.Lock()
	defer mu.Unlock()
	if cur, ok := m[k]; ok {
		return cur
	}
	if len(m) >= maxInterned {
		clear(m)
	}
	m[k] = v
	return v
}

// def is l's definition (l as Effective gives it: a default's Subject is
// the key it applies to).
func (in *interner) def(l *Limit) *limDef {
	d := &limDef{proto: *l}
	d.proto.ID, d.proto.Subject = "", ""
	switch {
	case l.Key != "":
		d.for_, d.proto.Key = forOwn, ""
	case l.IsDefault():
		d.for_ = forDefault
	}
	if len(l.Raises) > 0 || len(l.Alerts) > 0 {
		return d
	}
	k := defKey{team: l.Team, org: l.Org, for_: d.for_, scope: l.Scope, value: l.ScopeValue, metric: l.Metric,
		max: l.Max, window: l.Window, enabled: l.Enabled}
	return hold(&in.mu, in.defs, k, d)
}

// routeNames are provider and model as sent, validated and normalised.
func (in *interner) routeNames(provider, model string) (*routeNames, error) {
	in.mu.Lock()
	n, ok := in.pairs[[2]string{provider, model}]
	in.mu.Unlock()
	if ok {
		return n, nil
	}
	// Cloned: a request's names may point into its body, which the names
	// must not keep alive.
	provider, model = strings.Clone(provider), strings.Clone(model)
	n = &routeNames{rawProvider: provider, rawModel: model, provider: strings.TrimSpace(provider), model: strings.TrimSpace(model)}
	if err := checkNames("provider", n.provider, "model", n.model); err != nil {
		return nil, err
	}
	n.norm = NormalizeModel(n.model)
	return hold(&in.mu, in.pairs, [2]string{provider, model}, n), nil
}

// route is the route to names deciding on the limits idx.
func (in *interner) route(names *routeNames, idx []int32, usd bool) *route {
	b := make([]byte, 0, 4*len(idx))
	for _, i := range idx {
		b = binary.LittleEndian.AppendUint32(b, uint32(i))
	}
	k := sharedRoute{names: names, idx: string(b), usd: usd}
	return hold(&in.mu, in.routes, k, &route{routeNames: names, idx: idx, usd: usd})
}

// meta is m, held once.
func (in *interner) meta(m keyMeta) *keyMeta {
	return hold(&in.mu, in.metas, m, &m)
}
