package tokenbudget_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"modernc.org/sqlite"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	sqlitestore "github.com/tokenbudget/tokenbudget/store/sqlite"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// countingDriverName is the database/sql name of the statement-counting
// wrapper around modernc.org/sqlite's "sqlite" driver.
const countingDriverName = "sqlite-counting"

// stmtCounts are the statements run through the counting driver since the
// process started, by the role of the connection: the writer (opened with
// mode=rw) or a reader. A benchmark takes the difference around its loop.
type stmtCounts struct {
	write, read roleCounts
}

// roleCounts counts what the connections of one role ran.
type roleCounts struct {
	stmts    atomic.Int64 // Exec and Query, on the connection or a prepared statement
	parsed   atomic.Int64 // of those, Exec and Query on the connection: SQL parsed anew
	prepares atomic.Int64 // statements prepared (not run)
	txs      atomic.Int64 // transactions begun (each also runs BEGIN and COMMIT or ROLLBACK)
}

var counted stmtCounts

var registerCounting sync.Once

// countingDriver wraps modernc's registered driver (so functions and hooks
// registered on it still apply) and counts per connection role.
type countingDriver struct{ base driver.Driver }

// registerCountingDriver registers countingDriverName once.
func registerCountingDriver() {
	registerCounting.Do(func() {
		db, err := sql.Open("sqlite", "")
		if err != nil {
			panic(err)
		}
		base := db.Driver()
		db.Close()
		sql.Register(countingDriverName, &countingDriver{base: base})
	})
}

func (d *countingDriver) Open(name string) (driver.Conn, error) {
	c, err := d.base.Open(name)
	if err != nil {
		return nil, err
	}
	n := &counted.read
	if strings.Contains(name, "mode=rw") {
		n = &counted.write
	}
	return &countingConn{Conn: c, n: n}, nil
}

// countingConn forwards to modernc's connection, counting. It implements
// the optional interfaces modernc's connection does, so database/sql takes
// the same paths as without it.
type countingConn struct {
	driver.Conn
	n *roleCounts
}

var (
	_ driver.ConnBeginTx        = (*countingConn)(nil)
	_ driver.ConnPrepareContext = (*countingConn)(nil)
	_ driver.ExecerContext      = (*countingConn)(nil)
	_ driver.QueryerContext     = (*countingConn)(nil)
	_ driver.Pinger             = (*countingConn)(nil)
	_ driver.SessionResetter    = (*countingConn)(nil)
	_ driver.Validator          = (*countingConn)(nil)
)

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.n.txs.Add(1)
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.n.prepares.Add(1)
	s, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &countingStmt{Stmt: s, n: c.n}, nil
}

func (c *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	r, err := c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
	if !errors.Is(err, driver.ErrSkip) {
		c.n.stmts.Add(1)
		c.n.parsed.Add(1)
	}
	return r, err
}

func (c *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	r, err := c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
	if !errors.Is(err, driver.ErrSkip) {
		c.n.stmts.Add(1)
		c.n.parsed.Add(1)
	}
	return r, err
}

