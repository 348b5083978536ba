package main

import (
	"context"
	"fmt"
)

const recoverHelp = `usage: budget recover [--json]

Frees the holds and leases of reservations that have expired (by the real
clock) and marks them expired: they stay committable for a day. A
reservation made with the charge expiry policy (the proxy's) is first
charged its estimate, once. Also deletes settled reservations older than
that. Safe to run while other processes use the database. Prints what it
did, or {"released_reservations", "released_leases", "charged_reservations"}
with --json.

`

func (m *Main) runRecover(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("recover")
	dsn := m.dbFlag(fs)
	asJSON := fs.Bool("json", false, `print {"released_reservations", "released_leases", "charged_reservations"}`)
	pos, err := m.parseArgs(fs, recoverHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("recover", pos); err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	res, err := db.Recover(ctx, m.Now())
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
