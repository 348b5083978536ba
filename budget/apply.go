package budget

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenbudget/tokenbudget/cache"
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
	checked bool // version confirmed inside the current transaction
	byKey   map[string][]Limit

	prices        *priceSnap
	pricesChecked bool  // prices version confirmed inside the current transaction
	unpriced      int64 // this attempt's events written unpriced under a usd limit
}

func (w *writerState) init() { w.byKey = make(map[string][]Limit) }

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

// limitsFor resolves key's limits inside tx: from memory when the limits
// version read in this transaction matches the one they were read at, else
// from the store. A limit another process created is therefore never
// skipped. It runs on the writer goroutine only.
func (t *Tracker) limitsFor(ctx context.Context, tx Tx, key string) ([]Limit, error) {
	w := &t.w
	if !w.checked {
		v, err := tx.LimitsVersion(ctx)
		if err != nil {
			return nil, err
		}
		if v != w.version || len(w.byKey) > maxWriterKeys {
			clear(w.byKey)
			w.version = v
		}
		w.checked = true
	}
	// The checks' cache is usually warm and current: share it.
	if e, ok := t.limits.Peek(key); ok && e.Value.version == w.version {
		return e.Value.limits, nil
	}
	if ls, ok := w.byKey[key]; ok {
		return ls, nil
	}
	ls, err := tx.Limits(ctx, key)
	if err != nil {
		return nil, err
	}
	ls = Effective(ls, key)
	w.byKey[key] = ls
	return ls, nil
}

// windowDelta is what one batch adds to one limit window.
type windowDelta struct {
	key        cache.Key
	limit      *Limit
	start, end time.Time
	delta      int64
}

// applyUsage appends events to the history and adds the coalesced deltas of
// the new (non-duplicate) ones to every matching limit's counters, creating
// rows seeded from the history and logging rollovers as needed. Disabled
// limits count too: only enforcement stops.
func (t *Tracker) applyUsage(ctx context.Context, tx Tx, events []Usage, now time.Time) ([]bool, []windowDelta, error) {
	if len(events) == 0 {
		return nil, nil, nil
	}
	if err := t.priceEvents(ctx, tx, events); err != nil {
		return nil, nil, err
	}
	inserted, err := tx.InsertUsage(ctx, events)
	if err != nil {
		return nil, nil, err
	}
	var deltas []windowDelta
	index := make(map[cache.Key]int)
	for i := range events {
		if !inserted[i] {
			continue
		}
		e := &events[i]
		ls, err := t.limitsFor(ctx, tx, e.Key)
		if err != nil {
			return nil, nil, err
		}
		model := NormalizeModel(e.Model)
		if e.Unpriced { // priceEvents set it only under a dollar limit
			t.w.unpriced++
		}
		for j := range ls {
			l := &ls[j]
			if l.Metric == MetricConcurrent || !l.Applies(e.Key, e.Provider, model) {
				continue
			}
			start, end := l.Window.Bounds(e.At)
			k := cache.Key{LimitID: l.ID, Subject: l.Subject, Start: start.UnixNano()}
			n, ok := index[k]
			if !ok {
				n = len(deltas)
				index[k] = n
				deltas = append(deltas, windowDelta{key: k, limit: l, start: start, end: end})
			}
			// Counters saturate at MaxTokens, past any limit, rather than
			// overflow (contract section 1: sums are checked).
			deltas[n].delta = min(deltas[n].delta+e.Amount(l.Metric), MaxTokens)
		}
	}
	if len(deltas) == 0 {
		return inserted, nil, nil
	}
	// A fixed order of row updates keeps concurrent writers on a
	// row-locking store (PostgreSQL) from deadlocking each other.
	slices.SortFunc(deltas, func(a, b windowDelta) int {
		return cmp.Or(strings.Compare(a.key.LimitID, b.key.LimitID), strings.Compare(a.key.Subject, b.key.Subject),
			cmp.Compare(a.key.Start, b.key.Start))
	})
	adds := make([]CounterDelta, len(deltas))
	for i, d := range deltas {
		adds[i] = CounterDelta{LimitID: d.limit.ID, Subject: d.limit.Subject, WindowStart: d.start, Delta: d.delta}
	}
	found, err := tx.AddCounters(ctx, adds)
	if err != nil {
		return nil, nil, err
	}
	for i := range deltas {
		if found[i] {
			continue
		}
		d := &deltas[i]
		if err := createCounter(ctx, tx, d.limit, d.start, d.end, d.delta, now); err != nil {
			return nil, nil, err
		}
	}
	return inserted, deltas, nil
}

// createCounter creates a limit window's missing counter row from the
// history (which already holds this transaction's events, so delta is
// inside the seed; it is added only if a concurrent transaction created the
// row first). Creating the row of a window later than every row the limit
// has logs a rollover when the window before it had usage (contract
// section 8).
func createCounter(ctx context.Context, tx Tx, l *Limit, start, end time.Time, delta int64, now time.Time) error {
	latest, has, err := tx.LatestCounterStart(ctx, l.ID, l.Subject)
	if err != nil {
		return err
	}
	created, err := tx.CreateCounter(ctx, l, start, end, delta)
	if err != nil || !created || has && !start.After(latest) {
		return err
	}
	ps, pe := l.Window.Bounds(start.Add(-1))
	prev, err := tx.SumUsage(ctx, l, ps, pe)
	if err != nil || prev == 0 {
		return err
	}
	return tx.InsertRollover(ctx, Rollover{LimitID: l.ID, Subject: l.Subject, PrevWindowStart: ps, PrevUsed: prev, WindowStart: start, LoggedAt: now})
}
