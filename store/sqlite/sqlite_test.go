package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/sqlite"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// newSQLite makes a fresh database file in the test's temp dir.
func newSQLite(t testing.TB) func() budget.Store {
	path := filepath.Join(t.TempDir(), "budget.db")
	return func() budget.Store {
		db, err := sqlite.Open(context.Background(), path, tokenbudget.SQLiteSchema, sqlite.Options{Create: true})
		if err != nil {
			t.Fatalf("sqlite.Open: %v", err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
}

func TestConformance(t *testing.T) { storetest.Run(t, newSQLite) }
