package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
)

const backupHelp = `usage: budget backup [--db PATH] FILE

Writes a consistent copy of the SQLite database to FILE, a new file (mode
0600), while proxies and other commands go on using the database. The copy
holds every write committed before the backup began, including those still
in the write-ahead log, which a plain cp of the database file misses; it is
fsynced before the command returns, and 'budget verify --db FILE' passes on
it. The copy is written to a temporary file beside FILE and moved into
place once complete, so a killed or failed backup never leaves a file at
FILE. FILE must not exist: a backup never overwrites (exit 2). Takes no write
lock and writes nothing to the database.

To restore: stop every process using the database, replace the database
file with the copy, delete any budget.db-wal and budget.db-shm files left
next to it, then run 'budget verify'.

A PostgreSQL database is backed up with pg_dump, not with this command
(exit 2).

`

// backuper is a store that can copy itself to a new file (SQLite).
type backuper interface {
	Backup(ctx context.Context, path string) error
}

func (m *Main) runBackup(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("backup")
	dsn := m.dbFlag(fs)
	pos, err := m.parseArgs(fs, backupHelp, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usagef("backup", "missing FILE: the path of the backup to write")
	case len(pos) > 1:
		return usagef("backup", "unexpected argument %q", pos[1])
	case strings.TrimSpace(*dsn) == "":
		return budget.Invalid("db", *dsn, "a database path is required")
	case isPostgres(*dsn):
		return budget.Invalid("db", tokenbudget.RedactDSN(*dsn),
			`budget backup copies SQLite files; back up PostgreSQL with pg_dump (pg_dump --format=custom --file=budget.dump "$BUDGET_DB") and restore with pg_restore`)
	}
	file := pos[0]
	if file == "" {
		return budget.Invalid("file", file, "a backup path is required")
	}
	if _, err := os.Lstat(file); err == nil {
		return budget.Invalid("file", file, "already exists; a backup never overwrites a file")
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("backup to %s: %w", file, err)
	}
	s, err := tokenbudget.OpenStore(ctx, *dsn, tokenbudget.Options{})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close database: %w", cerr))
		}
	}()
	b, ok := s.(backuper)
	if !ok {
		return fmt.Errorf("backup: the %T store cannot copy itself", s)
	}
	if err := b.Backup(ctx, file); err != nil {
		return err
	}
	_, err = fmt.Fprintf(m.Stdout, "%s backed up to %s\n", *dsn, file)
	return err
}
