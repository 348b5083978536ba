package budget

import (
	"os"
	"time"
)

// JournalSync reports, for tests, how many fdatasyncs t's lease journal
// made and whether everything appended to its current generation is
// known on disk.
func JournalSync(t *Tracker) (syncs int64, synced bool) {
	js := t.leases.journals
	if js == nil || js.cur == nil {
		return js.fsyncs(), false
	}
	g := js.cur
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	return js.fsyncs(), g.synced == g.size.Load()
}

// SetGenMax sets the size at which journal generations rotate, for a
// test, and returns the old one.
func SetGenMax(n int64) int64 {
	old := genMax
	genMax = n
	return old
}

// JournalGens is how many journal generations t has started.
func JournalGens(t *Tracker) int { return t.leases.journals.n }

// What the memory tests look at inside a Tracker.

// SharedEntries reports whether the cached entries of keys a and b hold
// the same definitions (pointer for pointer) and the same route set.
func SharedEntries(t *Tracker, a, b string) (defs, routes bool) {
	ea, oka := t.limits.Peek(a)
	eb, okb := t.limits.Peek(b)
	if !oka || !okb || len(ea.Value.lims) != len(eb.Value.lims) {
		return false, false
	}
	defs = true
	for i := range ea.Value.lims {
		defs = defs && ea.Value.lims[i].def == eb.Value.lims[i].def
	}
	return defs, ea.Value.meta.Load() == eb.Value.meta.Load()
}

// WriterMemory is how many windows the writer keeps a stored mark for in
// its own map (not on a cached counter), and how many (limit, subject)
// pairs it keeps the latest row of. Read it only while the writer is idle
// (after Flush).
func WriterMemory(t *Tracker) (stored, latest int) {
	return len(t.w.mem.stored), len(t.w.mem.latest)
}

// WriterWindows is how many windows the writer's memory holds, and the
// most it held since its maps were last rebuilt (0 once rebuilt). Read it
// only while the writer is idle (after Flush).
func WriterWindows(t *Tracker) (now, sinceRebuilt int) {
	return len(t.w.mem.windows), t.w.burst
}

// MaxBatchKeys is the most distinct keys the writer puts in one batch.
const MaxBatchKeys = maxBatchKeys

// SetJournalWrite replaces the one write() of a lease journal record, for
// a test that fails it or writes part of it, and returns the old one.
func SetJournalWrite(fn func(f *os.File, p []byte) (int, error)) func(f *os.File, p []byte) (int, error) {
	old := writeRecord
	writeRecord = fn
	return old
}

// SetJournalSync replaces the fdatasync of a lease journal generation,
// for a test that fails it, and returns the old one.
func SetJournalSync(fn func(f *os.File) error) func(f *os.File) error {
	old := syncRecords
	syncRecords = fn
	return old
}

// SetJournalPause sets how long leases stay off after a journal failure,
// and returns the old pause.
func SetJournalPause(d time.Duration) time.Duration {
	old := journalPause
	journalPause = d
	return old
}

// SetPlanFault makes tr's writer plan as a wrong skip rule would (see
// Tracker.planFault) until undo.
func SetPlanFault(tr *Tracker) (undo func()) {
	tr.planFault.Store(true)
	return func() { tr.planFault.Store(false) }
}

// SetBatchHook makes tr's writer call f as each try of a batch is about
// to write its plan and once it has, until the returned function undoes
// it. f runs on the writer goroutine: what it sees live is the batch's.
func SetBatchHook(tr *Tracker, f func()) (undo func()) {
	tr.batchHook.Store(&f)
	return func() { tr.batchHook.Store(nil) }
}
