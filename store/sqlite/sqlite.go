// Package sqlite implements budget.Store on SQLite through sqlx and the pure-Go
// modernc.org/sqlite driver.
//
// A DB is safe for concurrent use. Writes go through one connection whose
// transactions take the write lock up front (BEGIN IMMEDIATE), so two
// processes sharing the file queue on the lock instead of failing on an
// upgrade; SQLITE_BUSY is retried, never returned. Reads use a separate pool
// of query-only connections in WAL mode and never wait for the writer.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlq"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// SchemaVersion is the PRAGMA user_version this build writes and reads.
const SchemaVersion = 16

// Options configure Open. The zero value is usable.
type Options struct {
	// Create makes a missing database file (mode 0600), and gives an empty
	// one the schema. Without it a missing or empty file is an error naming
	// the path. (Optional; default false.)
	Create bool
	// Durable selects synchronous=FULL: a commit is fsynced before it
	// returns. The default, NORMAL in WAL mode, survives a process crash but
	// may lose the last commits on power loss. (Optional; default false.)
	Durable bool
	// BusyTimeout is how long SQLite waits for another process's lock before
	// Update retries. (Optional; default 5s.)
	BusyTimeout time.Duration
	// ReadConns bounds the read pool. (Optional; default 4.)
	ReadConns int
	// Driver is the database/sql driver the file is opened with: one
	// registered as a wrapper of modernc.org/sqlite's "sqlite" driver, for
	// instrumentation such as counting statements. (Optional; default "sqlite".)
	Driver string
}

// DB is a budget.Store on one SQLite file.
type DB struct {
	sqlq.Keys // gatekey.Store, through keyTx

	path string
	w    *sqlx.DB // one connection, BEGIN IMMEDIATE
	r    *sqlx.DB // query-only pool, deferred BEGIN

	ws    stmtCache   // the writer's statements
	rs    stmtCache   // the read pool's: each prepared once per connection, as used
	ready atomic.Bool // the schema is current: statements can be prepared

	retries  atomic.Int64
	failures atomic.Int64
	commits  atomic.Uint64 // committed write transactions: budget.Mark's Local
	exact    atomic.Int32  // batches left to insert their events with RETURNING (tx.insertUsage)

	file os.FileInfo // the file as opened, to notice it deleted or replaced
}

var (
	_ budget.Store         = (*DB)(nil)
	_ budget.HealthChecker = (*DB)(nil)
)

