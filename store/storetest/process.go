package storetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// The multi-process cases run real OS processes on one database: the test
// binary doubles as the child, which Main recognises by its environment.
// Each child opens its own handle with the backend's OpenDSN, starts a
// Tracker on it and plays one role.

// OpenDSN opens a new handle to the database dsn names. Children call it
// too, so it may depend on nothing but dsn.
type OpenDSN func(ctx context.Context, dsn string) (budget.Store, error)

// Processes is a backend as the multi-process cases see it.
type Processes struct {
	// NewDSN makes a fresh, empty database for one test, dropped by
	// t.Cleanup, and returns the name Open takes.
	NewDSN func(t testing.TB) string
	// Open opens a handle to it, in the test and in every child.
	Open OpenDSN
}

// goroutinesPerChild times the four children of the exactness cases make
// 64 concurrent callers.
const goroutinesPerChild = 16

const (
	envRole = "TOKENBUDGET_STORETEST_CHILD"
	envDSN  = "TOKENBUDGET_STORETEST_DSN"
	envArg  = "TOKENBUDGET_STORETEST_ARG"
)

// Main is the TestMain of a backend's test package that runs
// RunProcesses: in a child it plays the role its environment names on a
// handle from open and exits; otherwise it runs the tests.
func Main(m *testing.M, open OpenDSN) {
	if role := os.Getenv(envRole); role != "" {
		if err := child(role, os.Getenv(envDSN), os.Getenv(envArg), open); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(role, dsn, arg string, open OpenDSN) error {
	ctx := context.Background()
	s, err := open(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	cfg.Leases = strings.HasPrefix(role, "lease")
	cfg.LeaseJournal = journalDir(dsn)
	if role == "leasekill" || role == "leaseload" {
		// Commits are written only when a refill makes the writer write:
		// the last ones are in the journal alone when the child is killed.
		cfg.BatchInterval = time.Hour
	}
	tr, err := budget.New(ctx, s, cfg)
	if err != nil {
		return err
	}
	defer tr.Close(ctx)
	n, err := strconv.Atoi(arg)
	if err != nil {
		return fmt.Errorf("argument %q: %w", arg, err)
	}
	if fn := leaseRoles[role]; fn != nil {
		return fn(ctx, tr, n)
	}
	switch role {
	case "record":
		err := concurrently(goroutinesPerChild, func(g int) error {
			for i := range n {
				u := budget.Usage{RequestID: fmt.Sprintf("%d-%d-%d", os.Getpid(), g, i), Key: "k", Provider: "p", Model: "m", Input: 3, Output: 1}
				if err := tr.Record(ctx, u); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if _, err := tr.Flush(ctx); err != nil {
			return err
		}
		fmt.Println(tr.Stats().Failures)
		return nil
	case "reserve", "reservecommit", "teamreserve":
		var mu sync.Mutex
		admitted := 0
		err := concurrently(goroutinesPerChild, func(g int) error {
			key := "k"
			if role == "teamreserve" { // half the goroutines on each key of team eng
				key = []string{"ka", "kb"}[g%2]
			}
			for range n {
				r, err := tr.Reserve(ctx, budget.Request{Key: key, Provider: "p", Model: "m", Estimate: budget.Estimate{Tokens: estimate}}, time.Minute)
				var ex *budget.ExceededError
				if errors.As(err, &ex) {
					continue
				}
				if err != nil {
					return err
				}
				if role != "reserve" {
					if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 50, Output: estimate - 50}); err != nil {
						return err
					}
				}
				mu.Lock()
				admitted++
				mu.Unlock()
			}
			return nil
		})
		fmt.Println(admitted)
		return err
	case "leasereservecommit":
		// Until refused, so every lease's room is taken or given back.
		var admitted atomic.Int64
		err := concurrently(goroutinesPerChild, func(int) error {
			for {
				r, err := tr.Reserve(ctx, budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Tokens: estimate}}, time.Minute)
				var ex *budget.ExceededError
				if errors.As(err, &ex) {
					return nil
				}
				if err != nil {
					return err
				}
				if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 50, Output: estimate - 50}); err != nil {
					return err
				}
				admitted.Add(1)
			}
		})
		if err != nil {
			return err
		}
		leased := tr.Stats().Leased
		if err := tr.Close(ctx); err != nil {
			return err
		}
		// Both counts: the parent requires some admissions to have come
		// from leases, or the case would prove only the store path.
		fmt.Println(admitted.Load(), leased)
		return nil
	case "mixed":
		if err := mixed(ctx, tr, n); err != nil {
			return err
		}
		if _, err := tr.Flush(ctx); err != nil {
			return err
		}
		fmt.Println(s.Stats().Retries)
		return nil
	case "setlimit":
		max := int64(n)
		_, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max})
		return err
	case "probefail":
		for range n {
			if _, err := tr.ProbeFailed(ctx, "p"); err != nil {
				return err
			}
		}
		return nil
	case "claim":
		pr := &budget.Prober{Tracker: tr, ClaimTTL: time.Hour, Probe: func(context.Context, string) error {
			fmt.Println("probing")
			select {} // hold the claim until killed
		}}
		_, err := pr.RunOnce(ctx)
		return err
	case "hold":
		for range n {
			if _, err := tr.Reserve(ctx, budget.Request{Key: "k", Estimate: budget.Estimate{Tokens: 10}}, time.Minute); err != nil {
				return err
			}
		}
		fmt.Println("ready")
		select {} // wait for SIGKILL
	}
	return fmt.Errorf("unknown role %q", role)
}

