package sqlite_test

import (
	"context"
	"errors"
	"flag"
	"path/filepath"
	"sync"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/sqlite"
)

// stress turns the bounded loops of the race tests into timed ones:
//
//	go test -race -run 'NeverDoubleCounts|CountersReacquired' ./store/sqlite/ -stress
var stress = flag.Bool("stress", false, "run the race tests' loops for longer (timed)")

// openStore opens (creating) the SQLite database at path; it is closed by
// t.Cleanup.
func openStore(t testing.TB, path string) *sqlite.DB {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, tokenbudget.SQLiteSchema, sqlite.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newTracker starts a Tracker on s with no background sweep, after mod
// changed its config. t.Cleanup closes it and fails the test if Close
// reports unwritten operations; tests that leave some close it first.
func newTracker(t testing.TB, s budget.Store, mod func(*budget.Config)) *budget.Tracker {
	t.Helper()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	// Failure tests wait for the writer's retries: capped low, they take
	// milliseconds rather than the default's seconds.
	cfg.MaxRetryBackoff = 20 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	tr, err := budget.New(context.Background(), s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tr
}

func tmpDB(t testing.TB) string { return filepath.Join(t.TempDir(), "x.db") }

// fixed is a clock stopped at a Monday, 09:00 UTC, for Config.Now.
func fixed() time.Time { return time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC) }

// landing watches a store's writes, so a test can wait for the next one
// that lands. (Writer behaviour under failing writes is tested in budget/
// on a memstore behind budget/internal/faultstore; here it serves what is
// about SQLite.)
type landing struct {
	budget.Store
	mu        sync.Mutex
	succeeded chan struct{} // closed at the next successful write
}

func (f *landing) Update(ctx context.Context, fn func(budget.Tx) error) error {
	err := f.Store.Update(ctx, fn)
	if err == nil {
		f.mu.Lock()
		if f.succeeded != nil {
			close(f.succeeded)
			f.succeeded = nil
		}
		f.mu.Unlock()
	}
	return err
}

// next returns a wait for the next successful write.
func (f *landing) next() func(context.Context) error {
	f.mu.Lock()
	if f.succeeded == nil {
		f.succeeded = make(chan struct{})
	}
	ch := f.succeeded
	f.mu.Unlock()
	return func(ctx context.Context) error { return waitClosed(ctx, ch, "no write succeeded") }
}

func waitClosed(ctx context.Context, ch <-chan struct{}, what string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return errors.New(what + " within 30s")
	}
}

// within fails the test unless ch yields before d passes, and returns what
// it yielded. d bounds a hang; it is not a timing the test relies on.
func within[T any](t *testing.T, d time.Duration, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s still blocked after %v", what, d)
		var zero T
		return zero
	}
}
