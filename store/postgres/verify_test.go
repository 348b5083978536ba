package postgres_test

import (
	"context"
	"testing"

	"github.com/tokenbudget/tokenbudget/store/postgres"
)

// With amcheck installed in a schema the DSN's search_path does not name
// (public, for a store in its own schema), the integrity check finds it
// and checks every index: no problem, no note that it could not.
func TestCheckIntegrityWithAmcheck(t *testing.T) {
	ctx := context.Background()
	db := newPostgres(t)().(*postgres.DB)
	if _, err := adminDB(t, testDSN(t)).Exec(`CREATE EXTENSION IF NOT EXISTS amcheck SCHEMA public`); err != nil {
		t.Skipf("cannot install amcheck here: %v", err)
	}
	problems, notes, err := db.CheckIntegrity(ctx)
	if err != nil || len(problems) != 0 || len(notes) != 0 {
		t.Fatalf("CheckIntegrity = %q, %q, %v; want every index checked, no problem, no note", problems, notes, err)
	}
}
