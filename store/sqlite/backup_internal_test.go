package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A backup that fails as a full disk fails it (SQLite has written part of
// the copy and its journal) leaves nothing in the target's directory: no
// file at the target, no temporary copy, no -journal that a later copy to
// that name would pick up. While the copy is being written, the target does
// not exist, so a backup killed at that point leaves no file there that a
// later open could take for a database. (Not parallel: it replaces
// vacuumInto.)
func TestBackupDiskFullLeavesNothing(t *testing.T) {
	ctx := context.Background()
	db := openInternal(t, "src.db")
	dir := t.TempDir()
	out := filepath.Join(dir, "copy.db")
	real := vacuumInto
	defer func() { vacuumInto = real }()

	full := fmt.Errorf("disk full (injected): %w", syscall.ENOSPC)
	var midCopy []string
	vacuumInto = func(ctx context.Context, conn *sql.Conn, into string) error {
		if err := real(ctx, conn, into); err != nil {
			return err
		}
		// What a full disk leaves: the partial copy and its journal.
		file := strings.TrimPrefix(into, "file:")
		if err := os.WriteFile(file+"-journal", []byte("partial journal"), 0o600); err != nil {
			return err
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			midCopy = append(midCopy, e.Name())
		}
		return full
	}
	err := db.Backup(ctx, out)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), out) {
		t.Errorf("Backup on a full disk: got %v; want the disk-full error naming %s", err, out)
	}
	for _, name := range midCopy {
		if name == "copy.db" {
			t.Errorf("files while the copy was written: %q; want no file at the target until the copy is complete", midCopy)
		}
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("files left after a failed backup: %q (%v); want none", names, err)
	}

	// Once the disk has room again, a backup to the same name succeeds.
	vacuumInto = real
	if err := db.Backup(ctx, out); err != nil {
		t.Fatalf("Backup after the disk has room: %v", err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 || ents[0].Name() != "copy.db" {
		t.Errorf("files after a backup: %v (%v); want only copy.db", ents, err)
	}
}
