package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/sqlite"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// The test binary doubles as the child process of the multi-process cases.
func TestMain(m *testing.M) { storetest.Main(m, openSQLite) }

// openSQLite opens path, creating the database when missing.
func openSQLite(ctx context.Context, path string) (budget.Store, error) {
	return sqlite.Open(ctx, path, tokenbudget.SQLiteSchema, sqlite.Options{Create: true})
}

// TestProcesses runs OS processes on one SQLite file.
func TestProcesses(t *testing.T) {
	storetest.RunProcesses(t, storetest.Processes{
		NewDSN: func(t testing.TB) string { return filepath.Join(t.TempDir(), "budget.db") },
		Open:   openSQLite,
	})
}

// Another process holding the write lock does not stop a read-only tool
// from opening the file and reading.
func TestReadsDoNotWaitForTheWriteLock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "budget.db")
	tr := newTracker(t, openStore(t, path), nil)
	max := int64(100)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "1h", Max: &max}); err != nil {
		t.Fatal(err)
	}
	// Another process holds the write lock for the whole test.
	holder, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	tx, err := holder.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// A read-only tool opens the file and reads while the lock is held; with
	// a 1s busy timeout, waiting for the lock would fail the context.
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	ro, err := sqlite.Open(cctx, path, tokenbudget.SQLiteSchema, sqlite.Options{BusyTimeout: time.Second})
	if err != nil {
		t.Fatalf("Open while another process writes = %v; want no wait for the write lock", err)
	}
	t.Cleanup(func() { ro.Close() })
	ls, err := newTracker(t, ro, nil).Limits(cctx, "k")
	if err != nil || len(ls) != 1 {
		t.Fatalf("Limits while another process writes = %v, %v; want the one limit", ls, err)
	}
}
