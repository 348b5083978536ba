package budget

import (
	"context"
	"sync"
	"sync/atomic"
)

// writerState is owned by the writer goroutine: the limits it resolved,
// valid while the store's limits version stays the same.
type writerState struct {
	unwritten atomic.Int64 // events given up on when Close's context ended
	errMu     sync.Mutex
	err       error         // the last write error
	sig       chan struct{} // closed and replaced at each failed attempt
	streak    atomic.Int64  // failed attempts since the last commit

	version int64
	// byWho is what applies to a (key, team, org): the key's limits and
	// defaults, the team's and the organisation's; placement is each
	// key's team and organisation. Both are valid at version.
	byWho     map[[3]string][]Limit
	placement map[string][2]string
	// cached is what applies to a (key, team, org) whose limits the
	// checks' cache holds, written out of it for the batches (which keep
	// pointers to the limits); a few keys' worth, since writing them out
	// again costs no store read.
	cached map[[3]string][]Limit

	prices *priceSnap

	mem   memory // the store's state as of the writer's last commit
	burst int    // the most windows mem held since its maps were rebuilt (shrinkMemory)
	// visited is how many windows the last batch put in memory: the next
	// batch sizes its visited slice by it (batch.visit), where appending
	// from nothing copied a full batch's windows five times over.
	visited int

	leaseLook    int64              // when the leases were last looked after (Unix nanos)
	leaseCharges []*leasedRes       // carved reservations expired under ExpireCharge, to charge
	routeSeen    map[routeKey]int64 // when routes without a lease last reserved (routeWarm)
}

func (w *writerState) init() {
	w.version = -1 // unknown: the first batch reads the versions and the prune horizon
	w.byWho = make(map[[3]string][]Limit)
	w.cached = make(map[[3]string][]Limit)
	w.placement = make(map[string][2]string)
	w.mem.forget()
}

// fail records a failed write attempt and wakes every waiter.
func (w *writerState) fail(err error) {
	w.errMu.Lock()
	w.err = err
	w.streak.Add(1)
	if w.sig != nil {
		close(w.sig)
	}
	w.sig = make(chan struct{})
	w.errMu.Unlock()
}

// failSignal is closed at the next failed write attempt.
func (w *writerState) failSignal() <-chan struct{} {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	if w.sig == nil {
		w.sig = make(chan struct{})
	}
	return w.sig
}

func (w *writerState) lastErr() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.err
}

const maxWriterKeys = 10_000

// maxCachedOut bounds writerState.cached.
const maxCachedOut = 1024

// forgetLimits drops the resolved limits and placements.
func (w *writerState) forgetLimits() {
	clear(w.byWho)
	clear(w.cached)
	clear(w.placement)
}

// place fills who's team and organisation from its key's placement when
// it carries neither (an event or request decided now); it runs on the
// writer goroutine only.
func (t *Tracker) place(ctx context.Context, tx Tx, who *Who) error {
	if who.Team != "" || who.Org != "" {
		return nil
	}
	w := &t.w
	if e, ok := t.limits.Peek(who.Key); ok && e.Value.version() == w.version {
		who.Team, who.Org = e.Value.team(), e.Value.org()
		return nil
	}
	if p, ok := w.placement[who.Key]; ok {
		who.Team, who.Org = p[0], p[1]
		return nil
	}
	team, org, err := tx.Placement(ctx, who.Key)
	if err != nil {
		return err
	}
	w.placement[who.Key] = [2]string{team, org}
	who.Team, who.Org = team, org
	return nil
}

// limitsFor resolves the limits that may apply to who (placed) inside tx:
// from memory, which each batch's load keeps only while the limits version
// stays the one they were read at, else from the store. A limit another
// process created is therefore never skipped. It runs on the writer
// goroutine only.
func (t *Tracker) limitsFor(ctx context.Context, tx Tx, who *Who) ([]Limit, error) {
	w := &t.w
	k := [3]string{who.Key, who.Team, who.Org}
	if ls, ok := w.cached[k]; ok {
		return ls, nil
	}
	if ls, ok := w.byWho[k]; ok {
		return ls, nil
	}
	// The checks' cache is usually warm and current: no store read.
	if e, ok := t.limits.Peek(who.Key); ok && e.Value.version() == w.version && e.Value.team() == who.Team && e.Value.org() == who.Org {
		if len(w.cached) >= maxCachedOut {
			clear(w.cached)
		}
		ls := e.Value.limits()
		w.cached[k] = ls
		return ls, nil
	}
	ls, err := loadLimits(ctx, tx, who.Key, who.Team, who.Org)
	if err != nil {
		return nil, err
	}
	w.byWho[k] = ls
	return ls, nil
}

// loadLimits reads what may apply to key charged to team and org: its own
// limits, the defaults counted for it, the team's and the organisation's.
func loadLimits(ctx context.Context, tx Tx, key, team, org string) ([]Limit, error) {
	ls, err := tx.Limits(ctx, key)
	if err != nil {
		return nil, err
	}
	for _, o := range [2]struct {
		lv   Level
		name string
	}{{LevelTeam, team}, {LevelOrg, org}} {
		if o.name == "" {
			continue
		}
		more, err := tx.OwnedLimits(ctx, o.lv, o.name)
		if err != nil {
			return nil, err
		}
		ls = append(ls, more...)
	}
	return Effective(ls, key), nil
}
