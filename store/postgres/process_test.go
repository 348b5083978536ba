package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/postgres"
)

// The test binary doubles as the child process of the multi-process tests:
// TB_CHILD names what the child does, on the database TB_DSN names.
func TestMain(m *testing.M) {
	if role := os.Getenv("TB_CHILD"); role != "" {
		if err := child(role, os.Getenv("TB_DSN"), os.Getenv("TB_ARG")); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(role, dsn, arg string) error {
	ctx := context.Background()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	db, err := tokenbudget.Open(ctx, dsn, tokenbudget.Options{Config: &cfg})
	if err != nil {
		return err
	}
	defer db.Close(ctx)
	n, _ := strconv.Atoi(arg)
	switch role {
	case "record":
		for i := range n {
			u := budget.Usage{RequestID: fmt.Sprintf("%d-%d", os.Getpid(), i), Key: "k", Provider: "p", Model: "m", Input: 3, Output: 1}
			if err := db.Record(ctx, u); err != nil {
				return err
			}
		}
		_, err := db.Flush(ctx)
		return err
	case "reserve", "reservecommit":
		admitted := 0
		for range n {
			r, err := db.Reserve(ctx, budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Tokens: 70}}, time.Minute)
			var ex *budget.ExceededError
			switch {
			case err == nil:
				admitted++
			case !errors.As(err, &ex):
				return err
			}
			if err == nil && role == "reservecommit" {
				if _, err := db.Commit(ctx, r.ID, budget.Usage{Input: 50, Output: 20}); err != nil {
					return err
				}
			}
		}
		fmt.Println(admitted)
		return nil
	case "mixed":
		// Reservations, commits, releases and plain records on limits that
		// overlap, batched together by the writer: lock orders cross.
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n {
					req := budget.Request{Key: "k", Provider: fmt.Sprint("p", (g+i)%2), Model: fmt.Sprint("m", i%3), Estimate: budget.Estimate{Input: 5, Output: 5}}
					if g%4 == 3 {
						u := budget.Usage{RequestID: fmt.Sprintf("%d-%d-%d", os.Getpid(), g, i), Key: "k", Provider: req.Provider, Model: req.Model, Input: 2, Output: 1}
						if err := db.Record(ctx, u); err != nil {
							errs <- err
							return
						}
						continue
					}
					r, err := db.Reserve(ctx, req, time.Minute)
					var ex *budget.ExceededError
					if errors.As(err, &ex) {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					if i%5 == 4 {
						err = db.Release(ctx, r.ID)
					} else {
						_, err = db.Commit(ctx, r.ID, budget.Usage{Input: 4, Output: 3})
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		if _, err := db.Flush(ctx); err != nil {
			return err
		}
		fmt.Println(db.Store().Stats().Retries)
		return nil
	case "setlimit":
		max := int64(n)
		_, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max})
		return err
	case "probefail":
		for range n {
			if _, err := db.ProbeFailed(ctx, "p"); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown role %q", role)
}

func spawn(t *testing.T, role, dsn string, arg int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TB_CHILD="+role, "TB_DSN="+dsn, "TB_ARG="+strconv.Itoa(arg))
	cmd.Stderr = os.Stderr
	return cmd
}

func openTracker(t *testing.T, dsn string, refresh time.Duration) *tokenbudget.DB {
	t.Helper()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	cfg.RefreshInterval = refresh
	db, err := tokenbudget.Open(context.Background(), dsn, tokenbudget.Options{Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	return db
}

// runChildren runs n children of role and returns the sum of the numbers
// they print.
func runChildren(t *testing.T, n int, role, dsn string, arg int) int {
	t.Helper()
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for range n {
		cmd := spawn(t, role, dsn, arg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("child %s: %v", role, err)
				return
			}
			if s := strings.TrimSpace(string(out)); s != "" {
				v, err := strconv.Atoi(s)
				if err != nil {
					t.Errorf("child output %q: %v", out, err)
				}
				mu.Lock()
				total += v
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return total
}

func TestFourProcessesReserveExactly(t *testing.T) {
	dsn := freshSchema(t)
	db := openTracker(t, dsn, 0)
	max := int64(1000)
	if _, _, err := db.SetLimit(context.Background(), budget.LimitSpec{Key: "k", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	if total := runChildren(t, 4, "reserve", dsn, 10); total != 1000/70 {
		t.Fatalf("4 processes admitted %d reservations of 70 under 1000; want exactly %d", total, 1000/70)
	}
}

// Commits racing reservations: a reservation deciding on a limit must never
// see a commit's usage without its freed hold, or the reverse.
func TestFourProcessesReserveCommitExactly(t *testing.T) {
	dsn := freshSchema(t)
	db := openTracker(t, dsn, 0)
	ctx := context.Background()
	max := int64(1000)
	l, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max})
	if err != nil {
		t.Fatal(err)
	}
	if total := runChildren(t, 4, "reservecommit", dsn, 10); total != 1000/70 {
		t.Fatalf("4 processes admitted %d reserve+commit pairs of 70 under 1000; want exactly %d", total, 1000/70)
	}
	d, err := db.Check(ctx, budget.Request{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Limits[0].Limit.ID != l.ID || d.Limits[0].Used != 70*(1000/70) || d.Limits[0].Reserved != 0 {
		t.Fatalf("after the run used/reserved = %d/%d; want %d/0", d.Limits[0].Used, d.Limits[0].Reserved, 70*(1000/70))
	}
	if drift, err := db.Verify(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("Verify = %v, %v", drift, err)
	}
}

func TestTwoProcessesRecordExactly(t *testing.T) {
	dsn := freshSchema(t)
	db := openTracker(t, dsn, 0)
	ctx := context.Background()
	max := int64(1 << 40)
	if _, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	const per = 3000
	runChildren(t, 2, "record", dsn, per)
	d, err := db.Check(ctx, budget.Request{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.Limits[0].Used, int64(2*per*4); got != want {
		t.Fatalf("used after two processes = %d; want exactly %d", got, want)
	}
	if drift, err := db.Verify(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("Verify = %v, %v", drift, err)
	}
}

// A limit lowered by another process is enforced here: at once by Reserve
// (it resolves limits inside its transaction) and by Check once its cached
// definition is older than the refresh interval.
func TestLimitChangeSeenAcrossProcesses(t *testing.T) {
	dsn := freshSchema(t)
	const refresh = 300 * time.Millisecond
	db := openTracker(t, dsn, refresh)
	ctx := context.Background()
	max := int64(1000)
	if _, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	req := budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Tokens: 500}}
	if d, err := db.Check(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("Check before the change = %+v, %v; want allowed", d, err)
	}
	if err := spawn(t, "setlimit", dsn, 100).Run(); err != nil {
		t.Fatalf("child setlimit: %v", err)
	}
	changed := time.Now()
	var ex *budget.ExceededError
	if _, err := db.Reserve(ctx, req, time.Minute); !errors.As(err, &ex) {
		t.Fatalf("Reserve right after another process lowered the limit = %v; want refused", err)
	}
	time.Sleep(refresh - time.Since(changed))
	d, err := db.Check(ctx, req)
	if err != nil || d.Allowed || d.Breach == nil || d.Breach.Limit.Max != 100 {
		t.Fatalf("Check one refresh interval after the change = %+v, %v; want refused by the new limit of 100", d, err)
	}
}

// Four processes mix reservations, commits, releases and records on
// overlapping limits: the batches' lock orders cross, so PostgreSQL may
// detect deadlocks; the store retries them and nothing drifts or leaks.
func TestFourProcessesMixed(t *testing.T) {
	dsn := freshSchema(t)
	db := openTracker(t, dsn, 0)
	ctx := context.Background()
	max := int64(1 << 40)
	for _, s := range []budget.LimitSpec{
		{Key: "k", Window: "daily"},
		{Key: "k", Scope: "provider", ScopeValue: "p0", Window: "1h"},
		{Key: "k", Scope: "provider", ScopeValue: "p1", Window: "1h", Metric: "output"},
		{Key: "k", Scope: "model", ScopeValue: "m1", Window: "1m", Metric: "input"},
		{Key: "k", Scope: "model", ScopeValue: "m2", Metric: "concurrent"},
		{Key: "k", Metric: "requests", Window: "daily"},
	} {
		s.Max = &max
		if _, _, err := db.SetLimit(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	retries := runChildren(t, 4, "mixed", dsn, 60)
	t.Logf("4 processes done in %v with %d store retries", time.Since(start).Round(time.Millisecond), retries)
	if drift, err := db.Verify(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("Verify = %+v, %v", drift, err)
	}
	d, err := db.Check(ctx, budget.Request{Key: "k", Provider: "p0", Model: "m2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range d.Limits {
		if st.Reserved != 0 || st.Limit.Metric == budget.MetricConcurrent && st.Used != 0 {
			t.Errorf("limit %s: reserved %d, used %d after every reservation was settled", st.Limit.ID, st.Reserved, st.Used)
		}
	}
}

func TestTwoProcessesProbeFailed(t *testing.T) {
	dsn := freshSchema(t)
	db := openTracker(t, dsn, 0)
	ctx := context.Background()
	if _, err := db.Park(ctx, "p", budget.RateLimited, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	runChildren(t, 2, "probefail", dsn, 200)
	p, err := db.ProviderState(ctx, "p")
	if err != nil || p.ProbeFailures != 400 {
		t.Fatalf("probe failures = %d, %v; want 400 from two processes", p.ProbeFailures, err)
	}
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

// Limits created while four processes record: every counter row still
// equals the history. Without the limits lock a writer that resolved its
// limits just before a new one committed would leave its events out of the
// new limit's counter, which another writer had seeded without them.
func TestLimitsCreatedWhileRecording(t *testing.T) {
	dsn := freshSchema(t)
	db := openTracker(t, dsn, 0)
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runChildren(t, 4, "record", dsn, 3000)
	}()
	max := int64(1 << 40)
	windows := []string{"daily", "weekly", "monthly"}
	for i := range 60 {
		windows = append(windows, fmt.Sprintf("%dm", i+1))
	}
	for i := 0; ; i++ {
		select {
		case <-done:
			if i < 10 {
				t.Logf("only %d limits were created while the children recorded", i)
			}
			if drift, err := db.Verify(ctx); err != nil || len(drift) != 0 {
				t.Fatalf("Verify = %+v, %v", drift, err)
			}
			return
		case <-time.After(3 * time.Millisecond):
		}
		if i < len(windows) {
			if _, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: windows[i], Max: &max}); err != nil {
				t.Fatal(err)
			}
		}
	}
}
