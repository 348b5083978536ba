package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// testNow is the wall clock of every test run: the default --at and the
// logged_at of rollovers, so output is deterministic.
var testNow = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

// result is what one command did.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs the budget command line args in process.
func run(t testing.TB, args ...string) result {
	t.Helper()
	return runStdin(t, "", args...)
}

// runStdin is run with stdin.
func runStdin(t testing.TB, stdin string, args ...string) result {
	t.Helper()
	return runWith(t, testNow, stdin, args...)
}

// runAt is run with the wall clock reading now instead of testNow: the
// reservation commands, which take no --at, see time pass.
func runAt(t testing.TB, now time.Time, args ...string) result {
	t.Helper()
	return runWith(t, now, "", args...)
}

func runWith(t testing.TB, now time.Time, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Now:    func() time.Time { return now },
		Getenv: func(string) string { return "" },
	}
	err := m.Run(context.Background(), args)
	return result{code: exitCode(err), stdout: out.String(), stderr: errb.String()}
}

// mustRun runs args and fails unless the exit code is want.
func mustRun(t testing.TB, want int, args ...string) result {
	t.Helper()
	return mustRunAt(t, testNow, want, args...)
}

// mustRunAt is mustRun with the wall clock reading now.
func mustRunAt(t testing.TB, now time.Time, want int, args ...string) result {
	t.Helper()
	r := runAt(t, now, args...)
	if r.code != want {
		t.Fatalf("budget %s (clock %s): got %v; want exit %d", strings.Join(args, " "), now.Format(time.RFC3339), r, want)
	}
	return r
}

// tempDB is the path of a database that does not exist yet.
func tempDB(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "budget.db")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// decode parses JSON output into a generic value.
func decode(t testing.TB, s string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("output is not a JSON object: %v\n%s", err, s)
	}
	return v
}

// keys is the sorted field names of a JSON object.
func keys(v any) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func wantKeys(t testing.TB, what string, v any, want ...string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	if got := keys(v); !slices.Equal(got, want) {
		t.Errorf("%s fields: got %v; want %v", what, got, want)
	}
}

