package store_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store"
)

// The test binary doubles as the child process of the multi-process tests:
// TB_CHILD names what the child does, on the database at TB_DB.
func TestMain(m *testing.M) {
	if role := os.Getenv("TB_CHILD"); role != "" {
		if err := child(role, os.Getenv("TB_DB"), os.Getenv("TB_ARG")); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(role, path, arg string) error {
	ctx := context.Background()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	db, err := tokenbudget.Open(ctx, path, tokenbudget.Options{Config: &cfg})
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
	case "reserve":
		admitted := 0
		for range n {
			_, err := db.Reserve(ctx, budget.Request{Key: "k", Estimate: budget.Estimate{Tokens: 70}}, time.Minute)
			var ex *budget.ExceededError
			switch {
			case err == nil:
				admitted++
			case !errors.As(err, &ex):
				return err
			}
		}
		fmt.Println(admitted)
		return nil
	case "probefail":
		for range n {
			if _, err := db.ProbeFailed(ctx, "p"); err != nil {
				return err
			}
		}
		return nil
	case "claim":
		pr := &budget.Prober{Tracker: db.Tracker, ClaimTTL: time.Hour, Probe: func(context.Context, string) error {
			fmt.Println("probing")
			select {} // hold the claim until killed
		}}
		_, err := pr.RunOnce(ctx)
		return err
	case "hold":
		for range n {
			if _, err := db.Reserve(ctx, budget.Request{Key: "k", Estimate: budget.Estimate{Tokens: 10}}, time.Minute); err != nil {
				return err
			}
		}
		fmt.Println("ready")
		select {} // wait for SIGKILL
	}
	return fmt.Errorf("unknown role %q", role)
}

func spawn(t *testing.T, role, path string, arg int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TB_CHILD="+role, "TB_DB="+path, "TB_ARG="+strconv.Itoa(arg))
	cmd.Stderr = os.Stderr
	return cmd
}

func openTracker(t *testing.T, path string, now func() time.Time) *tokenbudget.DB {
	t.Helper()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	cfg.RefreshInterval = 0
	if now != nil {
		cfg.Now = now
	}
	db, err := tokenbudget.Open(context.Background(), path, tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	return db
}

func TestTwoProcessesRecordExactly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "budget.db")
	db := openTracker(t, path, nil)
	max := int64(1 << 40)
	l, _, err := db.SetLimit(context.Background(), budget.LimitSpec{Key: "k", Window: "daily", Max: &max})
	if err != nil {
		t.Fatal(err)
	}
	const per = 3000
	var wg sync.WaitGroup
	for range 2 {
		cmd := spawn(t, "record", path, per)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Run(); err != nil {
				t.Errorf("child: %v", err)
			}
		}()
	}
	wg.Wait()
	d, err := db.Check(context.Background(), budget.Request{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.Limits[0].Used, int64(2*per*4); got != want || d.Limits[0].Limit.ID != l.ID {
		t.Fatalf("used after two processes = %d; want exactly %d", got, want)
	}
	if s := db.Store().Stats(); s.Failures != 0 {
		t.Errorf("store failures = %d; want 0", s.Failures)
	}
	drift, err := db.Verify(context.Background())
	if err != nil || len(drift) != 0 {
		t.Fatalf("Verify = %v, %v", drift, err)
	}
}

func TestFourProcessesReserveExactly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "budget.db")
	db := openTracker(t, path, nil)
	max := int64(1000)
	if _, _, err := db.SetLimit(context.Background(), budget.LimitSpec{Key: "k", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for range 4 {
		cmd := spawn(t, "reserve", path, 10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("child: %v", err)
				return
			}
			n, err := strconv.Atoi(strings.TrimSpace(string(out)))
			if err != nil {
				t.Errorf("child output %q: %v", out, err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != 1000/70 {
		t.Fatalf("4 processes admitted %d reservations of 70 under 1000; want exactly %d", total, 1000/70)
	}
}

func TestRecoverAfterSIGKILL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "budget.db")
	clock := time.Now()
	db := openTracker(t, path, func() time.Time { return clock })
	ctx := context.Background()
	for _, s := range []budget.LimitSpec{{Key: "k", Window: "daily"}, {Key: "k", Metric: "concurrent"}} {
		max := int64(1000)
		if _, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: s.Key, Window: s.Window, Metric: s.Metric, Max: &max}); err != nil {
			t.Fatal(err)
		}
	}
	cmd := spawn(t, "hold", path, 5)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("child said %q; want ready", line)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	byMetric := func() map[budget.Metric]budget.Status {
		d, err := db.Check(ctx, budget.Request{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		m := map[budget.Metric]budget.Status{}
		for _, s := range d.Limits {
			m[s.Limit.Metric] = s
		}
		return m
	}
	st := byMetric()
	if st[budget.MetricTokens].Reserved != 50 || st[budget.MetricConcurrent].Used != 5 {
		t.Fatalf("before recovery reserved=%d leases=%d; want 50 and 5", st[budget.MetricTokens].Reserved, st[budget.MetricConcurrent].Used)
	}
	clock = clock.Add(2 * time.Minute)
	res, err := db.Recover(ctx, clock)
	if err != nil || res.ReleasedReservations != 5 || res.ReleasedLeases != 5 {
		t.Fatalf("Recover = %+v, %v; want 5 reservations and 5 leases", res, err)
	}
	// The parent's clock is now past the holds' expiry, so read at the
	// child's instant to prove the rows themselves are gone.
	clock = clock.Add(-2 * time.Minute)
	st = byMetric()
	if st[budget.MetricTokens].Reserved != 0 || st[budget.MetricConcurrent].Used != 0 {
		t.Fatalf("after recovery reserved=%d leases=%d; want 0", st[budget.MetricTokens].Reserved, st[budget.MetricConcurrent].Used)
	}
}

func TestOpenRefusesBadFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	notDB := filepath.Join(dir, "notes.txt")
	content := []byte("this is not a database, and it must stay exactly like this\n")
	if err := os.WriteFile(notDB, content, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := store.Open(ctx, notDB, tokenbudget.SQLiteSchema, store.Options{Create: true})
	if err == nil || !strings.Contains(err.Error(), "not a SQLite database") {
		t.Fatalf("Open(text file) = %v; want a not-a-database error", err)
	}
	if got, _ := os.ReadFile(notDB); string(got) != string(content) {
		t.Fatalf("the refused file changed: %q", got)
	}
	missing := filepath.Join(dir, "missing.db")
	if _, err := store.Open(ctx, missing, tokenbudget.SQLiteSchema, store.Options{}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Open(missing) = %v; want an error naming the path", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("Open without Create created the file")
	}
	created := filepath.Join(dir, "new.db")
	db, err := store.Open(ctx, created, tokenbudget.SQLiteSchema, store.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if fi, _ := os.Stat(created); fi.Mode().Perm() != 0o600 {
		t.Fatalf("new database mode = %v; want 0600", fi.Mode().Perm())
	}
}

func TestSchemaVersions(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "budget.db")
	// An empty version-0 file is migrated to the current schema.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, path, tokenbudget.SQLiteSchema, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(ctx, func(tx budget.Tx) error {
		_, err := tx.Limits(ctx, "")
		return err
	})
	if err != nil {
		t.Fatalf("migrated schema unusable: %v", err)
	}
	// Stamp a newer version: this build must refuse it.
	raw, err := store.Open(ctx, path, tokenbudget.SQLiteSchema, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.SetUserVersion(ctx, store.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	db.Close()
	_, err = store.Open(ctx, path, tokenbudget.SQLiteSchema, store.Options{})
	if !errors.Is(err, budget.ErrSchemaTooNew) {
		t.Fatalf("Open(newer schema) = %v; want ErrSchemaTooNew", err)
	}
}

func TestTwoProcessesProbeFailed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "budget.db")
	db := openTracker(t, path, nil)
	ctx := context.Background()
	if _, err := db.Park(ctx, "p", budget.RateLimited, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		cmd := spawn(t, "probefail", path, 200)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Run(); err != nil {
				t.Errorf("child: %v", err)
			}
		}()
	}
	wg.Wait()
	p, err := db.ProviderState(ctx, "p")
	if err != nil || p.ProbeFailures != 400 {
		t.Fatalf("probe failures = %d, %v; want 400 from two processes", p.ProbeFailures, err)
	}
}

func TestProbeClaimAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "budget.db")
	clock := time.Now().Add(time.Hour) // past the park's resume-at
	db := openTracker(t, path, func() time.Time { return clock })
	ctx := context.Background()
	if _, err := db.ParkAt(ctx, "p", budget.RateLimited, time.Second, nil, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	cmd := spawn(t, "claim", path, 0)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "probing" {
		t.Fatalf("child said %q; want probing", line)
	}
	pr := &budget.Prober{Tracker: db.Tracker, Probe: func(context.Context, string) error {
		t.Error("probed a provider another process holds the claim of")
		return nil
	}}
	rep, err := pr.RunOnce(ctx)
	if err != nil || rep.Probed != 0 {
		t.Fatalf("RunOnce while another process probes = %+v, %v; want nothing probed", rep, err)
	}
	// Once the claim expires, this process may probe.
	clock = clock.Add(2 * time.Hour)
	pr.Probe = func(context.Context, string) error { return nil }
	if rep, err := pr.RunOnce(ctx); err != nil || rep.Recovered != 1 {
		t.Fatalf("RunOnce after the claim expired = %+v, %v; want recovered", rep, err)
	}
}

func TestOpenLeavesForeignDatabasesAlone(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('keep me')`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	before, _ := os.ReadFile(path)
	_, err = store.Open(ctx, path, tokenbudget.SQLiteSchema, store.Options{Create: true})
	if err == nil || !strings.Contains(err.Error(), "not a tokenbudget database") {
		t.Fatalf("Open(another application's database) = %v; want refused", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("opening another application's database changed it")
	}
}

func TestReadsDoNotWaitForTheWriteLock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "budget.db")
	db := openTracker(t, path, nil)
	max := int64(100)
	if _, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "1h", Max: &max}); err != nil {
		t.Fatal(err)
	}
	// Another process holds the write lock for the whole test.
	holder, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	tx, err := holder.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// A read-only tool opens the file and reads while the lock is held; with
	// a 1s busy timeout, waiting for the lock would fail the context.
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	ro, err := store.Open(cctx, path, tokenbudget.SQLiteSchema, store.Options{BusyTimeout: time.Second})
	if err != nil {
		t.Fatalf("Open while another process writes = %v; want no wait for the write lock", err)
	}
	defer ro.Close()
	err = ro.View(cctx, func(tx budget.Tx) error {
		ls, err := tx.Limits(cctx, "k")
		if err == nil && len(ls) != 1 {
			err = fmt.Errorf("limits = %v", ls)
		}
		return err
	})
	if err != nil {
		t.Fatalf("View while another process writes = %v", err)
	}
}