func (c *countingConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c *countingConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *countingConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

// FileControlDataVersion forwards modernc's, for a store that reads it
// through sql.Conn.Raw.
func (c *countingConn) FileControlDataVersion(dbName string) (uint32, error) {
	return c.Conn.(interface {
		FileControlDataVersion(string) (uint32, error)
	}).FileControlDataVersion(dbName)
}

// countingStmt counts each execution of a prepared statement.
type countingStmt struct {
	driver.Stmt
	n *roleCounts
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.n.stmts.Add(1)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.n.stmts.Add(1)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

// openCountingStore opens a fresh SQLite store (WAL, synchronous=NORMAL)
// through the counting driver. sqlitestore.Options needs a field naming the
// database/sql driver Open uses (Driver string; default "sqlite"): it is
// set by reflection so this file compiles before that field exists, and
// the benchmark skips until it does.
func openCountingStore(b testing.TB) *sqlitestore.DB {
	b.Helper()
	registerCountingDriver()
	opts := sqlitestore.Options{Create: true, Driver: countingDriverName}
	s, err := sqlitestore.Open(context.Background(), filepath.Join(b.TempDir(), "stmts.db"), tokenbudget.SQLiteSchema, opts)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkStatements counts, at the driver, the SQL statements a
// Reserve+Commit pair costs (the setup of BenchmarkReserveCommit1 and 64: 3
// limits per request over 1,000 keys, each warmed by one pair first, WAL,
// synchronous=NORMAL) and those of
// one write batch:
//
//	go test -run '^$' -bench Statements -benchtime 2000x .
//
// stmts/pair counts every Exec and Query on every connection (writer and
// readers), write-stmts/pair the writer's alone; stmts/batch is the
// writer's statements per committed write transaction (Tracker.Stats
// Batches); txs/pair counts transactions begun, each of which also runs
// BEGIN and COMMIT. Statements prepared are not counted as run.
func BenchmarkStatements(b *testing.B) {
	for _, g := range []struct {
		name       string
		goroutines int
	}{{"ReserveCommit1", 1}, {"ReserveCommit64", 64}} {
		b.Run(g.name, func(b *testing.B) {
			ctx := context.Background()
			s := openCountingStore(b)
			t, err := budget.New(ctx, s, storetest.BenchConfig(nil))
			if err != nil {
				s.Close()
				b.Fatal(err)
			}
			b.Cleanup(func() {
				t.Close(ctx)
				s.Close()
			})
			storetest.SetBenchLimits(b, t, pairKeys)
			warmPairs(b, t)
			w0, r0, tx0, batches0 := counted.write.stmts.Load(), counted.read.stmts.Load(),
				counted.write.txs.Load()+counted.read.txs.Load(), t.Stats().Batches
			runPairs(b, t, g.goroutines)
			b.StopTimer()
			w := counted.write.stmts.Load() - w0
			r := counted.read.stmts.Load() - r0
			txs := counted.write.txs.Load() + counted.read.txs.Load() - tx0
			batches := t.Stats().Batches - batches0
			n := float64(b.N)
			b.ReportMetric(float64(w+r)/n, "stmts/pair")
			b.ReportMetric(float64(w)/n, "write-stmts/pair")
			b.ReportMetric(float64(txs)/n, "txs/pair")
			if batches > 0 {
				b.ReportMetric(float64(w)/float64(batches), "stmts/batch")
				b.ReportMetric(n/float64(batches), "pairs/batch")
			}
		})
	}
}

// TestCountingDriver checks the instrument: one count per statement run,
// prepared or not, by connection role.
func TestCountingDriver(t *testing.T) {
	registerCountingDriver()
	path := filepath.Join(t.TempDir(), "count.db")
	db, err := sql.Open(countingDriverName, "file:"+path+"?mode=rwc")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	w0, p0 := counted.write.stmts.Load(), counted.write.prepares.Load()
	if _, err := db.Exec(`CREATE TABLE t (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	st, err := db.Prepare(`INSERT INTO t (x) VALUES (?)`)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range 3 {
		if _, err := st.Exec(i); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM t`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("count: got %d, %v; want 3", n, err)
	}
	if got := counted.write.stmts.Load() - w0; got != 5 {
		t.Errorf("statements run: got %d; want 5 (create, 3 inserts, select)", got)
	}
	if got := counted.write.prepares.Load() - p0; got != 1 {
		t.Errorf("statements prepared: got %d; want 1", got)
	}
	var se *sqlite.Error
	if _, err := db.Exec(`SELECT * FROM missing`); !errors.As(err, &se) {
		t.Errorf("error through the wrapper: got %T %v; want a *sqlite.Error", err, err)
	}
}

// TestColdCheckReadsPrepared: a check that misses the cache (refresh 0)
// runs its reads through prepared statements once they have been seen,
// rather than parsing the SQL of every read again (issue 24.6).
func TestColdCheckReadsPrepared(t *testing.T) {
	ctx := context.Background()
	s := openCountingStore(t)
	tr, err := budget.New(ctx, s, storetest.BenchConfig(func(c *budget.Config) { c.RefreshInterval = 0 }))
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tr.Close(ctx)
		s.Close()
	})
	storetest.SetBenchLimits(t, tr, 1)
	if _, err := tr.RecordSync(ctx, budget.Usage{Key: "key-0", Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5}); err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		if d, err := tr.Check(ctx, storetest.BenchReq); err != nil || !d.Allowed {
			t.Fatalf("check = %+v, %v", d, err)
		}
	}
	for range 3 { // the first checks meet each statement and queue it
		check()
	}
	r0, p0 := counted.read.stmts.Load(), counted.read.parsed.Load()
	const n = 20
	for range n {
		check()
	}
	ran, parsed := counted.read.stmts.Load()-r0, counted.read.parsed.Load()-p0
	if ran < n {
		t.Fatalf("%d cold checks ran %d read statements; want at least one each (is the cache off?)", n, ran)
	}
	if parsed != 0 {
		t.Errorf("%d cold checks ran %d read statements, %d of them parsed anew; want all prepared", n, ran, parsed)
	}
}
