package main

import (
	"context"
	"fmt"
)

const releaseHelp = `usage: budget release [--db PATH] ID

Frees the holds and leases of reservation ID without recording usage, for a
request that failed. Releasing a reservation that expired but was never
settled is fine (exit 0). Exit 4 when ID is unknown or already settled.

`

func (m *Main) runRelease(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("release")
	dsn := m.dbFlag(fs)
	pos, err := m.parseArgs(fs, releaseHelp, args)
	if err != nil {
		return err
	}
	id, err := reservationID("release", pos)
	if err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	if err := db.Release(ctx, id); err != nil {
		return err
	}
	_, err = fmt.Fprintf(m.Stdout, "%s released\n", id)
	return err
}
