package sqlite

import (
	"context"
	"database/sql"
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
// invalid input (budget.ErrInvalid) and is left untouched. The copy is
// written to a temporary file beside path (created O_EXCL, mode 0600, so it
// is as private as the database), fsynced (SQLite does not sync VACUUM
// INTO), and only then linked into place, so path never holds a partial or
// empty copy: a killed backup leaves at most a ".tmp" file, never a file at
// path that a later open would take for a database. On failure the
// temporary file and any -journal, -wal or -shm SQLite left beside it are
// removed: a stale journal would later be rolled into whatever database is
// copied to that name. Errors name path.
func (db *DB) Backup(ctx context.Context, path string) (err error) {
	if path == "" {
		return budget.Invalid("file", path, "a backup path is required")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	switch _, err := os.Lstat(abs); {
	case err == nil:
		return budget.Invalid("file", path, "already exists; a backup never overwrites a file")
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".*.tmp")
	if err != nil {
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			removeCopy(tmp)
		}
	}()
	if err := f.Close(); err != nil {
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	// A URI, as Open uses: a plain name that starts with "file:" or holds
	// '?' would otherwise be read as one.
	into := "file:" + (&url.URL{Path: tmp}).EscapedPath()
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
	err = vacuumInto(ctx, conn, into)
	if _, qerr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA query_only = 1"); qerr != nil {
		// Never hand a writable connection back to the read pool.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	if err != nil {
		// Not db.wrap: a full disk or an unwritable file here is the
		// backup's, not the database's.
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	if err := syncFile(tmp); err != nil {
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	if err := placeCopy(tmp, abs); err != nil {
		if errors.Is(err, os.ErrExist) {
			return budget.Invalid("file", path, "already exists; a backup never overwrites a file")
		}
		return fmt.Errorf("backup to %s: %w", path, err)
	}
	if err := syncFile(filepath.Dir(abs)); err != nil {
		return fmt.Errorf("backup to %s: sync directory: %w", path, err)
	}
	return nil
}

// vacuumInto fills the file at the URI into with a copy of conn's
// database. A variable so a test can fail it as a full disk would.
var vacuumInto = func(ctx context.Context, conn *sql.Conn, into string) error {
	_, err := conn.ExecContext(ctx, "VACUUM INTO ?", into)
	return err
}

// placeCopy moves the finished copy tmp to path. A hard link, unlike a
// rename, fails when path appeared meanwhile, so the copy never replaces a
// file; where the file system has no hard links, a rename after a last
// look is the best it offers.
func placeCopy(tmp, path string) error {
	err := os.Link(tmp, path)
	switch {
	case err == nil:
		return os.Remove(tmp)
	case errors.Is(err, os.ErrExist):
		return err
	}
	if _, serr := os.Lstat(path); serr == nil {
		return os.ErrExist
	}
	return os.Rename(tmp, path)
}

// removeCopy removes a failed copy and the files SQLite may have left
// beside it.
func removeCopy(path string) {
	for _, suffix := range []string{"", "-journal", "-wal", "-shm"} {
		os.Remove(path + suffix)
	}
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
