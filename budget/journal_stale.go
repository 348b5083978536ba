package budget

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Stale journals: lease names in the journal directory whose rows are no
// longer live, left by a process that died before removing them. The
// usual one is a PostgreSQL replica's: a replica on another machine
// recovered its lease without the journal (charging the rest of the
// lease, unjournaledEvents), so nothing on this machine removed the name.
// Every Recover (at New and each sweep) lists the directory and settles
// the names of rows that ended: where the lease was charged whole, the
// journal adds what its commits exceed their estimates by, as
// <id>:late (the whole charge covered each at its estimate), unless their
// events are already in the history; then the name goes. A name whose row
// is gone altogether (past SettledRetention) goes with nothing charged:
// nothing is left to tell its key; but only once it has been seen without
// a row for staleRecheck, as a lease's name is linked before its row is
// committed (linkLease): a name without a row may be a lease being
// created. A live row's name is its owner's (or a later sweep's, once it
// expires).

const (
	// staleRecheck is how often a lease name found with a live row is
	// looked at again: settling a stale journal is never urgent (its
	// lease was charged at least what it served).
	staleRecheck = time.Minute
	// maxStaleChecked bounds the names remembered (staleChecked and
	// rowless).
	maxStaleChecked = 100_000
)

// staleOf appends the lease names in the journal directory that are not
// this Tracker's leases (at most maxRecover), to be read with o's expired
// reservations and settled if their rows ended.
func (b *batch) staleOf(o *op, ids []string) []string {
	dir := b.t.cfg.LeaseJournal
	if dir == "" {
		return ids
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			b.t.reportErr(fmt.Errorf("budget: lease journal: %w", err))
		}
		return ids
	}
	own := make(map[string]bool)
	for _, l := range b.t.leases.all() {
		own[l.id] = true
	}
	lt := &b.t.leases
	if lt.staleChecked == nil || len(lt.staleChecked) > maxStaleChecked {
		lt.staleChecked = make(map[string]int64)
	}
	if lt.rowless == nil || len(lt.rowless) > maxStaleChecked {
		lt.rowless = make(map[string]int64)
	}
	now := o.at.UnixNano()
	if b.stale == nil {
		b.stale = make(map[*op][]string)
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), journalSuffix)
		if !ok || !isLease(id) || own[id] {
			continue
		}
		// Another live process's lease is read (and its row locked) once
		// per staleRecheck, not at every sweep.
		if at, seen := lt.staleChecked[id]; seen && now-at < int64(staleRecheck) && now >= at {
			continue
		}
		if len(b.stale[o]) >= maxRecover {
			break
		}
		lt.staleChecked[id] = now
		ids = append(ids, id)
		b.stale[o] = append(b.stale[o], id)
	}
	return ids
}

// needStale reads, for each of o's stale names whose row ended after a
// whole charge, the late events its journal adds, and needs their
// windows.
func (b *batch) needStale(ctx context.Context, tx Tx, o *op, n *needs) error {
	for _, id := range b.stale[o] {
		r := b.t.w.mem.res[id]
		if r == nil || b.missing[id] || r.State == ReservationLive {
			continue
		}
		whole, err := storedEvent(ctx, tx, &Usage{Key: r.Key, RequestID: r.ID + ":0", At: r.At})
		if err != nil || whole == nil {
			return err
		}
		entries, err := readJournal(b.t.cfg.LeaseJournal, id, &b.jfiles)
		if errors.Is(err, errNoJournal) {
			continue // removed meanwhile
		}
		if err != nil {
			return err
		}
		for _, ev := range journalEvents(r, entries) {
			e := entryOf(entries, ev.RequestID)
			if e == nil || e.commit == nil {
				continue // in flight: the whole charge covered it at its estimate
			}
			if got, err := storedEvent(ctx, tx, &ev); err != nil || got != nil {
				if err != nil {
					return err
				}
				continue // its owner wrote it before the lease was charged
			}
			late := lateUsage(ev, e.est)
			if late.Billable() == 0 {
				continue
			}
			if b.staleLate == nil {
				b.staleLate = make(map[string][]Usage)
			}
			b.staleLate[id] = append(b.staleLate[id], late)
			who := late.Who()
			if err := b.needEvent(ctx, tx, n, &who, late.Provider, late.Model, late.At); err != nil {
				return err
			}
		}
	}
	return nil
}

// entryOf is the journal entry of reservation id.
func entryOf(entries []*journalEntry, id string) *journalEntry {
	for _, e := range entries {
		if e.id == id {
			return e
		}
	}
	return nil
}

// decideStale writes the late events of o's stale names and has the names
// of the rows that ended removed once the batch lands.
func (b *batch) decideStale(ctx context.Context, tx Tx, o *op) error {
	rowless := b.t.leases.rowless
	for _, id := range b.stale[o] {
		r := b.t.w.mem.res[id]
		if r != nil && !b.missing[id] && r.State == ReservationLive {
			delete(rowless, id)
			continue
		}
		if r == nil || b.missing[id] {
			// Perhaps a lease being created (its name comes first): it
			// goes once it has stayed without a row for staleRecheck.
			now := o.at.UnixNano()
			since, seen := rowless[id]
			if !seen || now < since {
				rowless[id] = now
				continue
			}
			if now-since < int64(staleRecheck) {
				continue
			}
		}
		delete(rowless, id)
		for _, late := range b.staleLate[id] {
			if b.stored(late) {
				continue
			}
			if err := b.event(ctx, tx, late, o); err != nil {
				return err
			}
		}
		b.recoveredLeases = append(b.recoveredLeases, id)
	}
	return nil
}
