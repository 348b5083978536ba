package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
)

// These tests run `budget proxy` as a process, to kill it: they build the
// binary into the test's temporary directory first.

// buildBudget builds the budget command and returns the binary's path.
func buildBudget(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and kills the budget binary; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "budget")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// lockedBuffer collects a process's stderr.
type lockedBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{} // closed (and replaced) by each Write
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wrote != nil {
		close(l.wrote)
		l.wrote = nil
	}
	return l.b.Write(p)
}

// waitFor waits until the buffer holds s n times, failing the test after
// a minute.
func (l *lockedBuffer) waitFor(t *testing.T, s string, n int) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		l.mu.Lock()
		if strings.Count(l.b.String(), s) >= n {
			l.mu.Unlock()
			return
		}
		if l.wrote == nil {
			l.wrote = make(chan struct{})
		}
		wrote := l.wrote
		l.mu.Unlock()
		select {
		case <-wrote:
		case <-deadline:
			t.Fatalf("no %d× %q in:\n%s", n, s, l.String())
		}
	}
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proxyProc is a `budget proxy` process.
type proxyProc struct {
	url    string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	exited chan struct{}
}

// startProxyProc runs bin proxy args and waits for its listening line.
// Cleanup kills it if it still runs.
func startProxyProc(t *testing.T, bin string, args ...string) *proxyProc {
	t.Helper()
	return startProxyProcEnv(t, bin, nil, args...)
}

// startProxyProcEnv is startProxyProc with the variables env ("K=V") added
// to its environment.
func startProxyProcEnv(t *testing.T, bin string, env []string, args ...string) *proxyProc {
	t.Helper()
	return startProxyProcIn(t, bin, "", env, args...)
}

// startProxyProcIn is startProxyProcEnv run in the working directory dir
// ("": the test's).
func startProxyProcIn(t *testing.T, bin, dir string, env []string, args ...string) *proxyProc {
	t.Helper()
	p := &proxyProc{cmd: exec.Command(bin, append([]string{"proxy", "--listen", "127.0.0.1:0"}, args...)...),
		stderr: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(append(os.Environ(), "OPENAI_API_KEY=", "ANTHROPIC_API_KEY="), env...)
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("budget proxy printed no listening line: %v\n%s", err, p.stderr)
	}
	go io.Copy(io.Discard, out)
	p.url = listenURL(t, line)
	return p
}

// kill SIGKILLs the proxy and waits for it to be gone.
func (p *proxyProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.exited
}

