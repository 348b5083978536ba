// Package postgres implements budget.Store on PostgreSQL through sqlx and
// the pgx stdlib driver, for gateways that run as several replicas.
//
// A DB is safe for concurrent use by goroutines, processes and hosts. Write
// transactions run at READ COMMITTED and stay exact through atomic
// statements and row locks: reserving, committing, releasing and renewing
// lock the limit rows they decide on (waits only go up one order of ids,
// see hot.go), counter deltas are buffered and added in one ordered
// `used = used + n` statement before COMMIT, new counter rows are created
// with INSERT ... ON CONFLICT. Limit definitions are guarded by a
// transaction-level advisory lock: writers hold it shared from the moment
// they read the limits version; a change to limits, raises, teams,
// organisations or key placements takes it exclusively (a statement
// trigger, which also moves the version), as does an admin write before
// it checks anything (LockDefinitions) and a prune before it moves the
// prune horizon. Alerts are logged once by a unique key and claimed with
// FOR UPDATE SKIP LOCKED (tx_alert.go).
// Serialization failures, deadlocks and lock_not_available are retried
// with backoff until the context ends; lost connections a few times, never
// after an ambiguous COMMIT. Reads run at REPEATABLE READ READ ONLY, one
// snapshot each.
//
// Statements are prepared once per connection and reused (pgx's statement
// cache). Errors and messages never show the DSN's password.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlq"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// lockClass is the first key of the limits lock ('tbud'; lockClass+1 for
// the migration lock); the second is hashtext of the schema holding the
// tables.
const lockClass = 1952609636

// Options configure Open. The zero value is usable.
type Options struct {
	// MaxConns bounds the connection pool. (Optional; default 8.)
	MaxConns int
	// ConnAttempts is how many times a transaction is tried when its
	// connection fails before it committed. (Optional; default 4.)
	ConnAttempts int
}

// DB is a budget.Store on one PostgreSQL database (the schema its DSN's
// search_path names, public by default).
type DB struct {
	sqlq.Keys // gatekey.Store, through keyTx

	name    string   // the DSN without its password
	secrets []string // what to scrub from error messages
	db      *sqlx.DB
	lockKey int32 // hashtext of the tables' schema
	opts    Options

	retries  atomic.Int64
	failures atomic.Int64
}

var _ budget.Store = (*DB)(nil)

// Open connects to the database dsn names (a postgres:// or postgresql://
// URL, or pgx's keyword/value form), applies the embedded migrations the
// database lacks, in one transaction, and refuses a schema newer than this
// build with budget.ErrSchemaTooNew. The database itself must exist.
func Open(ctx context.Context, dsn string, opts Options) (*DB, error) {
	if opts.MaxConns <= 0 {
		opts.MaxConns = 8
	}
	if opts.ConnAttempts <= 0 {
		opts.ConnAttempts = 4
	}
	d := &DB{name: Redact(dsn), secrets: secretsOf(dsn), opts: opts}
	d.Keys = sqlq.Keys{Run: d.keyTx}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		var pe *pgconn.ParseConfigError
		if errors.As(err, &pe) {
			// Its message quotes the DSN (redacted on a best-effort basis):
			// keep only what follows, the cause.
			text := pe.Error()
			if i := strings.Index(text, "`: "); i >= 0 {
				text = text[i+3:]
			}
			err = errors.New(text)
		}
		return nil, d.scrub(fmt.Errorf("open %s: invalid PostgreSQL DSN: %w", d.name, err))
	}
	d.db = sqlx.NewDb(stdlib.OpenDB(*cfg), "pgx")
	d.db.SetMaxOpenConns(opts.MaxConns)
	d.db.SetMaxIdleConns(opts.MaxConns)
	d.db.SetConnMaxIdleTime(5 * time.Minute)
	if err := d.db.PingContext(ctx); err != nil {
		d.db.Close()
		return nil, d.scrub(fmt.Errorf("open %s: %w", d.name, err))
	}
	if err := d.migrate(ctx); err != nil {
		d.db.Close()
		return nil, d.scrub(fmt.Errorf("open %s: %w", d.name, err))
	}
	if err := d.db.GetContext(ctx, &d.lockKey, `SELECT hashtext(n.nspname) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'limits'::regclass`); err != nil {
		d.db.Close()
		return nil, d.scrub(fmt.Errorf("open %s: find the limits table: %w", d.name, err))
	}
	return d, nil
}

