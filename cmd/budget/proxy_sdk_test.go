package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sdkDir holds the pinned SDKs' package.json, package-lock.json and the
// script that calls the proxy with them.
const sdkDir = "testdata/sdk"

// sdkModules returns a node_modules directory with the SDKs of
// testdata/sdk/package-lock.json installed, installing them on first use
// into the user's cache directory, keyed by the lock file's hash, so that
// later runs (and CI runs on the same machine) spend no time in npm. It
// skips the test when node or npm is missing.
func sdkModules(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not on PATH: the real-SDK refusal test needs Node.js and npm (.ci/run installs them)", tool)
		}
	}
	// openai 7.55.0 declares node >= 22 and runs on 20; older ones (Debian
	// 12's nodejs is 18) may lack what it uses.
	out, err := exec.Command("node", "-p", "process.versions.node.split('.')[0]").Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	if major, _ := strconv.Atoi(strings.TrimSpace(string(out))); major < 20 {
		t.Skipf("node %s is too old for the pinned SDKs: the real-SDK refusal test needs Node.js 20 or later", strings.TrimSpace(string(out)))
	}
	lock, err := os.ReadFile(filepath.Join(sdkDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := os.ReadFile(filepath.Join(sdkDir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(append([]byte{}, pkg...), lock...))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	base := filepath.Join(cache, "tokenbudget-sdktest")
	dir := filepath.Join(base, hex.EncodeToString(sum[:8]))
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(dir, "installed")); err == nil {
		return modules
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	// Installed aside, then renamed into place: a concurrent run (another
	// package's test binary) never sees a half-installed directory.
	tmp, err := os.MkdirTemp(base, "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for name, b := range map[string][]byte{"package.json": pkg, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci of the pinned SDKs failed: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, "installed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "installed")); serr != nil {
			t.Fatalf("install the SDKs into %s: %v", dir, err)
		}
	}
	return modules
}

// sdkResult is one SDK call as the script reports it.
type sdkResult struct {
	SDK    string  `json:"sdk"`
	Failed bool    `json:"failed"`
	Status *int    `json:"status"`
	Code   *string `json:"code"`
	Error  string  `json:"error"`
	MS     float64 `json:"ms"`
}

// nodeScript runs testdata/sdk/script with the SDKs in modules against the
// proxy at base with the gateway key secret (and the variables env,
// NAME=VALUE), within 2 minutes, and returns what it printed, trimmed; a
// script that fails fails the test with its output.
func nodeScript(t *testing.T, modules, script, base, secret string, env ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(sdkDir, script))
	cmd.Env = append(append(os.Environ(), "NODE_PATH="+modules, "PROXY_URL="+base, "GATEWAY_KEY="+secret), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\n%s\n%s", script, err, stdout.String(), stderr.String())
	}
	return bytes.TrimSpace(stdout.Bytes())
}

// runSDKs runs testdata/sdk/refusal.cjs against the proxy at base.
func runSDKs(t *testing.T, modules, base, secret string, abort time.Duration) []sdkResult {
	t.Helper()
	out := nodeScript(t, modules, "refusal.cjs", base, secret, "ABORT_MS="+itoa(abort.Milliseconds()))
	var rs []sdkResult
	if err := json.Unmarshal(out, &rs); err != nil || len(rs) != 2 {
		t.Fatalf("node refusal.cjs printed %q (%v)", out, err)
	}
	return rs
}

// refusedCount is the proxy's count of budget refusals so far.
func refusedCount(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^tokenbudget_proxy_requests_total\{outcome="refused"\} (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no refused count in /metrics")
	}
	return string(m[1])
}

// TestProxySDKRefusal: with a daily budget spent, the official SDKs at
// their default settings (openai 7.55.0, @anthropic-ai/sdk 1.10.0, run by
// Node.js) get the proxy's 429 within 2 s, in one request each: the
// refusal's wait (hours, to the daily reset) is over --max-client-wait, so
// it says x-should-retry: false. The control: a proxy on the same database
// whose --max-client-wait is longer than the wait leaves the SDKs to their
// retry logic: the Anthropic SDK sleeps for the Retry-After (it is aborted
// after 2.5 s here) and the OpenAI SDK retries twice.
func TestProxySDKRefusal(t *testing.T) {
	t.Parallel()
	modules := sdkModules(t)
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "1000", "--window", "daily")
	mustRun(t, 0, "record", "--db", db, "--key", "app", "--provider", "openai", "--model", "gpt-4o-mini", "--input", "1000")

	start := func(maxWait string) string {
		ctx, cancel := context.WithCancel(context.Background())
		line, done := startCLI(t, ctx, nil, "proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0", "--max-client-wait", maxWait)
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("proxy exited with %v", err)
			}
		})
		return listenURL(t, line)
	}

	base := start("60s")
	for _, r := range runSDKs(t, modules, base, secret, 0) {
		if !r.Failed || r.Status == nil || *r.Status != http.StatusTooManyRequests || r.MS > 2000 {
			t.Errorf("%s: %+v; want a 429 within 2000 ms", r.SDK, r)
		}
		if r.Code == nil || *r.Code != "token_budget_exceeded" {
			t.Errorf("%s: error code %v; want token_budget_exceeded", r.SDK, r.Code)
		}
	}
	if n := refusedCount(t, base); n != "2" {
		t.Errorf("the proxy refused %s requests; want 2, one per SDK (no retries)", n)
	}

	control := start("48h")
	rs := runSDKs(t, modules, control, secret, 2500*time.Millisecond)
	if r := rs[1]; r.SDK != "anthropic" || r.Error != "APIUserAbortError" {
		t.Errorf("control, anthropic: %+v; want it still waiting for the Retry-After when aborted", r)
	}
	if r := rs[0]; !r.Failed || r.Status == nil || *r.Status != http.StatusTooManyRequests {
		t.Errorf("control, openai: %+v; want its 429 after its own retries", r)
	}
	if n := refusedCount(t, control); n != "4" {
		t.Errorf("control: the proxy refused %s requests; want 4 (openai: 1 + 2 retries; anthropic: 1, then asleep)", n)
	}
}
