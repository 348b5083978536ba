package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// roMount mounts a small tmpfs at a new directory for the test and returns
// it with a function that remounts it read-only. It needs root (CI runs as
// root); elsewhere the test is skipped.
func roMount(t *testing.T) (dir string, readOnly func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs (CI runs as root)")
	}
	dir = t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir, func() {
		if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
			t.Fatalf("remount read-only: %v: %s", err, out)
		}
	}
}

// On a read-only database (here a read-only mount, which even root cannot
// write), writing commands fail at once with the reason instead of waiting
// out the writer's retries, and read-only commands still work.
func TestReadOnlyDatabase(t *testing.T) {
	dir, readOnly := roMount(t)
	db := dir + "/budget.db"
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "100", "--window", "1h", "--id", "h")
	mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "p", "--model", "m", "--input", "7")
	readOnly()

	// A bound far below the 30 s a command may wait for its queued writes:
	// a failing command must not wait them out.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"record", "--key", "k", "--provider", "p", "--model", "m", "--input", "1"},
		{"limit", "set", "--key", "k", "--limit", "5", "--window", "1m"},
	} {
		done := make(chan result, 1)
		go func() { done <- run(t, append(args, "--db", db)...) }()
		select {
		case r := <-done:
			if r.code != 1 || !strings.Contains(r.stderr, "read-only") && !strings.Contains(r.stderr, "cannot open for writing") {
				t.Errorf("budget %s on a read-only mount: got %v; want exit 1 saying why", args[0], r)
			}
		case <-ctx.Done():
			t.Fatalf("budget %s on a read-only mount still running after 5s", args[0])
		}
	}
	if u := status(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout, "h"); u["used"] != 7.0 {
		t.Errorf("inspect on a read-only mount: got %v; want used 7", u)
	}
	mustRun(t, 0, "verify", "--db", db, "--integrity")
	mustRun(t, 0, "limit", "ls", "--db", db)
	mustRun(t, 0, "check", "--db", db, "--key", "k", "--tokens", "1")
}
