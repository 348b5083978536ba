package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tokenbudget/tokenbudget/budget"
)

const recoverHelp = `usage: budget recover [--lease-journal DIR] [--json]

Frees the holds and leases of reservations that have expired (by the real
clock) and marks them expired: they stay committable for a day. A
reservation made with the charge expiry policy (the proxy's) is first
charged its estimate, once. Also deletes settled reservations older than
that. Safe to run while other processes use the database. Prints what it
did, or {"released_reservations", "released_leases", "charged_reservations"}
with --json.

The leases of a dead 'budget proxy' are charged from their journals:
exactly what it served. Give --lease-journal DIR when the proxy was given
one (the default is where the proxy looks by default: FILE.leases beside a
SQLite database, on PostgreSQL $XDG_STATE_HOME/tokenbudget/leases/HASH).
A lease whose journal is not there is charged whole (the rest of the
lease), with a warning on stderr naming it.

`

func (m *Main) runRecover(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("recover")
	dsn := m.dbFlag(fs)
	journal := fs.String("lease-journal", "", "`directory` of the lease journals of the processes using the database (default: where budget proxy keeps them by default)")
	asJSON := fs.Bool("json", false, `print {"released_reservations", "released_leases", "charged_reservations"}`)
	pos, err := m.parseArgs(fs, recoverHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("recover", pos); err != nil {
		return err
	}
	var (
		mu       sync.Mutex
		warnings []string
	)
	db, err := m.openDB(ctx, *dsn, dbOptions{tune: func(cfg *budget.Config) {
		if *journal != "" {
			cfg.LeaseJournal = *journal
		}
		cfg.OnError = func(err error) {
			if errors.Is(err, budget.ErrLeaseUnjournaled) {
				mu.Lock()
				warnings = append(warnings, err.Error())
				mu.Unlock()
			}
		}
	}})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	res, err := db.Recover(ctx, m.Now())
	mu.Lock()
	for _, w := range warnings {
		fmt.Fprintf(m.Stderr, "budget recover: warning: %s\n", w)
	}
	mu.Unlock()
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, struct {
			ReleasedReservations int64 `json:"released_reservations"`
			ReleasedLeases       int64 `json:"released_leases"`
			ChargedReservations  int64 `json:"charged_reservations"`
		}{res.ReleasedReservations, res.ReleasedLeases, res.ChargedReservations})
	}
	charged := ""
	if res.ChargedReservations > 0 {
		charged = fmt.Sprintf(", charged %d of them their estimate", res.ChargedReservations)
	}
	_, err = fmt.Fprintf(m.Stdout, "released %d expired reservations (%d concurrency leases)%s; deleted %d settled ones past retention\n",
		res.ReleasedReservations, res.ReleasedLeases, charged, res.Deleted)
	return err
}
