// Regression tests from an independent review: each reproduced a bug in
// the writer, the cache or the prober before it was fixed.
package store_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store"
)

var sleepBetween = 50 * time.Microsecond

var refreshes = []time.Duration{0, time.Millisecond}

var runFor = 400 * time.Millisecond

func openStore(t testing.TB, path string) *store.DB {
	t.Helper()
	schema := tokenbudget.SQLiteSchema
	s, err := store.Open(context.Background(), path, schema, store.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newTracker(t testing.TB, s budget.Store, mod func(*budget.Config)) *budget.Tracker {
	t.Helper()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	if mod != nil {
		mod(&cfg)
	}
	tr, err := budget.New(context.Background(), s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func tmpDB(t testing.TB) string { return filepath.Join(t.TempDir(), "x.db") }

var _ = time.Second
