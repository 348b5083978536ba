package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/postgres"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// testDSN is the server the tests use, from BUDGET_TEST_POSTGRES; without
// it the test is skipped.
func testDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("BUDGET_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("BUDGET_TEST_POSTGRES is not set: no PostgreSQL to test against (.ci/postgres.sh starts one)")
	}
	return dsn
}

var (
	adminOnce sync.Once
	admin     *sqlx.DB
	adminErr  error
)

// adminDB is one pool per test binary for creating and dropping schemas.
func adminDB(t testing.TB, dsn string) *sqlx.DB {
	t.Helper()
	adminOnce.Do(func() {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			adminErr = err
			return
		}
		admin = sqlx.NewDb(stdlib.OpenDB(*cfg), "pgx")
		admin.SetMaxOpenConns(2)
		adminErr = admin.Ping()
	})
	if adminErr != nil {
		t.Fatalf("connect to %s: %v", postgres.Redact(dsn), scrubbed(adminErr, dsn))
	}
	return admin
}

// freshSchema creates an empty schema for one test, dropped when it ends,
// and returns the DSN whose search_path selects it.
func freshSchema(t testing.TB) string {
	t.Helper()
	dsn := testDSN(t)
	var b [6]byte
	rand.Read(b[:])
	name := "tbt_" + hex.EncodeToString(b[:])
	db := adminDB(t, dsn)
	if _, err := db.Exec(`CREATE SCHEMA ` + name); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec(`DROP SCHEMA ` + name + ` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("BUDGET_TEST_POSTGRES must be a postgres:// URL")
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// scrubbed hides the test DSN's password in err, for messages.
func scrubbed(err error, dsn string) string {
	msg := err.Error()
	if u, perr := url.Parse(dsn); perr == nil {
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return msg
}

// newPostgres makes a fresh schema and opens handles to it.
func newPostgres(t testing.TB) func() budget.Store {
	dsn := freshSchema(t)
	return func() budget.Store {
		db, err := postgres.Open(context.Background(), dsn, postgres.Options{MaxConns: 4})
		if err != nil {
			t.Fatalf("postgres.Open: %v", err) // Open's errors never carry the password
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
}

func TestConformance(t *testing.T) { storetest.Run(t, newPostgres) }

func TestSchemaVersions(t *testing.T) {
	ctx := context.Background()
	dsn := freshSchema(t)
	db, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A second open of a current schema changes nothing.
	again, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	again.Close()
	if err := db.SetSchemaVersion(ctx, postgres.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(ctx, dsn, postgres.Options{})
	if !errors.Is(err, budget.ErrSchemaTooNew) {
		t.Fatalf("Open(newer schema) = %v; want ErrSchemaTooNew", err)
	}
}

// Concurrent first opens of one empty schema: one migrates, the others
// wait for it and find the schema current.
func TestConcurrentMigrations(t *testing.T) {
	ctx := context.Background()
	dsn := freshSchema(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 2})
			if err == nil {
				db.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open: %v", err)
		}
	}
}

func TestWritesFailInView(t *testing.T) {
	ctx := context.Background()
	s := newPostgres(t)()
	err := s.View(ctx, func(tx budget.Tx) error {
		_, _, err := tx.Apply(ctx, &budget.WriteSet{Events: []budget.EventWrite{{Usage: budget.Usage{Key: "k", RequestID: "r"}}}})
		return err
	})
	if err == nil {
		t.Fatal("Apply inside View succeeded")
	}
}

// The password of a DSN never shows in what Open returns, whatever fails:
// a DSN that does not parse, a server that is not there, a wrong password.
func TestErrorsHidePassword(t *testing.T) {
	ctx := context.Background()
	const pw = "s3cr3t-Pa55word"
	cases := []string{
		"postgres://budget:" + pw + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=2",
		"postgresql://budget:" + pw + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=notanumber",
		"postgres://budget:" + pw + "@[::1:bad/db",
		"postgres://budget@127.0.0.1:1/db?password=" + pw + "&sslmode=disable&connect_timeout=2",
		"host=127.0.0.1 port=1 user=budget password=" + pw + " dbname=db sslmode=disable connect_timeout=2",
	}
	if dsn := os.Getenv("BUDGET_TEST_POSTGRES"); dsn != "" {
		u, err := url.Parse(dsn)
		if err == nil {
			u.User = url.UserPassword(u.User.Username(), pw)
			cases = append(cases, u.String())
		}
	}
	for _, dsn := range cases {
		db, err := postgres.Open(ctx, dsn, postgres.Options{ConnAttempts: 1})
		if err == nil {
			db.Close()
			continue // a server that trusts the socket lets any password in
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("Open error shows the password: %v", strings.ReplaceAll(err.Error(), pw, "<PASSWORD>"))
		}
		if red := postgres.Redact(dsn); strings.Contains(red, pw) {
			t.Errorf("Redact kept the password: %s", strings.ReplaceAll(red, pw, "<PASSWORD>"))
		}
	}
}

func TestRedact(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u:pw@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"postgresql://u@h/db", "postgresql://u@h/db"},
		{"postgres://u@h/db?password=pw", "postgres://u@h/db?password=xxxxx"},
		{"host=h user=u password=pw dbname=db", "host=h user=u password=xxxxx dbname=db"},
		{"host=h password='p w' dbname=db", "host=h password=xxxxx dbname=db"},
	} {
		if got := postgres.Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q; want %q", c.in, got, c.want)
		}
	}
}
