package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
)

// openInternal opens a new database named name in tb's temporary
// directory, closed when tb ends.
func openInternal(tb testing.TB, name string) *DB {
	tb.Helper()
	schema, err := os.ReadFile("../../schema.sql") // the root package embeds it; it imports this one
	if err != nil {
		tb.Fatal(err)
	}
	db, err := Open(context.Background(), filepath.Join(tb.TempDir(), name), string(schema), Options{Create: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// The writer keeps its prepared statements within maxWriteParams bound
// parameters (their memory, in SQLite's heap, grows with them), and a
// statement past the bound still runs, unprepared.
func TestWriterPreparedStatementsBoundedByTheirParameters(t *testing.T) {
	ctx := context.Background()
	db := openInternal(t, "s.db")
	const params = 1000
	const shapes = maxWriteParams/params + 16 // past the bound
	query := func(i int) string {
		return fmt.Sprintf("SELECT %d, %s", i, strings.TrimSuffix(strings.Repeat("?,", params), ","))
	}
	args := make([]any, params)
	for i := range args {
		args[i] = i
	}
	run := func() {
		t.Helper()
		if err := db.Update(ctx, func(x budget.Tx) error {
			for i := range shapes {
				if _, err := db.exec(ctx, x.(*tx).tx, query(i), args...); err != nil {
					return fmt.Errorf("statement %d: %w", i, err)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	run() // queues every shape
	run() // prepares them, within the bound, before its transaction; runs the rest unprepared
	var total int64
	prepared := 0
	for i := range shapes {
		if db.ws.prepared(query(i)) {
			prepared++
			total += writeCost(query(i))
		}
	}
	db.ws.stmts.Range(func(k, _ any) bool {
		if !strings.HasPrefix(k.(string), "SELECT ") {
			total += writeCost(k.(string))
		}
		return true
	})
	if total > maxWriteParams {
		t.Errorf("the writer's prepared statements bind %d parameters; want at most %d", total, maxWriteParams)
	}
	if prepared == 0 || prepared == shapes {
		t.Errorf("%d of %d statements of %d parameters prepared; want some, not all (bound %d)", prepared, shapes, params, maxWriteParams)
	}
}
