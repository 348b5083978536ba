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
	byKey   map[string][]Limit

	prices *priceSnap

	mem memory // the store's state as of the writer's last commit
}

func (w *writerState) init() {
	w.byKey = make(map[string][]Limit)
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

// limitsFor resolves key's limits inside tx: from memory, which each
// batch's load keeps only while the limits version stays the one they were
// read at, else from the store. A limit another process created is
// therefore never skipped. It runs on the writer goroutine only.
func (t *Tracker) limitsFor(ctx context.Context, tx Tx, key string) ([]Limit, error) {
	w := &t.w
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
