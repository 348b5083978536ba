package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// TestRecoverReadsTheProxysLeaseJournal: a proxy run with an explicit
// --lease-journal answers 20 requests of 13 tokens from its lease and is
// SIGKILLed. 'budget recover --lease-journal DIR' charges exactly the 260
// tokens served, and leaves the directory empty; 'budget recover' without
// it cannot read the journal, charges the lease whole and says so on
// stderr, naming the lease. On SQLite and PostgreSQL.
func TestRecoverReadsTheProxysLeaseJournal(t *testing.T) {
	t.Parallel()
	bin := buildBudget(t)
	for _, target := range moveTargets {
		for _, given := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/lease-journal given %v", target.name, given), func(t *testing.T) {
				t.Parallel()
				testRecoverJournal(t, bin, target.fresh(t), given)
			})
		}
	}
}

func testRecoverJournal(t *testing.T, bin, db string, given bool) {
	state := t.TempDir()
	env := []string{"XDG_STATE_HOME=" + state}
	run := binRunner(t, bin, db, env)
	secret, _ := run("key", "add", "app")
	secret = strings.TrimSpace(secret)
	run("limit", "set", "--key", "app", "--limit", "1000000000", "--window", "daily", "--id", "day")

	journal := filepath.Join(t.TempDir(), "journal")
	p := startProxyProcEnv(t, bin, env, "--db", db, "--upstream", leaseCrashUpstream(t, nil),
		"--reservation-ttl", "2s", "--lease-journal", journal)
	client := proxyClient()
	const n = 20
	for range n {
		req, _ := http.NewRequest(http.MethodPost, p.url+"/v1/chat/completions", strings.NewReader(leaseCrashFast))
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil {
			t.Fatalf("request: %d %v: %s", resp.StatusCode, err, b)
		}
	}
	leases := func() []string {
		entries, _ := os.ReadDir(journal)
		var names []string
		for _, e := range entries {
			if id, ok := strings.CutSuffix(e.Name(), ".journal"); ok {
				names = append(names, id)
			}
		}
		return names
	}
	live := leases()
	if len(live) == 0 {
		t.Fatalf("no lease journal in %s after %d requests: none was answered from a lease", journal, n)
	}
	p.kill(t)

	args := []string{"recover"}
	if given {
		args = append(args, "--lease-journal", journal)
	}
	var warned string
	waitFor(t, time.Minute, "recover settles the dead proxy's leases", func() (bool, string) {
		_, stderr := run(args...)
		warned += stderr
		// Not inspect's reserved: a lapsed hold stops counting before
		// recovery charges it.
		rows := reservationRows(t, db, live)
		for _, r := range rows {
			if r.State == budget.ReservationLive {
				return false, fmt.Sprintf("lease %s live", r.ID)
			}
		}
		return len(rows) == len(live), fmt.Sprintf("%d of %d lease rows", len(rows), len(live))
	})
	l := decode(t, stdoutOf(run("inspect", "--json")))["limits"].([]any)[0].(map[string]any)
	used := l["used"].(float64)
	served := float64(n * (leaseCrashIn + leaseCrashOut))
	if given {
		if used != served || warned != "" || len(leases()) != 0 {
			t.Errorf("recover --lease-journal: used %v, stderr %q, journals left %v; want exactly %v, no warning, none left",
				used, warned, leases(), served)
		}
		return
	}
	if used <= served {
		t.Errorf("recover without the proxy's journal: used %v; want the leases charged whole, more than the %v served", used, served)
	}
	for _, id := range live {
		if !strings.Contains(warned, "warning") || !strings.Contains(warned, id) {
			t.Errorf("recover without the proxy's journal: stderr %q; want a warning naming lease %s", warned, id)
		}
	}
}

// binRunner runs bin's commands on db with the variables env added,
// failing the test unless one exits 0, and returns their stdout and
// stderr.
func binRunner(t *testing.T, bin, db string, env []string) func(args ...string) (stdout, stderr string) {
	return func(args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--db", db)...)
		cmd.Env = append(os.Environ(), env...)
		var eb bytes.Buffer
		cmd.Stderr = &eb
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("budget %s: %v\n%s", strings.Join(args, " "), err, eb.String())
		}
		return string(out), eb.String()
	}
}

func stdoutOf(stdout, _ string) string { return stdout }