// SchemaVersion is the schema version this build writes and reads.
func SchemaVersion() int { return len(migrations()) }

// migrations lists the embedded migration scripts in order; applying
// migrations()[i] moves a schema from version i to i+1.
func migrations() []string {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		panic(err)
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, n := range names {
		b, err := migrationFS.ReadFile(n)
		if err != nil {
			panic(err)
		}
		out[i] = string(b)
	}
	return out
}

func (d *DB) migrate(ctx context.Context) error {
	steps := migrations()
	// Fast path: a current schema needs no lock and no write.
	var exists bool
	if err := d.db.GetContext(ctx, &exists, `SELECT to_regclass('schema_version') IS NOT NULL`); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if exists {
		v, err := d.readVersion(ctx, d.db)
		if err != nil {
			return err
		}
		if v > len(steps) {
			return fmt.Errorf("%w: it has version %d, this build knows up to %d", budget.ErrSchemaTooNew, v, len(steps))
		}
		if v == len(steps) {
			return nil
		}
	}
	return d.runSQL(ctx, false, func(x *sqlx.Tx) error {
		// One migrator per schema at a time; the others wait and then find
		// the work done.
		if _, err := x.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(COALESCE(current_schema(), '')))`, lockClass+1); err != nil {
			return fmt.Errorf("lock schema for migration: %w", err)
		}
		if _, err := x.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
			return fmt.Errorf("create schema_version: %w", err)
		}
		v, err := d.readVersion(ctx, x)
		if err != nil {
			return err
		}
		if v > len(steps) {
			return fmt.Errorf("%w: it has version %d, this build knows up to %d", budget.ErrSchemaTooNew, v, len(steps))
		}
		for i := v; i < len(steps); i++ {
			if _, err := x.ExecContext(ctx, steps[i]); err != nil {
				return fmt.Errorf("migrate schema %d to %d: %w", i, i+1, err)
			}
			if fn := migrationCode[i+1]; fn != nil {
				if err := fn(ctx, x); err != nil {
					return fmt.Errorf("migrate schema %d to %d: %w", i, i+1, err)
				}
			}
		}
		if v < len(steps) {
			return setVersion(ctx, x, len(steps))
		}
		return nil
	})
}

// migrationCode holds the Go that follows a migration script, by the
// version the script brings the schema to.
var migrationCode = map[int]func(context.Context, *sqlx.Tx) error{
	3: func(ctx context.Context, x *sqlx.Tx) error {
		return sqlrow.NormalizeModels(ctx, x,
			`CREATE INDEX usage_window ON usage (key, at) INCLUDE (provider, model_norm, input, output, reasoning)`,
			func(ctx context.Context, x *sqlx.Tx, l *budget.Limit, start, end time.Time) (int64, error) {
				// The schema of version 3: a model-scope limit of one key,
				// no team, org or user columns yet.
				expr, ok := sumExpr[l.Metric]
				if !ok {
					return 0, fmt.Errorf("no usage history for metric %s", l.Metric)
				}
				q := `SELECT COALESCE(` + expr + `, 0)::bigint FROM usage
					WHERE key = $1 AND at >= $2::bigint AND at < $3::bigint AND model_norm LIKE $4 ESCAPE '\'`
				var v int64
				return v, x.GetContext(ctx, &v, q, l.Key, start.UnixNano(), end.UnixNano(), likePattern(l.ScopeValue))
			})
	},
}

func (d *DB) readVersion(ctx context.Context, q sqlx.QueryerContext) (int, error) {
	var v sql.NullInt64
	if err := sqlx.GetContext(ctx, q, &v, `SELECT MAX(version) FROM schema_version`); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return int(v.Int64), nil
}

