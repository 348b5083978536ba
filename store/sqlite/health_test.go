package sqlite_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
)

// A database file deleted or replaced under a running store is reported by
// Health: SQLite would keep writing into the unlinked file.
func TestHealthSeesDeletedAndReplacedFile(t *testing.T) {
	path := tmpDB(t)
	s := openStore(t, path)
	defer s.Close()
	if err := s.Health(); err != nil {
		t.Fatalf("Health = %v; want nil", err)
	}
	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	if err := s.Health(); err == nil || !strings.Contains(err.Error(), "deleted") {
		t.Fatalf("Health after the file went away = %v; want it to say deleted", err)
	}
	other := openStore(t, path) // a new file at the same path
	other.Close()
	if err := s.Health(); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("Health after the file was replaced = %v; want it to say replaced", err)
	}
	tr := newTracker(t, s, nil)
	defer tr.Close(context.Background())
	if err := tr.Health(); !errors.Is(err, budget.ErrUnhealthy) {
		t.Fatalf("Tracker.Health = %v; want ErrUnhealthy", err)
	}
}
