package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Backup writes a consistent copy of the database to a new file at path,
// while other connections and processes go on reading and writing.
//
// It runs VACUUM INTO on a read connection: the copy is the snapshot of one
// read transaction, so it holds every transaction committed before Backup
// began, including those still only in the write-ahead log (a plain copy
// of the main file misses them), and it never takes the write lock. The
// copy is a compact, self-contained database in rollback-journal mode,
// without -wal or -shm files; opening it switches it to WAL.
//
// Backup never overwrites: an existing path, even an empty file, is
// invalid input (budget.ErrInvalid) and is left untouched. Backup creates
// the file itself (O_EXCL, mode 0600, so the copy is as private as the
// database), lets SQLite fill it (VACUUM INTO accepts an empty target) and
// fsyncs it and its directory, which SQLite does not do for VACUUM INTO.
// On failure the partial file is removed. Errors name path.
func (db *DB) Backup(ctx context.Context, path string) (err error) {
	if path == "" {
		return budget.Invalid("file", path, "a backup path is required")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case errors.Is(err, os.ErrExist):
		return budget.Invalid("file", path, "already exists; a backup never overwrites a file")
	case err != nil:
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(abs)
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			os.Remove(abs)
		}
	}()
	// A URI, as Open uses: a plain name that starts with "file:" or holds
	// '?' would otherwise be read as one.
	into := "file:" + (&url.URL{Path: abs}).EscapedPath()
	conn, err := db.r.Conn(ctx)
	if err != nil {
		return fmt.Errorf("backup to %s: %w", path, db.wrap(err))
	}
	defer conn.Close()
	// The read pool is query_only, which refuses VACUUM INTO although it
	// writes nothing to this database: lift it on this connection for the
	// one statement. The connection stays read-only at the file level
	// (mode=ro), so this database still cannot be written through it.
	if _, err := conn.ExecContext(ctx, "PRAGMA query_only = 0"); err != nil {
		return fmt.Errorf("backup to %s: %w", path, db.wrap(err))
	}
	_, err = conn.ExecContext(ctx, "VACUUM INTO ?", into)
	if _, qerr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA query_only = 1"); qerr != nil {
		// Never hand a writable connection back to the read pool.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	if err != nil {
		// Not db.wrap: a full disk or an unwritable file here is the
		// backup's, not the database's.
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	if err := syncFile(abs); err != nil {
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	if err := syncFile(filepath.Dir(abs)); err != nil {
		return fmt.Errorf("backup to %s: sync directory: %w", path, err)
	}
	return nil
}

// syncFile fsyncs the file or directory at path.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	return errors.Join(err, f.Close())
}