func setVersion(ctx context.Context, x *sqlx.Tx, v int) error {
	if _, err := x.ExecContext(ctx, `DELETE FROM schema_version`); err != nil {
		return fmt.Errorf("set schema version: %w", err)
	}
	if _, err := x.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES ($1)`, v); err != nil {
		return fmt.Errorf("set schema version: %w", err)
	}
	return nil
}

// SetSchemaVersion stamps the schema version; tests use it to fake a
// database written by another build.
func (d *DB) SetSchemaVersion(ctx context.Context, v int) error {
	return d.runSQL(ctx, false, func(x *sqlx.Tx) error { return setVersion(ctx, x, v) })
}

// Name is the DSN with its password masked, for messages.
func (d *DB) Name() string { return d.name }

// Close closes the connection pool.
func (d *DB) Close() error { return d.db.Close() }

// Stats reports retries and failures so far.
func (d *DB) Stats() budget.StoreStats {
	return budget.StoreStats{Retries: d.retries.Load(), Failures: d.failures.Load()}
}

// Update runs fn in a READ COMMITTED transaction, retrying serialization
// failures and deadlocks until ctx ends.
func (d *DB) Update(ctx context.Context, fn func(budget.Tx) error) error {
	return d.run(ctx, false, fn)
}

// View runs fn in a REPEATABLE READ READ ONLY transaction: one snapshot.
func (d *DB) View(ctx context.Context, fn func(budget.Tx) error) error {
	return d.run(ctx, true, fn)
}

func (d *DB) run(ctx context.Context, ro bool, fn func(budget.Tx) error) error {
	return d.runSQL(ctx, ro, func(x *sqlx.Tx) error {
		t := &tx{db: d, tx: x, ro: ro}
		t.Tx = sqlq.Tx{X: execer{t}, D: sqlq.Postgres}
		return fn(t)
	})
}

func (d *DB) runSQL(ctx context.Context, ro bool, fn func(*sqlx.Tx) error) error {
	backoff := time.Millisecond
	for attempt := 1; ; attempt++ {
		err := d.once(ctx, ro, fn)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !d.retryable(err, attempt) {
			if !ro || ctx.Err() != nil {
				d.failures.Add(1)
			}
			return d.scrub(err)
		}
		d.retries.Add(1)
		t := time.NewTimer(backoff + rand.N(backoff))
		select {
		case <-ctx.Done():
			t.Stop()
			d.failures.Add(1)
			return d.scrub(fmt.Errorf("%w (after %d attempts: %v)", ctx.Err(), attempt, err))
		case <-t.C:
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

var (
	writeTx = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	readTx  = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
)

func (d *DB) once(ctx context.Context, ro bool, fn func(*sqlx.Tx) error) (err error) {
	opts := writeTx
	if ro {
		opts = readTx
	}
	t, err := d.db.BeginTxx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer func() {
		if err != nil {
			_ = t.Rollback()
		}
	}()
	if err = fn(t); err != nil {
		return err
	}
	if err = t.Commit(); err != nil {
		return &commitError{err}
	}
	return nil
}

// commitError is a failed COMMIT. Without an answer from the server its
// outcome is unknown, so it is not retried.
type commitError struct{ err error }

func (e *commitError) Error() string { return "commit: " + e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// retryable tells a transient failure (the transaction rolled back and may
// succeed when run again) from one to report.
func (d *DB) retryable(err error, attempt int) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "40001", pe.Code == "40P01", pe.Code == "55P03":
			// serialization_failure, deadlock_detected, lock_not_available
			return true
		case pe.Code == "23505":
			// unique_violation: two processes created the same row (a limit
			// with one identity, say); run again, fn finds it.
			return attempt < 3
		case strings.HasPrefix(pe.Code, "08"), pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", pe.Code == "53300":
			// connection exceptions, server shutting down or starting,
			// too many connections
			return attempt < d.opts.ConnAttempts
		}
		return false
	}
	var ce *commitError
	if errors.As(err, &ce) {
		return false
	}
	if isConnErr(err) {
		return attempt < d.opts.ConnAttempts
	}
	return false
}

func isConnErr(err error) bool {
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &ne) || errors.As(err, &ce) || pgconn.SafeToRetry(err)
}
