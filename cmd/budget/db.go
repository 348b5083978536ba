package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
)

// closeTimeout bounds how long a command waits, after its work or an
// interrupt, for the tracker to write what it has queued.
const closeTimeout = 30 * time.Second

// failedCloseTimeout is closeTimeout for a command that already failed on
// an unwritable database.
const failedCloseTimeout = 100 * time.Millisecond

// dbFlag registers --db on fs. Its default is $BUDGET_DB, else ./budget.db.
func (m *Main) dbFlag(fs *flag.FlagSet) *string {
	def := m.Getenv("BUDGET_DB")
	if def == "" {
		def = "budget.db"
	}
	return fs.String("db", def, "database `path` or postgres:// DSN ($BUDGET_DB sets the default)")
}

// isPostgres reports whether dsn selects the PostgreSQL backend.
func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// sqliteMissing reports whether dsn names a SQLite file that does not exist.
func sqliteMissing(dsn string) bool {
	if isPostgres(dsn) || dsn == "" {
		return false
	}
	_, err := os.Stat(dsn)
	return errors.Is(err, os.ErrNotExist)
}

// dbOptions say how a command opens its database.
type dbOptions struct {
	// create makes a missing SQLite file: only commands that add state.
	create bool
	// now is the tracker's clock. (Optional; default Main.Now.)
	now func() time.Time
	// tune adjusts the tracker's configuration. (Optional.)
	tune func(*budget.Config)
}

// openDB opens the database a command works on. A short-lived command runs
// no background sweep: read-only commands must write nothing.
func (m *Main) openDB(ctx context.Context, dsn string, o dbOptions) (*tokenbudget.DB, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, budget.Invalid("db", dsn, "a database path is required")
	}
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	cfg.Now = m.Now
	if isPostgres(dsn) {
		// Where budget proxy journals its leases by default, so that
		// 'budget recover' settles a dead proxy's leases of this machine
		// exactly (tokenbudget.Open looks beside a SQLite file itself).
		cfg.LeaseJournal, _ = m.defaultLeaseJournal(dsn)
	}
	if o.now != nil {
		cfg.Now = o.now
	}
	if o.tune != nil {
		o.tune(&cfg)
	}
	db, err := tokenbudget.Open(ctx, dsn, tokenbudget.Options{Create: o.create, Config: &cfg})
	if err != nil {
		if isPostgres(dsn) {
			// The store redacts already; never let a password through.
			return nil, &redacted{msg: strings.ReplaceAll(err.Error(), dsn, tokenbudget.RedactDSN(dsn)), err: err}
		}
		return nil, err
	}
	return db, nil
}

// closeDB closes db, waiting at most closeTimeout for queued writes even
// when ctx was cancelled, and joins the error into *errp. When the command
// already failed because the database cannot be written (read-only, disk
// full), waiting out the writer's retries would only delay the same error.
func closeDB(ctx context.Context, db *tokenbudget.DB, errp *error) {
	timeout := closeTimeout
	if *errp != nil && db.Health() != nil {
		timeout = failedCloseTimeout
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := db.Close(cctx); err != nil {
		*errp = errors.Join(*errp, fmt.Errorf("close database: %w", err))
	}
}

// fixedClock is a clock that always reads t: the tracker of a command that
// takes --at sees the instant it was given.
func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

// redacted is an error whose message hides a DSN's password; errors.Is and
// errors.As still see the error it wraps.
type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }
