package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// proxyLeases sets cfg's leases for the proxy of o: on by default in
// reserve mode (--leases=false turns them off), with their journal in
// --lease-journal, else beside a SQLite file (FILE.leases) or, on
// PostgreSQL, in the user's state directory under a name derived from the
// database's identity, so that every replica of the machine run by the same
// user shares it and any of them recovers the others' leases. Where no
// journal directory can be had by default (an in-memory SQLite database, no
// home directory, one that cannot be made), the proxy keeps the store path
// and says why in one line of log. An explicit --lease-journal that cannot
// be made is an error (budget.New's).
//
// The journal directory is set even with leases off: this process's sweep
// then settles the journals a dead leasing process left there.
func (m *Main) proxyLeases(o proxyOptions, cfg *budget.Config) {
	dir, why := o.leaseJournal, ""
	if dir == "" {
		dir, why = m.defaultLeaseJournal(o.dsn)
	}
	cfg.LeaseJournal = dir
	if !o.leases || o.mode != proxy.ModeReserve {
		return
	}
	if dir == "" {
		o.log.Warn("budget proxy: leases off, reserve mode takes the store path: "+why, "db", tokenbudget.RedactDSN(o.dsn))
		return
	}
	if o.leaseJournal == "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			o.log.Warn("budget proxy: leases off, reserve mode takes the store path: the lease journal directory cannot be made", "dir", dir, "err", err)
			return
		}
	}
	cfg.Leases = true
}

// defaultLeaseJournal is where the leases of dsn's database are journaled
// when --lease-journal is not given, or "" and why there is none.
func (m *Main) defaultLeaseJournal(dsn string) (dir, why string) {
	switch {
	case isPostgres(dsn):
		state := m.Getenv("XDG_STATE_HOME")
		if state == "" {
			home := m.Getenv("HOME")
			if home == "" {
				return "", "no $XDG_STATE_HOME or $HOME for a PostgreSQL database's lease journal (give --lease-journal DIR)"
			}
			state = filepath.Join(home, ".local", "state")
		}
		return filepath.Join(state, "tokenbudget", "leases", postgresIdentity(dsn)), ""
	case strings.HasPrefix(dsn, ":memory:") || strings.HasPrefix(dsn, "file:"):
		// No file beside which every process on the database would look.
		return "", "the SQLite database " + dsn + " has no file path to keep the lease journal beside"
	}
	return dsn + ".leases", "" // where every process on the file looks
}

// postgresIdentity names a PostgreSQL database without its password: a
// hash of its hosts and ports, database, user and search_path, so that
// replicas whose DSNs differ only in options (sslmode, timeouts, the
// password) share one journal directory, and two databases never do.
func postgresIdentity(dsn string) string {
	id := "dsn " + tokenbudget.RedactDSN(dsn)
	if c, err := pgconn.ParseConfig(dsn); err == nil {
		hosts := []string{fmt.Sprintf("%s:%d", c.Host, c.Port)}
		for _, f := range c.Fallbacks {
			hosts = append(hosts, fmt.Sprintf("%s:%d", f.Host, f.Port))
		}
		slices.Sort(hosts)
		hosts = slices.Compact(hosts)
		id = fmt.Sprintf("hosts %s database %s user %s search_path %s",
			strings.Join(hosts, ","), c.Database, c.User, c.RuntimeParams["search_path"])
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:12])
}
