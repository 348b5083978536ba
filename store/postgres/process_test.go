package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/postgres"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// The test binary doubles as the child process of the multi-process cases.
func TestMain(m *testing.M) { storetest.Main(m, openPostgres) }

func openPostgres(ctx context.Context, dsn string) (budget.Store, error) {
	return postgres.Open(ctx, dsn, postgres.Options{})
}

// TestProcesses runs OS processes on one PostgreSQL schema (skipped
// without BUDGET_TEST_POSTGRES).
func TestProcesses(t *testing.T) {
	storetest.RunProcesses(t, storetest.Processes{NewDSN: freshSchema, Open: openPostgres})
}

// Many handles create one cold counter row at once: exactly one reports
// created, and the row holds every event once.
func TestCreateCounterRace(t *testing.T) {
	ctx := context.Background()
	open := newPostgres(t)
	l := budget.Limit{ID: "lim_race", Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricTokens, Max: 1 << 40,
		Window: budget.Window{Kind: budget.Fixed, Length: time.Hour}, Enabled: true}
	first := open()
	if err := first.Update(ctx, func(tx budget.Tx) error { return tx.InsertLimit(ctx, l, time.Now()) }); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	const n = 8
	stores := make([]budget.Store, n)
	for i := range stores {
		stores[i] = open()
	}
	var wg sync.WaitGroup
	created := make([]bool, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := stores[i].Update(ctx, func(tx budget.Tx) error {
				ev := budget.Usage{Key: "k", RequestID: fmt.Sprint("r", i), Input: int64(i + 1), At: start.Add(time.Minute)}
				if _, err := tx.InsertUsage(ctx, []budget.Usage{ev}); err != nil {
					return err
				}
				found, err := tx.AddCounters(ctx, []budget.CounterDelta{{LimitID: l.ID, WindowStart: start, Delta: ev.Input}})
				if err != nil || found[0] {
					created[i] = false
					return err
				}
				created[i], err = tx.CreateCounter(ctx, &l, start, start.Add(time.Hour), ev.Input)
				return err
			})
			if err != nil {
				t.Errorf("Update: %v", err)
			}
		}()
	}
	wg.Wait()
	nCreated := 0
	for _, c := range created {
		if c {
			nCreated++
		}
	}
	var used int64
	err := first.View(ctx, func(tx budget.Tx) error {
		var err error
		used, _, err = tx.Counter(ctx, l.ID, "", start)
		return err
	})
	if err != nil || nCreated != 1 || used != n*(n+1)/2 {
		t.Fatalf("created %d times, used %d, %v; want created once and used %d", nCreated, used, err, n*(n+1)/2)
	}
	if s := stores[0].(*postgres.DB).Stats(); s.Failures != 0 {
		t.Errorf("store failures = %d", s.Failures)
	}
}
