package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/sqlite"
)

func TestOpenRefusesBadFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	notDB := filepath.Join(dir, "notes.txt")
	content := []byte("this is not a database, and it must stay exactly like this\n")
	if err := os.WriteFile(notDB, content, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := sqlite.Open(ctx, notDB, tokenbudget.SQLiteSchema, sqlite.Options{Create: true})
	if err == nil || !strings.Contains(err.Error(), "not a SQLite database") {
		t.Fatalf("Open(text file) = %v; want a not-a-database error", err)
	}
	if got, _ := os.ReadFile(notDB); string(got) != string(content) {
		t.Fatalf("the refused file changed: %q", got)
	}
	missing := filepath.Join(dir, "missing.db")
	if _, err := sqlite.Open(ctx, missing, tokenbudget.SQLiteSchema, sqlite.Options{}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Open(missing) = %v; want an error naming the path", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("Open without Create created the file")
	}
	created := filepath.Join(dir, "new.db")
	db, err := sqlite.Open(ctx, created, tokenbudget.SQLiteSchema, sqlite.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if fi, _ := os.Stat(created); fi.Mode().Perm() != 0o600 {
		t.Fatalf("new database mode = %v; want 0600", fi.Mode().Perm())
	}
}

func TestSchemaVersions(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "budget.db")
	// An empty version-0 file is refused without Create (it is what a
	// killed copy leaves; a read-only tool must not write a schema into
	// it), and migrated to the current schema with it.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if db, err := sqlite.Open(ctx, path, tokenbudget.SQLiteSchema, sqlite.Options{}); err == nil || !strings.Contains(err.Error(), path) {
		if db != nil {
			db.Close()
		}
		t.Fatalf("Open(empty file) without Create: got %v; want an error naming %s", err, path)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("the empty file after a refused Open: %v, %v; want it still empty", fi, err)
	}
	db, err := sqlite.Open(ctx, path, tokenbudget.SQLiteSchema, sqlite.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(ctx, func(tx budget.Tx) error {
		_, err := tx.Limits(ctx, "")
		return err
	})
	if err != nil {
		t.Fatalf("migrated schema unusable: %v", err)
	}
	// Stamp a newer version: this build must refuse it.
	raw, err := sqlite.Open(ctx, path, tokenbudget.SQLiteSchema, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.SetUserVersion(ctx, sqlite.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	db.Close()
	_, err = sqlite.Open(ctx, path, tokenbudget.SQLiteSchema, sqlite.Options{})
	if !errors.Is(err, budget.ErrSchemaTooNew) {
		t.Fatalf("Open(newer schema) = %v; want ErrSchemaTooNew", err)
	}
}

func TestOpenLeavesForeignDatabasesAlone(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('keep me')`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	before, _ := os.ReadFile(path)
	_, err = sqlite.Open(ctx, path, tokenbudget.SQLiteSchema, sqlite.Options{Create: true})
	if err == nil || !strings.Contains(err.Error(), "not a tokenbudget database") {
		t.Fatalf("Open(another application's database) = %v; want refused", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("opening another application's database changed it")
	}
}
