package budget

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
