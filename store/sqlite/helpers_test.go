package sqlite_test

import (
	"context"
	"errors"
	"flag"
	"path/filepath"
	"sync"
	"sync/atomic"
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

// errInjected is what flaky's writes fail with.
var errInjected = errors.New("disk I/O error (injected)")

// flaky fails every write while fail is set. (Writer behaviour under
// failing writes is tested in budget/ on a memstore behind
// budget/internal/faultstore; here it serves what is about SQLite.)
type flaky struct {
	budget.Store
	fail      atomic.Bool
	mu        sync.Mutex
	succeeded chan struct{} // closed at the next successful write
	refused   chan struct{} // closed at the next refused write
}

func (f *flaky) Update(ctx context.Context, fn func(budget.Tx) error) error {
	if f.fail.Load() {
		f.fire(&f.refused)
		return errInjected
	}
	err := f.Store.Update(ctx, fn)
	if err == nil {
		f.fire(&f.succeeded)
	}
	return err
}

// fire closes *ch, if armed, and disarms it.
func (f *flaky) fire(ch *chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *ch != nil {
		close(*ch)
		*ch = nil
	}
}

// heal stops the failures and returns a wait for the next successful write.
func (f *flaky) heal() func(context.Context) error {
	ch := f.arm(&f.succeeded)
	f.fail.Store(false)
	return func(ctx context.Context) error { return waitClosed(ctx, ch, "no write succeeded") }
}

// arm returns the channel *ch, made if need be, that Update closes at the
// next write of its kind.
func (f *flaky) arm(ch *chan struct{}) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *ch == nil {
		*ch = make(chan struct{})
	}
	return *ch
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

// gated holds every write at a gate while it is closed: Update reports its
// arrival on arrived, then waits for the gate to open.
type gated struct {
	budget.Store
	arrived chan struct{} // one send per write that reached a closed gate
	mu      sync.Mutex
	gate    chan struct{} // nil while open
}

func newGated(s budget.Store) *gated { return &gated{Store: s, arrived: make(chan struct{}, 64)} }

// close closes the gate: writes wait from now on.
func (g *gated) close() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

// open lets the waiting writes and all later ones through.
func (g *gated) open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (g *gated) Update(ctx context.Context, fn func(budget.Tx) error) error {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		g.arrived <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Store.Update(ctx, fn)
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