// usageCounts is, for each request id, how many usage rows key has under
// it (0 for none).
func usageCounts(t *testing.T, db, key string, ids []string) map[string]int {
	t.Helper()
	d, err := sql.Open("sqlite", "file:"+db+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	counts := make(map[string]int, len(ids))
	for _, id := range ids {
		var n int
		if err := d.QueryRow(`SELECT COUNT(*) FROM usage WHERE key = ? AND request_id = ?`, key, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		counts[id] = n
	}
	return counts
}

// exitOf runs bin args and returns its exit code and output.
func exitOf(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("budget %v: %v", args, err)
	return 0, ""
}

// proxyClient is an HTTP client for many concurrent requests.
func proxyClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 128
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// crashBodies are the requests the crash test sends, in turn.
var crashBodies = []struct{ path, body string }{
	{"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":20,"messages":[{"role":"user","content":"hello there"}]}`},
	{"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":20,"stream":true,"messages":[{"role":"user","content":"hello there"}]}`},
	{"/v1/messages", `{"model":"claude-x","max_tokens":20,"stream":true,"messages":[{"role":"user","content":"hello there"}]}`},
	{"/v1/responses", `{"model":"gpt-4o","max_output_tokens":20,"input":"hello there"}`},
}

// TestProxyCrashCharges: SIGKILL of a reserve-mode proxy under 64
// concurrent clients loses no charge: after recovery (here at a clock 3
// minutes on, without waiting) every response that reached its client with
// 200 is charged exactly once under its X-Tokenbudget-Request-Id, by its
// commit or by its estimate, and verify finds the database consistent.
func TestProxyCrashCharges(t *testing.T) {
	t.Parallel()
	bin := buildBudget(t)
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "1000000000", "--window", "daily")
	p := startProxyProc(t, bin, "--db", db, "--mock-upstream")

	const clients, killAfter = 64, 400
	client := proxyClient()
	var (
		mu      sync.Mutex
		served  []string // request ids of 200s
		whole   atomic.Int64
		stop    = make(chan struct{})
		killNow = make(chan struct{})
		once    sync.Once
		wg      sync.WaitGroup
	)
	for c := range clients {
		wg.Go(func() {
			for i := c; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				b := crashBodies[i%len(crashBodies)]
				req, _ := http.NewRequest(http.MethodPost, p.url+b.path, strings.NewReader(b.body))
				req.Header.Set("Authorization", "Bearer "+secret)
				resp, err := client.Do(req)
				if err != nil {
					continue // the proxy is gone: wait for stop
				}
				_, rerr := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				id := resp.Header.Get("X-Tokenbudget-Request-Id")
				if resp.StatusCode != http.StatusOK {
					continue
				}
				if id == "" {
					t.Errorf("a 200 without X-Tokenbudget-Request-Id")
					continue
				}
				mu.Lock()
				served = append(served, id)
				mu.Unlock()
				if rerr == nil && whole.Add(1) == killAfter {
					once.Do(func() { close(killNow) })
				}
			}
		})
	}
	select {
	case <-killNow:
	case <-time.After(60 * time.Second):
		t.Errorf("only %d whole responses in 60s", whole.Load())
	}
	p.kill(t)
	close(stop)
	wg.Wait()
	if len(served) < killAfter {
		t.Fatalf("%d responses with 200; want at least %d\n%s", len(served), killAfter, p.stderr)
	}

	// Recovery 3 minutes on: every reservation the proxy left has expired.
	ctx := context.Background()
	cfg := budget.DefaultConfig()
	cfg.Now = func() time.Time { return time.Now().Add(3 * time.Minute) }
	d, err := tokenbudget.Open(ctx, db, tokenbudget.Options{Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Recover(ctx, d.Now()); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	counts := usageCounts(t, db, "app", served)
	bad := 0
	for _, id := range served {
		if counts[id] != 1 {
			if bad++; bad <= 5 {
				t.Errorf("request %s has %d usage rows; want 1", id, counts[id])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d responses with 200 are not charged exactly once", bad, len(served))
	}
	if code, out := exitOf(t, bin, "verify", "--db", db); code != 0 {
		t.Errorf("budget verify after the crash: exit %d\n%s", code, out)
	}
	if code, out := exitOf(t, bin, "inspect", "--db", db, "--json"); code != 0 || strings.Contains(out, `"reserved": 1`) {
		t.Errorf("budget inspect: exit %d\n%s", code, out)
	}
}

// gatedUpstream answers chat requests after gate closes, telling arrived
// when each one got there.
func gatedUpstream(t *testing.T, arrived chan<- struct{}, gate <-chan struct{}) string {
	t.Helper()
	up := newLoopback(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":5}}`)
	})
	return up
}

// newLoopback serves h on a loopback port until the test ends.
func newLoopback(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := &http.Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestProxyCrashLeasesFree: a crashed proxy's concurrency leases are free
// within 20 s: with a concurrent limit of 1 and one request in flight when
// the proxy is SIGKILLed, the key is refused at once and admitted again at
// a clock 21 s on (no waiting).
func TestProxyCrashLeasesFree(t *testing.T) {
	t.Parallel()
	bin := buildBudget(t)
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "1", "--metric", "concurrent")
	arrived, gate := make(chan struct{}, 1), make(chan struct{})
	defer close(gate)
	p := startProxyProc(t, bin, "--db", db, "--upstream", gatedUpstream(t, arrived, gate))
	go func() {
		req, _ := http.NewRequest(http.MethodPost, p.url+"/v1/chat/completions", strings.NewReader(`{"model":"m","max_tokens":5,"messages":[]}`))
		req.Header.Set("Authorization", "Bearer "+secret)
		if resp, err := proxyClient().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatalf("the request never reached the upstream\n%s", p.stderr)
	}
	p.kill(t)
	killed := time.Now()

	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	cfg := budget.DefaultConfig()
	cfg.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	d, err := tokenbudget.Open(ctx, db, tokenbudget.Options{Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	req := budget.Request{Key: "app", Provider: "openai", Model: "m", Estimate: budget.Estimate{Input: 1, Output: 5}}
	dec, err := d.CheckAt(ctx, req, d.Now())
	if err != nil || dec.Allowed || dec.Breach == nil || dec.Breach.RetryAfterSeconds() > 5 {
		t.Fatalf("right after the crash: %+v %v; want refused by the lease, retry after at most 5s", dec, err)
	}
	clock.Store(killed.Add(21 * time.Second).UnixNano())
	res, err := d.ReserveWith(ctx, req, budget.ReserveOptions{OnExpiry: budget.ExpireCharge})
	if err != nil {
		t.Fatalf("21s after the crash: %v; want admitted", err)
	}
	if err := d.Release(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
}

// postStream sends a streamed request and returns the response, or fails.
func postStream(t *testing.T, c *http.Client, url, secret, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return resp
}

// getURL is the status and body of a GET.
func getURL(c *http.Client, url string) (int, string) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProxyDiskFull (root only: it mounts a 4 MiB tmpfs): streams that
// finish while the database's disk is full are answered, /healthz says 503
// "disk full" meanwhile, and once space is back every one of them is
// charged and /healthz is 200 again.
func TestProxyDiskFull(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs and fill it; run as root (CI does)")
	}
	bin := buildBudget(t)
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s); skipped", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	db := filepath.Join(dir, "budget.db")
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "1000000000", "--window", "daily")

	const streams = 6
	first := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":17,\"output_tokens\":1}}}\n\n"
	last := "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	gate := make(chan struct{})
	up := newLoopback(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, first)
		http.NewResponseController(w).Flush()
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, last)
	})
	// A short backoff cap: the test waits for the writer's next try once
	// space is back, not out the default 5 s.
	p := startProxyProc(t, bin, "--db", db, "--upstream", up, "--max-write-backoff", "50ms")
	client := proxyClient()
	if code, body := getURL(client, p.url+"/healthz"); code != 200 {
		t.Fatalf("/healthz before: %d %s", code, body)
	}

	// Admitted (reserved) while there is room, then the disk fills.
	var ids []string
	var resps []*http.Response
	for range streams {
		resp := postStream(t, client, p.url+"/v1/messages", secret, `{"model":"c","max_tokens":50,"stream":true,"messages":[]}`)
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.Header.Get("X-Tokenbudget-Request-Id"))
		resps = append(resps, resp)
	}
	filler := filepath.Join(dir, "filler")
	fillDisk(t, filler)
	close(gate)
	for i, resp := range resps {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !strings.Contains(string(b), "message_stop") {
			t.Errorf("stream %d: %v %q; want it whole", i, err, b)
		}
	}
	waitFor(t, 30*time.Second, "/healthz 503 disk full", func() (bool, string) {
		code, body := getURL(client, p.url+"/healthz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "disk full"), fmt.Sprint(code, " ", body)
	})

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "every stream charged", func() (bool, string) {
		counts := usageCounts(t, db, "app", ids)
		for _, id := range ids {
			if counts[id] != 1 {
				return false, fmt.Sprint(counts)
			}
		}
		return true, ""
	})
	waitFor(t, 30*time.Second, "/healthz 200", func() (bool, string) {
		code, body := getURL(client, p.url+"/healthz")
		return code == 200, fmt.Sprint(code, " ", body)
	})
	if code, out := exitOf(t, bin, "verify", "--db", db); code != 0 {
		t.Errorf("budget verify: exit %d\n%s", code, out)
	}
}

// fillDisk writes path until the file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !strings.Contains(err.Error(), "no space left") {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	// The last partial pages too.
	for _, n := range []int{4096, 512, 1} {
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
}

// waitFor polls cond every 50ms until it holds, failing after limit: a
// writer retries on its own schedule.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (last: %s)", what, limit, state)
		}
		<-time.After(50 * time.Millisecond)
	}
}