// Open opens (and with opts.Create, creates) the SQLite database at path,
// applying schema (the root package's embedded schema.sql) to a new file and
// migrating an older one. A file that is not a SQLite database is refused
// untouched.
func Open(ctx context.Context, path, schema string, opts Options) (*DB, error) {
	if path == "" {
		return nil, budget.Invalid("db", path, "a database path is required")
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 5 * time.Second
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = 4
	}
	if opts.Driver == "" {
		opts.Driver = "sqlite"
	}
	open := func(dsn string) (*sqlx.DB, error) {
		d, err := sql.Open(opts.Driver, dsn)
		if err != nil {
			return nil, err
		}
		return sqlx.NewDb(d, "sqlite"), nil // sqlite's bind type whatever the driver's name
	}
	if err := prepareFile(path, opts.Create); err != nil {
		return nil, err
	}
	sync := "NORMAL"
	if opts.Durable {
		sync = "FULL"
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous("+sync+")")
	base := "file:" + (&url.URL{Path: path}).EscapedPath() + "?"
	if path == ":memory:" {
		// One database for the writer and the read pool (each connection
		// to a plain :memory: would have its own, empty one).
		base = "file:/tokenbudget-" + strconv.FormatUint(rand.Uint64(), 16) + "?vfs=memdb&"
	}
	// The writer touches index pages all over the file (one per key), so it
	// gets a large page cache, and checkpoints less often than every 1,000
	// WAL pages (each checkpoint is an fsync pair). Both caches are sized in
	// pages, not KiB: modernc.org/libc's allocator rounds each cached page
	// (4 KiB and its header) up to an 8 KiB slot, so cache_size(-32768)
	// held ~7,500 pages in ~60 MiB of RSS. 4,096 pages are 32 MiB of RSS;
	// a reader's 256 pages (2 MiB) replace SQLite's default -2000 (3.7 MiB).
	wq := url.Values{"_pragma": append([]string{"journal_mode(WAL)", "cache_size(4096)", "wal_autocheckpoint(8192)", "temp_store(MEMORY)"}, q["_pragma"]...), "_txlock": {"immediate"}}
	w, err := open(base + "mode=rw&" + wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	rq := url.Values{"_pragma": append([]string{"query_only(1)", "cache_size(256)"}, q["_pragma"]...)}
	r, err := open(base + "mode=ro&" + rq.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	fi, err := statFile(path)
	if err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db := &DB{path: path, w: w, r: r, file: fi}
	db.Keys = sqlq.Keys{Run: db.keyTx}
	// Neither pool has connected yet: the writer connects (and switches the
	// file to WAL) only for a migration or the first write, so read-only
	// tools never take the write lock.
	for _, q := range hotStatements {
		db.ws.pending.Store(q, struct{}{})
	}
	err = db.migrate(ctx, schema, opts.Create)
	if err != nil && !opts.Create && cannotInit(err) {
		// A read-only directory (or file) where SQLite cannot create the
		// WAL index: nobody can write this file through that path, so it
		// is read as immutable. Writes still fail, at once.
		db.r.Close()
		if db.r, err = open(base + "mode=ro&immutable=1&" + rq.Encode()); err != nil {
			w.Close()
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		r = db.r
		err = db.migrate(ctx, schema, opts.Create)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	db.ready.Store(true)
	r.SetMaxOpenConns(opts.ReadConns)
	r.SetMaxIdleConns(opts.ReadConns)
	db.r = r
	return db, nil
}

// statFile is the database file's info; nil for SQLite's in-memory
// database.
func statFile(path string) (os.FileInfo, error) {
	if path == ":memory:" {
		return nil, nil
	}
	return os.Stat(path)
}

// prepareFile refuses a missing file unless create, and makes a new one 0600
// so the WAL and shared-memory files SQLite derives from it are private too.
func prepareFile(path string, create bool) error {
	if path == ":memory:" {
		return nil // SQLite's in-memory database: no file to make
	}
	f, err := os.Open(path)
	if err == nil {
		defer f.Close()
		var hdr [16]byte
		n, err := io.ReadFull(f, hdr[:])
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return fmt.Errorf("open %s: %w", path, err)
		}
		if n > 0 && string(hdr[:n]) != "SQLite format 3\x00"[:n] || n > 0 && n < 16 {
			return fmt.Errorf("open %s: not a SQLite database", path)
		}
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("open %s: %w", path, err)
	}
	if !create {
		return fmt.Errorf("open %s: no such database file", path)
	}
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if f != nil {
		return f.Close()
	}
	return nil
}

// migrationFiles are the upgrade steps, one file per version: NNNN_name.sql
// takes a database of version NNNN-1 to NNNN. Version 0 is an empty file,
// which the current schema takes straight to the newest version.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationCode is what a step needs beyond its file: the current schema
// run after it (it creates the tables and indexes the step adds), and Go for
// what SQL cannot do, run after both.
var migrationCode = map[int]struct {
	schema bool
	fn     func(context.Context, *sqlx.Tx) error
}{
	3:  {fn: normalizeModelsV3},
	6:  {fn: migrateUSD},
	8:  {schema: true},
	9:  {schema: true, fn: buildRollups},
	10: {schema: true},
	11: {fn: addAlertKind},
	13: {schema: true, fn: addKeyRules},
	14: {fn: addCacheWrite1h},
	15: {fn: addTags},
	16: {schema: true},
}

// migrations[i] upgrades a schema of version i to i+1: migrations[0] is the
// whole current schema, the later steps are for files made by older builds.
// It panics when the embedded files are not numbered 2, 3, ... without a
// gap, which a test catches.
func migrations(schema string) []migration {
	steps := []migration{{sql: schema}}
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		panic(err)
	}
	slices.Sort(names)
	for _, name := range names {
		v, err := strconv.Atoi(strings.SplitN(path.Base(name), "_", 2)[0])
		if err != nil || v != len(steps)+1 {
			panic(fmt.Sprintf("sqlite: migration %s: want version %d", name, len(steps)+1))
		}
		b, err := migrationFiles.ReadFile(name)
		if err != nil {
			panic(err)
		}
		m := migration{sql: string(b), fn: migrationCode[v].fn}
		if migrationCode[v].schema {
			m.sql += "\n" + schema
		}
		steps = append(steps, m)
	}
	return steps
}

// normalizeModelsV3 fills usage.model_norm and rebuilds the covering index
// of schema 3, whose history has no team, org or user columns yet.
func normalizeModelsV3(ctx context.Context, x *sqlx.Tx) error {
	return sqlrow.NormalizeModels(ctx, x,
		`CREATE INDEX usage_window ON usage (key, at, provider, model_norm, input, output, reasoning)`,
		func(ctx context.Context, x *sqlx.Tx, l *budget.Limit, start, end time.Time) (int64, error) {
			q := `SELECT COALESCE(` + sumExpr[l.Metric] + `, 0) FROM usage WHERE key = ? AND at >= ? AND at < ?`
			args := []any{l.History().Key, start.UnixNano(), end.UnixNano()}
			switch l.Scope {
			case budget.ScopeProvider:
				q += ` AND provider = ?`
				args = append(args, l.ScopeValue)
			case budget.ScopeModel:
				q += ` AND model_norm GLOB ?`
				args = append(args, l.ScopeValue)
			}
			var v int64
			return v, x.GetContext(ctx, &v, q, args...)
		})
}

// buildRollups builds schema 9's daily rollups from the history so far.
func buildRollups(ctx context.Context, x *sqlx.Tx) error {
	_, err := x.ExecContext(ctx, `INSERT INTO rollups (`+sqlrow.RollupCols+`)
		SELECT `+dayOf("at")+`, key, team, org, end_user, provider, model, '', MAX(model_norm), `+rollupSums+`
		FROM usage GROUP BY 1, key, team, org, end_user, provider, model`)
	return err
}

// addAlertKind adds alerts.kind and alerts.metric unless step 10 already
// made the table from the current schema, which has them. An alert's
// metric is its limit's, while the limit is there to say.
func addAlertKind(ctx context.Context, x *sqlx.Tx) error {
	return addColumns(ctx, x, "alerts", "kind", `ALTER TABLE alerts ADD COLUMN kind TEXT NOT NULL DEFAULT 'threshold';
		ALTER TABLE alerts ADD COLUMN metric TEXT NOT NULL DEFAULT '';
		UPDATE alerts SET metric = COALESCE((SELECT metric FROM limits WHERE limits.id = alerts.limit_id), '')`)
}

// addKeyRules adds gateway_keys.expires_at and models unless the current
// schema made the table with them.
func addKeyRules(ctx context.Context, x *sqlx.Tx) error {
	return addColumns(ctx, x, "gateway_keys", "expires_at", `ALTER TABLE gateway_keys ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
		ALTER TABLE gateway_keys ADD COLUMN models TEXT NOT NULL DEFAULT ''`)
}

// addCacheWrite1h adds prices.cache_write_1h, each version's 1-hour
// cache-write price set to its cache-write price (a version without one
// prices every cache write at cache_write), unless the current schema
// made the table with it.
func addCacheWrite1h(ctx context.Context, x *sqlx.Tx) error {
	return addColumns(ctx, x, "prices", "cache_write_1h", `ALTER TABLE prices ADD COLUMN cache_write_1h INTEGER NOT NULL DEFAULT 0;
		UPDATE prices SET cache_write_1h = cache_write`)
}

// addTags adds usage.tags and reservations.tags (events and reservations
// before had none: ”), unless a test's database took the schema back
// without dropping them.
func addTags(ctx context.Context, x *sqlx.Tx) error {
	if err := addColumns(ctx, x, "usage", "tags", `ALTER TABLE usage ADD COLUMN tags TEXT NOT NULL DEFAULT ''`); err != nil {
		return err
	}
	return addColumns(ctx, x, "reservations", "tags", `ALTER TABLE reservations ADD COLUMN tags TEXT NOT NULL DEFAULT ''`)
}

// addColumns runs ddl, which adds column (and perhaps others) to table,
// unless table already has column: an earlier step may have made the
// table from the current schema, which has it.
func addColumns(ctx context.Context, x *sqlx.Tx, table, column, ddl string) error {
	var n int
	if err := x.GetContext(ctx, &n, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?`, table, column); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	_, err := x.ExecContext(ctx, ddl)
	return err
}

// dayOf is the SQL for the UTC midnight (Unix ns) of the day holding the
// instant col, floored for instants before 1970 too.
func dayOf(col string) string {
	return `(` + col + ` - ((` + col + ` % 86400000000000) + 86400000000000) % 86400000000000)`
}

// rollupSums are the rollups' sums of a group of usage rows, in
// sqlrow.RollupCols order after the dimensions, saturating at 2^53-1.
const rollupSums = `SUM(substr(request_id, -5) <> ':late'),
	CAST(MIN(TOTAL(input), 9007199254740991) AS INTEGER), CAST(MIN(TOTAL(output), 9007199254740991) AS INTEGER),
	CAST(MIN(TOTAL(reasoning), 9007199254740991) AS INTEGER), CAST(MIN(TOTAL(cache_read), 9007199254740991) AS INTEGER),
	CAST(MIN(TOTAL(cache_write), 9007199254740991) AS INTEGER), CAST(MIN(TOTAL(cost), 9007199254740991) AS INTEGER),
	SUM(no_price)`

// migration is one schema step: SQL, then Go for what SQL cannot do.
type migration struct {
	sql string
	fn  func(context.Context, *sqlx.Tx) error
}

// migrate brings the schema to this build's version. Without create, a
// file without any schema is refused rather than initialised: only a tool
// that adds state may turn a file into a database, and an empty file is
// most likely what a killed copy or backup left.
func (db *DB) migrate(ctx context.Context, schema string, create bool) error {
	steps := migrations(schema)
	var v, objects int
	err := db.View(ctx, func(t budget.Tx) error {
		x := t.(*tx).tx
		if err := x.GetContext(ctx, &v, "PRAGMA user_version"); err != nil {
			return err
		}
		return x.GetContext(ctx, &objects, "SELECT COUNT(*) FROM sqlite_master")
	})
	switch {
	case err != nil:
		return fmt.Errorf("open %s: %w", db.path, db.wrap(err))
	case v > len(steps):
		return fmt.Errorf("open %s: %w: it has version %d, this build knows up to %d", db.path, budget.ErrSchemaTooNew, v, len(steps))
	case v == len(steps):
		return nil
	case v == 0 && objects > 0:
		return fmt.Errorf("open %s: not a tokenbudget database (it already holds %d tables or indexes of another application)", db.path, objects)
	case v == 0 && !create:
		return fmt.Errorf("open %s: not a tokenbudget database: the file is empty (a killed copy or backup leaves such a file); only a command that adds state creates a database", db.path)
	}
	return db.run(ctx, db.w, false, func(t budget.Tx) error {
		x := t.(*tx).tx
		// Read again under the write lock: another process may have
		// migrated since.
		if err := x.GetContext(ctx, &v, "PRAGMA user_version"); err != nil {
			return fmt.Errorf("open %s: read schema version: %w", db.path, err)
		}
		if v > len(steps) {
			return fmt.Errorf("open %s: %w: it has version %d, this build knows up to %d", db.path, budget.ErrSchemaTooNew, v, len(steps))
		}
		last := len(steps)
		if v == 0 {
			last = 1 // the whole current schema
		}
		for i := v; i < last; i++ {
			if _, err := x.ExecContext(ctx, steps[i].sql); err != nil {
				return fmt.Errorf("open %s: migrate schema %d to %d: %w", db.path, i, i+1, err)
			}
			if steps[i].fn != nil {
				if err := steps[i].fn(ctx, x); err != nil {
					return fmt.Errorf("open %s: migrate schema %d to %d: %w", db.path, i, i+1, err)
				}
			}
		}
		if v < len(steps) {
			if _, err := x.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(steps))); err != nil {
				return fmt.Errorf("open %s: set schema version: %w", db.path, err)
			}
		}
		return nil
	})
}

// Health reports a database file deleted or replaced since Open: SQLite
// would go on writing to the unlinked file, which no other process and no
// restart would ever read.
func (db *DB) Health() error {
	if db.file == nil {
		return nil // in memory
	}
	fi, err := os.Stat(db.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("database file %s was deleted while open; restart to use a new one", db.path)
	case err != nil:
		return fmt.Errorf("database file %s: %w", db.path, err)
	case !os.SameFile(fi, db.file):
		return fmt.Errorf("database file %s was replaced while open; restart to use the new one", db.path)
	}
	return nil
}

// Path is the database file's path.
func (db *DB) Path() string { return db.path }

// Close closes both pools.
func (db *DB) Close() error {
	var errs []error
	if db.r != nil {
		errs = append(errs, db.r.Close())
	}
	errs = append(errs, db.w.Close())
	return errors.Join(errs...)
}

// Stats reports retries and failures so far.
func (db *DB) Stats() budget.StoreStats {
	return budget.StoreStats{Retries: db.retries.Load(), Failures: db.failures.Load()}
}

// Update runs fn in a BEGIN IMMEDIATE transaction, retrying while the
// database is busy (another process holds the lock) until ctx ends.
func (db *DB) Update(ctx context.Context, fn func(budget.Tx) error) error {
	return db.run(ctx, db.w, false, fn)
}

// View runs fn in a deferred, read-only transaction on the read pool.
func (db *DB) View(ctx context.Context, fn func(budget.Tx) error) error {
	return db.run(ctx, db.r, true, fn)
}

func (db *DB) run(ctx context.Context, pool *sqlx.DB, ro bool, fn func(budget.Tx) error) error {
	backoff := time.Millisecond
	if db.ready.Load() {
		if ro {
			db.rs.prepare(ctx, db.r, maxReadStmts, nil, true)
		} else if err := db.ws.prepare(ctx, db.w, maxWriteParams, writeCost, false); err != nil {
			return err
		}
	}
	for {
		err := db.once(ctx, pool, ro, fn)
		if err == nil {
			return nil
		}
		if !isBusy(err) {
			if !ro {
				db.failures.Add(1)
			}
			return err
		}
		db.retries.Add(1)
		t := time.NewTimer(backoff + rand.N(backoff))
		select {
		case <-ctx.Done():
			t.Stop()
			db.failures.Add(1)
			return fmt.Errorf("%w (database busy: %v)", ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// afterCommit, when set (by a test), runs right after a transaction
// commits, before anything else does.
var afterCommit func(*DB)

func (db *DB) once(ctx context.Context, pool *sqlx.DB, ro bool, fn func(budget.Tx) error) (err error) {
	t, err := pool.BeginTxx(ctx, nil)
	if err != nil {
		return db.wrap(err)
	}
	defer func() {
		if err != nil {
			_ = t.Rollback()
		}
	}()
	x := &tx{db: db, tx: t, ro: ro}
	x.Tx = sqlq.Tx{X: execer{x}, D: sqlq.SQLite}
	if err = fn(x); err != nil {
		return db.wrap(err)
	}
	// Counted before COMMIT, while this transaction still holds the only
	// writer connection: once Commit returns, the next write transaction
	// may already be reading Mark. A commit that then fails has moved the
	// count for nothing, which only makes the writer re-read.
	if !ro && !x.keysOnly {
		db.commits.Add(1)
	}
	err = t.Commit()
	if afterCommit != nil {
		afterCommit(db)
	}
	return db.wrap(err)
}

func (db *DB) wrap(err error) error {
	var se *sqlite.Error
	var ex *explained
	if err == nil || errors.As(err, &ex) || !errors.As(err, &se) {
		return err
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_NOTADB:
		return &explained{fmt.Sprintf("%s: not a SQLite database", db.path), err}
	case sqlite3.SQLITE_FULL:
		return &explained{fmt.Sprintf("%s: disk full", db.path), err}
	case sqlite3.SQLITE_CANTOPEN:
		return &explained{fmt.Sprintf("%s: cannot open for writing (is the file, its directory or its mount read-only?)", db.path), err}
	case sqlite3.SQLITE_READONLY:
		return &explained{fmt.Sprintf("%s: read-only (check the file's and its directory's permissions, and the mount)", db.path), err}
	}
	return err
}

// explained is a SQLite error with what it means for the user in front.
type explained struct {
	what string
	err  error
}

func (e *explained) Error() string { return e.what + ": " + e.err.Error() }
func (e *explained) Unwrap() error { return e.err }

// cannotInit reports the errors of a WAL database whose shared-memory file
// cannot be created or opened: a read-only directory or file.
func cannotInit(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code() & 0xff
		return c == sqlite3.SQLITE_CANTOPEN || c == sqlite3.SQLITE_READONLY
	}
	return false
}

func isBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code() & 0xff
		return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
	}
	return false
}

// stmtCache is one pool's prepared statements. A statement a transaction
// meets unprepared is queued and prepared between transactions: inside one,
// the connection it would prepare on may be the only one (the writer), or
// the pool may be exhausted by transactions that all wait for it (readers).
type stmtCache struct {
	stmts   sync.Map     // query string -> *sqlx.Stmt
	pending sync.Map     // query string -> struct{}: to prepare before the next transaction
	n       atomic.Int64 // the prepared statements' cost, see prepare
}

// maxReadStmts bounds the read pool's statements: reads whose SQL is built
// per call (a report's filters and groupings) past it run unprepared
// rather than each holding a statement on every connection for good.
const maxReadStmts = 256

// maxWriteParams bounds the writer's prepared statements by their bound
// parameters, which their memory grows with: a prepared statement lives in
// SQLite's heap (modernc.org/libc, outside the Go heap) at ~150 B a
// parameter. Unbounded, the multi-row statements of every row count that a
// batch's remainder meets stayed prepared: in Memory100kKeys 1,138
// statements, ~450,000 parameters, 69 MiB of RSS. 65,536 parameters keep
// the shapes a steady load repeats (its full chunks and the statements of
// one row) in ~10 MiB; a statement past the bound runs unprepared.
const maxWriteParams = 1 << 16

// writeCost is a writer statement's cost against maxWriteParams.
func writeCost(q string) int64 { return 1 + int64(strings.Count(q, "?")) }

// prepare prepares the queued statements on pool while their cost (cost(q),
// or 1 each when cost is nil) stays within max in all. A lenient (read)
// pool's prepare error is dropped: the read runs unprepared and reports its
// own error, so a cache never fails a read.
func (c *stmtCache) prepare(ctx context.Context, pool *sqlx.DB, max int64, cost func(string) int64, lenient bool) error {
	var err error
	c.pending.Range(func(k, _ any) bool {
		q := k.(string)
		if _, claimed := c.pending.LoadAndDelete(q); !claimed {
			return true // another transaction is preparing it
		}
		if _, ok := c.stmts.Load(q); ok {
			return true
		}
		w := int64(1)
		if cost != nil {
			w = cost(q)
		}
		if c.n.Load()+w > max {
			return true
		}
		st, perr := pool.PreparexContext(ctx, q)
		if perr != nil {
			if !lenient {
				err = fmt.Errorf("prepare %q: %w", q, perr)
				return false
			}
			return true
		}
		if _, dup := c.stmts.LoadOrStore(q, st); dup {
			_ = st.Close()
			return true
		}
		c.n.Add(w)
		return true
	})
	return err
}

// get is the prepared form of query for t, or nil (and query is queued to
// be prepared before the next transaction).
func (c *stmtCache) get(ctx context.Context, t *sqlx.Tx, query string) *sqlx.Stmt {
	if st, ok := c.stmts.Load(query); ok {
		return t.StmtxContext(ctx, st.(*sqlx.Stmt))
	}
	c.pending.Store(query, struct{}{})
	return nil
}

// prepared reports whether query has its prepared statement.
func (c *stmtCache) prepared(query string) bool {
	_, ok := c.stmts.Load(query)
	return ok
}

// stmt is the prepared form of query for a write transaction, or nil.
func (db *DB) stmt(ctx context.Context, t *sqlx.Tx, query string) *sqlx.Stmt {
	return db.ws.get(ctx, t, query)
}

// exec runs query in t, through its prepared statement when it has one.
func (db *DB) exec(ctx context.Context, t *sqlx.Tx, query string, args ...any) (int64, error) {
	var res interface{ RowsAffected() (int64, error) }
	var err error
	if st := db.stmt(ctx, t, query); st != nil {
		res, err = st.ExecContext(ctx, args...)
	} else {
		res, err = t.ExecContext(ctx, query, args...)
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// SetUserVersion stamps the schema version; tests use it to fake a database
// written by another build.
func (db *DB) SetUserVersion(ctx context.Context, v int) error {
	_, err := db.w.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v))
	return err
}