// mixed runs reservations, commits, releases and plain records on limits
// that overlap, from 8 goroutines, so the writer batches them together and
// lock orders cross.
func mixed(ctx context.Context, tr *budget.Tracker, n int) error {
	return concurrently(8, func(g int) error {
		for i := range n {
			req := budget.Request{Key: "k", Provider: fmt.Sprint("p", (g+i)%2), Model: fmt.Sprint("m", i%3), Estimate: budget.Estimate{Input: 5, Output: 5}}
			if g%4 == 3 {
				u := budget.Usage{RequestID: fmt.Sprintf("%d-%d-%d", os.Getpid(), g, i), Key: "k", Provider: req.Provider, Model: req.Model, Input: 2, Output: 1}
				if err := tr.Record(ctx, u); err != nil {
					return err
				}
				continue
			}
			r, err := tr.Reserve(ctx, req, time.Minute)
			var ex *budget.ExceededError
			if errors.As(err, &ex) {
				continue
			}
			if err != nil {
				return err
			}
			if i%5 == 4 {
				err = tr.Release(ctx, r.ID)
			} else {
				_, err = tr.Commit(ctx, r.ID, budget.Usage{Input: 4, Output: 3})
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// journalDir is the lease journal directory of the database dsn, which
// the parent and every child compute alike.
func journalDir(dsn string) string {
	h := fnv.New64a()
	h.Write([]byte(dsn))
	return filepath.Join(os.TempDir(), fmt.Sprintf("tokenbudget-journal-%x", h.Sum64()))
}

// concurrently runs fn(0..n-1) at once and returns the first error.
func concurrently(n int, fn func(g int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = fn(g)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// spawn prepares a child playing role on dsn.
func spawn(role, dsn string, arg int) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+role, envDSN+"="+dsn, envArg+"="+strconv.Itoa(arg))
	cmd.Stderr = os.Stderr
	return cmd
}

// runChildren runs n children of role at once and returns the sum of the
// numbers they print. A child that fails fails the test.
func runChildren(t *testing.T, n int, role, dsn string, arg int) int64 {
	t.Helper()
	if sums := runChildrenSums(t, n, role, dsn, arg); len(sums) > 0 {
		return sums[0]
	}
	return 0
}

// runChildrenSums runs n children of role as runChildren does; each
// prints numbers on one line, and the i-th of the result is the sum of
// their i-th numbers.
func runChildrenSums(t *testing.T, n int, role, dsn string, arg int) []int64 {
	t.Helper()
	var mu sync.Mutex
	var total []int64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := spawn(role, dsn, arg).Output()
			if err != nil {
				t.Errorf("child %s: %v", role, err)
				return
			}
			for i, f := range strings.Fields(string(out)) {
				v, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					t.Errorf("child %s printed %q: %v", role, out, err)
				}
				mu.Lock()
				if i == len(total) {
					total = append(total, 0)
				}
				total[i] += v
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return total
}

// startChild starts a child of role and waits for its first line, which
// must be want. The child is killed by t.Cleanup if still running.
func startChild(t *testing.T, role, dsn string, arg int, want string) *exec.Cmd {
	t.Helper()
	cmd, _, out := pipeChild(t, role, dsn, arg)
	if line, _ := out.ReadString('\n'); strings.TrimSpace(line) != want {
		t.Fatalf("child %s said %q; want %q", role, line, want)
	}
	return cmd
}

// pipeChild starts a child of role with pipes to its stdin and from its
// stdout. The child is killed by t.Cleanup if still running.
func pipeChild(t *testing.T, role, dsn string, arg int) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd := spawn(role, dsn, arg)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, stdin, bufio.NewReader(stdout)
}

// openParent opens the test's own handle, closed by t.Cleanup, and starts
// a Tracker on it with the given refresh interval and clock (nil: one
// stopped at the wall clock's now).
func openParent(t *testing.T, p Processes, dsn string, refresh time.Duration, c *Clock) *budget.Tracker {
	t.Helper()
	s, err := p.Open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if c == nil {
		c = NewClock(time.Now())
	}
	return NewTracker(t, s, c, refresh)
}
