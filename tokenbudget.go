// Package tokenbudget wires a token budget Tracker to its database in one
// call. The domain lives in package budget, the stores in store (SQLite) and
// its subpackages; this package only embeds the SQLite schema and picks the
// store named by a DSN.
package tokenbudget

import (
	"context"
	_ "embed"
	"errors"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/postgres"
	"github.com/tokenbudget/tokenbudget/store/sqlite"
)

// SQLiteSchema is the current SQLite schema, applied by sqlite.Open.
//
//go:embed schema.sql
var SQLiteSchema string

// Options configure Open. The zero value opens an existing SQLite file with
// budget.DefaultConfig.
type Options struct {
	// Create makes a missing SQLite database (mode 0600), and gives an empty
	// file the schema; without it a missing or empty file is refused. (Optional.)
	Create bool
	// Durable fsyncs every commit (synchronous=FULL) and makes Record wait
	// for the commit holding its event. (Optional.)
	Durable bool
	// Config tunes the Tracker. (Optional; default budget.DefaultConfig().)
	Config *budget.Config
}

// DB is a Tracker together with the store it owns; Close closes both.
type DB struct {
	*budget.Tracker
	store budget.Store
}

// Close flushes and stops the tracker, then closes the store.
func (db *DB) Close(ctx context.Context) error {
	return errors.Join(db.Tracker.Close(ctx), db.store.Close())
}

// OpenStore opens the store a DSN names: a SQLite file path (the default),
// or a PostgreSQL database for a postgres:// or postgresql:// URL. Create
// and Durable apply to SQLite only: a PostgreSQL database must exist (its
// tables are created on first open) and commits as its server is configured
// to (durable by default).
func OpenStore(ctx context.Context, dsn string, opts Options) (budget.Store, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return postgres.Open(ctx, dsn, postgres.Options{})
	}
	return sqlite.Open(ctx, dsn, SQLiteSchema, sqlite.Options{Create: opts.Create, Durable: opts.Durable})
}

// Open opens the database named by dsn and starts a Tracker on it.
func Open(ctx context.Context, dsn string, opts Options) (*DB, error) {
	s, err := OpenStore(ctx, dsn, opts)
	if err != nil {
		return nil, err
	}
	cfg := budget.DefaultConfig()
	if opts.Config != nil {
		cfg = *opts.Config
	}
	cfg.Durable = cfg.Durable || opts.Durable
	if cfg.LeaseJournal == "" && !strings.Contains(dsn, "://") && !strings.HasPrefix(dsn, ":memory:") && !strings.HasPrefix(dsn, "file:") {
		// Beside the SQLite file, where every process opening it looks:
		// any of them recovers a dead one's leases from their journals.
		cfg.LeaseJournal = dsn + ".leases"
	}
	t, err := budget.New(ctx, s, cfg)
	if err != nil {
		s.Close()
		return nil, err
	}
	return &DB{Tracker: t, store: s}, nil
}

// RedactDSN hides the password of a DSN (a URL or PostgreSQL's
// keyword/value form), for messages and logs; a file path is unchanged.
func RedactDSN(dsn string) string { return postgres.Redact(dsn) }