var (
	limitFields = []string{"id", "level", "owner", "key", "scope", "scope_value", "metric", "limit", "base_limit", "raises",
		"window", "reset_time", "timezone", "enabled", "alerts"}
	statusFields = append(slices.Clone(limitFields), "user", "window_start", "reset_at", "used", "reserved", "remaining",
		"forecast_used", "exhausts_at")
)

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{nil, 2, "", "Commands:"},
		{[]string{"help"}, 0, "Commands:", ""},
		{[]string{"help"}, 0, "provider park", ""},
		{[]string{"help"}, 0, "recover", ""},
		{[]string{"-h"}, 0, "Commands:", ""},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"limit"}, 2, "", "missing subcommand"},
		{[]string{"limit", "zap"}, 2, "", `unknown subcommand "zap"`},
		{[]string{"limit", "set", "-h"}, 0, "usage: budget limit set", ""},
		{[]string{"limit", "ls", "-h"}, 0, "usage: budget limit ls", ""},
		{[]string{"limit", "rm", "-h"}, 0, "usage: budget limit rm", ""},
		{[]string{"record", "-h"}, 0, "-cache-read", ""},
		{[]string{"import", "-h"}, 0, "usage: budget import", ""},
		{[]string{"check", "--help"}, 0, "usage: budget check", ""},
		{[]string{"inspect", "-h"}, 0, "-rollovers", ""},
		{[]string{"verify", "-h"}, 0, "usage: budget verify", ""},
		{[]string{"check", "--bogus"}, 2, "", "flag provided but not defined: -bogus"},
		{[]string{"check", "--key"}, 2, "", "flag needs an argument: -key"},
		{[]string{"inspect", "extra"}, 2, "", `unexpected argument "extra"`},
		{[]string{"import"}, 2, "", "want one FILE"},
		{[]string{"limit", "rm"}, 2, "", "want exactly one limit id"},
		{[]string{"reserve", "-h"}, 0, "usage: budget reserve", ""},
		{[]string{"commit", "-h"}, 0, "-cache-write", ""},
		{[]string{"release", "-h"}, 0, "usage: budget release", ""},
		{[]string{"recover", "-h"}, 0, "usage: budget recover", ""},
		{[]string{"provider"}, 2, "", "missing subcommand"},
		{[]string{"provider", "-h"}, 0, "provider unpark P", ""},
		{[]string{"provider", "zap"}, 2, "", `unknown subcommand "zap"`},
		{[]string{"provider", "park", "-h"}, 0, "-retry-after", ""},
		{[]string{"provider", "unpark", "-h"}, 0, "usage: budget provider unpark", ""},
		{[]string{"provider", "ls", "-h"}, 0, "usage: budget provider ls", ""},
		{[]string{"commit"}, 2, "", "want exactly one reservation id"},
		{[]string{"release", "a", "b"}, 2, "", "want exactly one reservation id"},
		{[]string{"provider", "park"}, 2, "", "want exactly one provider"},
		{[]string{"provider", "unpark"}, 2, "", "want exactly one provider"},
		{[]string{"recover", "extra"}, 2, "", `unexpected argument "extra"`},
		{[]string{"provider", "ls", "extra"}, 2, "", `unexpected argument "extra"`},
		{[]string{"help"}, 0, "team set", ""},
		{[]string{"team"}, 2, "", "missing subcommand"},
		{[]string{"team", "-h"}, 0, "team set TEAM", ""},
		{[]string{"team", "zap"}, 2, "", `unknown subcommand "zap"`},
		{[]string{"team", "set", "-h"}, 0, "usage: budget team set", ""},
		{[]string{"team", "ls", "-h"}, 0, "usage: budget team ls", ""},
		{[]string{"team", "rm", "-h"}, 0, "usage: budget team rm", ""},
		{[]string{"team", "set"}, 2, "", "missing team name"},
		{[]string{"team", "rm", "a", "b"}, 2, "", `unexpected argument "b"`},
		{[]string{"limit", "raise", "-h"}, 0, "usage: budget limit raise", ""},
		{[]string{"limit", "raise"}, 2, "", "want exactly one limit id"},
		{[]string{"limit", "set", "-h"}, 0, "-team", ""},
		{[]string{"key", "set-team", "-h"}, 0, "usage: budget key set-team", ""},
		{[]string{"key", "set-team", "k"}, 2, "", "missing team name"},
		{[]string{"key", "set-team", "k", "t", "--none"}, 2, "", "--none takes no team"},
		{[]string{"key", "add", "-h"}, 0, "-team", ""},
		{[]string{"check", "-h"}, 0, "-user", ""},
		{[]string{"record", "-h"}, 0, "-user", ""},
		{[]string{"reserve", "-h"}, 0, "-user", ""},
		{[]string{"inspect", "-h"}, 0, "-org", ""},
		{[]string{"help"}, 0, "alerts ls", ""},
		{[]string{"alerts"}, 2, "", "missing subcommand"},
		{[]string{"alerts", "zap"}, 2, "", `unknown subcommand "zap"`},
		{[]string{"alerts", "ls", "-h"}, 0, "-limit", ""},
		{[]string{"alerts", "ls", "extra"}, 2, "", `unexpected argument "extra"`},
		{[]string{"limit", "set", "-h"}, 0, "-alert", ""},
	} {
		r := run(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout, tc.stdout) || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("budget %s: got %v; want exit %d, stdout with %q, stderr with %q",
				strings.Join(tc.args, " "), r, tc.code, tc.stdout, tc.stderr)
		}
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{flag.ErrHelp, 0},
		{errors.New("disk on fire"), 1},
		{usagef("check", "bad"), 2},
		{fmt.Errorf("op: %w", budget.Invalid("key", "", "empty")), 2},
		{errRefused, 3},
		{fmt.Errorf("limit x: %w", budget.ErrNotFound), 4},
		{budget.ErrSettled, 4},
		{errDrift, 5},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v): got %d; want %d", tc.err, got, tc.want)
		}
	}
}

// TestDefaultDB: without --db the database is $BUDGET_DB.
func TestDefaultDB(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb, Now: func() time.Time { return testNow },
		Getenv: func(k string) string {
			if k == "BUDGET_DB" {
				return db
			}
			return ""
		}}
	if err := m.Run(context.Background(), []string{"limit", "set", "--key", "k", "--limit", "5", "--window", "1h"}); err != nil {
		t.Fatalf("limit set: %v (%s)", err, errb.String())
	}
	if !exists(db) {
		t.Fatalf("limit set did not create $BUDGET_DB %s", db)
	}
}

// TestFlagsAfterArguments: flags may follow positional arguments.
func TestFlagsAfterArguments(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	f := filepath.Join(t.TempDir(), "u.jsonl")
	os.WriteFile(f, []byte(`{"key":"k","provider":"p","model":"m","input":1}`+"\n"), 0o644)
	r := mustRun(t, 0, "import", f, "--db", db, "--json")
	if v := decode(t, r.stdout); v["imported"] != 1.0 {
		t.Errorf("import: got %s; want imported 1", r.stdout)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"version", "--version"} {
		r := mustRun(t, 0, arg)
		if !strings.HasPrefix(r.stdout, "budget github.com/tokenbudget/tokenbudget ") || strings.Count(r.stdout, "\n") != 1 || r.stderr != "" {
			t.Errorf("budget %s: got %v; want one line naming the module and its version", arg, r)
		}
	}
}
