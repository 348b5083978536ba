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

// Many handles create one cold counter row at once through Apply: the row
// ends up holding every event once, whichever created it.
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
	ref := budget.WindowRef{Limit: &l, Start: start, End: start.Add(time.Hour)}
	const n = 8
	stores := make([]budget.Store, n)
	for i := range stores {
		stores[i] = open()
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := stores[i].Update(ctx, func(tx budget.Tx) error {
				ev := budget.Usage{Key: "k", RequestID: fmt.Sprint("r", i), Input: int64(i + 1), At: start.Add(time.Minute)}
				_, _, err := tx.Apply(ctx, &budget.WriteSet{
					Events:   []budget.EventWrite{{Usage: ev, Adds: []budget.CounterAdd{{Counter: 0, Amount: ev.Input}}}},
					Counters: []budget.CounterWrite{{Ref: ref, Create: true}},
				})
				return err
			})
			if err != nil {
				t.Errorf("Update: %v", err)
			}
		}()
	}
	wg.Wait()
	var ws []budget.WindowState
	err := first.View(ctx, func(tx budget.Tx) error {
		var err error
		ws, err = tx.Windows(ctx, []budget.WindowRef{ref}, start)
		return err
	})
	if err != nil || !ws[0].Stored || ws[0].Used != n*(n+1)/2 {
		t.Fatalf("counter = %+v, %v; want a stored row with %d", ws, err, n*(n+1)/2)
	}
	if s := stores[0].(*postgres.DB).Stats(); s.Failures != 0 {
		t.Errorf("store failures = %d", s.Failures)
	}
}
