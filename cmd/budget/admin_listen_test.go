package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startCLILines runs the budget command line args until ctx ends and
// returns the first n lines it prints (failing when it stops before) and
// a channel with Run's error.
func startCLILines(t *testing.T, ctx context.Context, env map[string]string, n int, args ...string) ([]string, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	m := &Main{Stdout: pw, Stderr: io.Discard, Getenv: func(k string) string { return env[k] },
		Now: func() time.Time { return testNow }}
	done := make(chan error, 1)
	go func() {
		err := m.Run(ctx, args)
		pw.Close()
		done <- err
	}()
	r := bufio.NewReader(pr)
	var lines []string
	for len(lines) < n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("budget %v printed %q, then %v; want %d lines", args, lines, err, n)
		}
		lines = append(lines, line)
	}
	go io.Copy(io.Discard, pr)
	return lines, done
}

// get answers a GET of url with header's pairs set.
func get(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	return call(t, http.MethodGet, url, "", header...)
}

// TestProxyAdminListen: --admin-listen on loopback serves the dashboard
// on its own address, printed on the second line (the first is
// unchanged); /metrics and /healthz stay on the API's; a refusal by the
// proxy is listed on the dashboard.
func TestProxyAdminListen(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--id", "lim_app", "--limit", "100", "--window", "daily")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lines, done := startCLILines(t, ctx, nil, 2, "proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0")
	if !strings.HasPrefix(lines[0], "budget proxy listening on http://") || !strings.HasPrefix(lines[1], "budget dashboard on http://127.0.0.1:") {
		t.Fatalf("stdout starts %q; want the proxy's line, then the dashboard's", lines)
	}
	api, dash := listenURL(t, lines[0]), strings.TrimSuffix(listenURL(t, lines[1]), "/")
	if code, _ := post(t, api+"/v1/chat/completions", secret, `{"model":"m","max_tokens":500,"messages":[]}`); code != http.StatusTooManyRequests {
		t.Fatalf("a request over the limit: status %d; want 429", code)
	}
	code, body := get(t, dash+"/")
	if code != http.StatusOK || !strings.Contains(body, `data-id="lim_app"`) {
		t.Fatalf("GET the dashboard: %d\n%s", code, body)
	}
	if !strings.Contains(body, `<a href="/key?name=app">app</a></td><td><a href="/limit?id=lim_app">lim_app</a>`) {
		t.Errorf("the dashboard does not list the refusal:\n%s", body)
	}
	for _, p := range []string{"/metrics", "/healthz"} {
		if code, _ := get(t, api+p); code != http.StatusOK {
			t.Errorf("GET %s on the API: status %d; want 200", p, code)
		}
		if code, _ := get(t, dash+p); code != http.StatusNotFound {
			t.Errorf("GET %s on the dashboard: status %d; want 404", p, code)
		}
	}
	if code, _ := get(t, api+"/"); code != http.StatusNotFound {
		t.Errorf("GET / on the API: status %d; want its 404, not the dashboard", code)
	}
	// A loopback dashboard without a token answers to loopback names only.
	req, _ := http.NewRequest(http.MethodGet, dash+"/", nil)
	req.Host = "evil.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("Host evil.example: %v %v; want 403", resp.Status, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v", err)
	}
}

// TestProxyAdminToken: off loopback the dashboard needs
// --admin-token-env, whose token it then demands.
func TestProxyAdminToken(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	const token = "0123456789abcdef0123"
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--admin-listen", "0.0.0.0:0"}, nil, "--admin-token-env"},
		{[]string{"--admin-listen", ":0"}, nil, "not a loopback address"},
		{[]string{"--admin-listen", "0.0.0.0:0", "--admin-token-env", "DASH"}, nil, "empty or unset"},
		{[]string{"--admin-listen", "0.0.0.0:0", "--admin-token-env", "DASH"}, map[string]string{"DASH": "short"}, "at least 16"},
		{[]string{"--admin-token-env", "DASH"}, map[string]string{"DASH": token}, "needs --admin-listen"},
		{[]string{"--admin-listen", "nope"}, nil, "want an address"},
	} {
		var out, errb strings.Builder
		m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return c.env[k] }}
		err := m.Run(context.Background(), append([]string{"proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0"}, c.args...))
		if code := exitCode(err); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("proxy %v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
		if out.Len() != 0 {
			t.Errorf("proxy %v printed %q", c.args, out.String())
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lines, done := startCLILines(t, ctx, map[string]string{"DASH": token}, 2, "proxy", "--db", db, "--mock-upstream",
		"--listen", "127.0.0.1:0", "--admin-listen", "0.0.0.0:0", "--admin-token-env", "DASH")
	dash := strings.Replace(strings.TrimSuffix(listenURL(t, lines[1]), "/"), "0.0.0.0", "127.0.0.1", 1)
	dash = strings.Replace(dash, "[::]", "127.0.0.1", 1)
	if code, body := get(t, dash+"/"); code != http.StatusUnauthorized || strings.Contains(body, "Budgets") {
		t.Errorf("without the token: %d; want 401 and no budget", code)
	}
	if code, _ := get(t, dash+"/", "Authorization", "Bearer "+token+"x"); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d; want 401", code)
	}
	if code, body := get(t, dash+"/", "Authorization", "Bearer "+token); code != http.StatusOK || !strings.Contains(body, "<h1>Budgets</h1>") {
		t.Errorf("with the token: %d; want the overview", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v", err)
	}
}

// TestDemoKeep: budget demo prints the dashboard's URL, and with --keep
// leaves the proxy and the dashboard up until interrupted, then exits 0.
func TestDemoKeep(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	m := &Main{Stdout: pw, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	done := make(chan error, 1)
	go func() {
		err := m.Run(ctx, []string{"demo", "--keep"})
		pw.Close()
		done <- err
	}()
	var dash, api, secret string
	sc := bufio.NewScanner(pr)
	for api == "" && sc.Scan() {
		line := sc.Text()
		switch f := strings.Fields(line); {
		case strings.HasPrefix(line, "budget dashboard on "):
			if dash != "" {
				t.Errorf("the dashboard's URL printed twice")
			}
		case len(f) >= 2 && f[0] == "dashboard":
			dash = strings.TrimSuffix(f[1], "/")
		case len(f) >= 6 && f[0] == "proxy" && strings.HasSuffix(f[1], "/v1"):
			api, secret = strings.TrimSuffix(f[1], "/v1"), strings.TrimSuffix(f[len(f)-1], ")")
		}
	}
	go io.Copy(io.Discard, pr)
	if dash == "" || api == "" {
		t.Fatalf("demo --keep did not print the dashboard and the proxy (%v)", sc.Err())
	}
	// The demo is over; both are still up, the proxy still refusing what
	// does not fit, the dashboard listing the refusals.
	if code, _ := post(t, api+"/v1/chat/completions", secret, `{"model":"gpt-4o-mini","max_tokens":4000,"messages":[]}`); code != http.StatusTooManyRequests {
		t.Errorf("a request for 4000 tokens to the kept proxy with the demo key: status %d; want 429", code)
	}
	code, body := get(t, dash+"/")
	if code != http.StatusOK || !strings.Contains(body, `<a href="/key?name=demo">key demo</a>`) ||
		!strings.Contains(body, `<td><a href="/key?name=demo">demo</a></td><td><a href="/limit?id=lim_`) {
		t.Errorf("GET the kept dashboard: %d, want the demo key's limit and refusals\n%s", code, body)
	}
	select {
	case err := <-done:
		t.Fatalf("demo --keep exited before it was interrupted: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("demo --keep exited with %v", err)
	}
}

// TestAdminTokenFlags: the admin options' checks, without a proxy.
func TestAdminTokenFlags(t *testing.T) {
	t.Parallel()
	env := func(k string) string { return map[string]string{"T": "0123456789abcdef"}[k] }
	for _, c := range []struct {
		o     adminOptions
		token string
		err   bool
	}{
		{adminOptions{}, "", false},
		{adminOptions{listen: "127.0.0.1:8081"}, "", false},
		{adminOptions{listen: "localhost:8081"}, "", false},
		{adminOptions{listen: "[::1]:8081"}, "", false},
		{adminOptions{listen: "127.0.0.1:8081", tokenEnv: "T"}, "0123456789abcdef", false},
		{adminOptions{listen: "0.0.0.0:8081", tokenEnv: "T"}, "0123456789abcdef", false},
		{adminOptions{listen: "0.0.0.0:8081"}, "", true},
		{adminOptions{listen: "10.1.2.3:8081", tokenEnv: "U"}, "", true},
		{adminOptions{tokenEnv: "T"}, "", true},
	} {
		token, err := c.o.token(env)
		if token != c.token || (err != nil) != c.err {
			t.Errorf("%+v: token %q, error %v; want %q, error %v", c.o, token, err, c.token, c.err)
		}
		if err != nil && exitCode(err) != 2 {
			t.Errorf("%+v: exit code %d; want 2", c.o, exitCode(err))
		}
	}
}

// TestProxyOpsHostRule: on a loopback listener /metrics and /healthz
// answer only to loopback Host names (a DNS-rebinding page must not read
// the gauges), while the API takes any Host; off loopback any Host is
// served, as the network can reach the listener anyway.
func TestProxyOpsHostRule(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	do := func(url, host, key string) int {
		t.Helper()
		method, body := http.MethodGet, ""
		if key != "" {
			method, body = http.MethodPost, `{"model":"m","max_tokens":5,"messages":[]}`
		}
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Host = host
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s (Host %s): %v", method, url, host, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		listen   string
		loopback bool
	}{{"127.0.0.1:0", true}, {"0.0.0.0:0", false}} {
		ctx, cancel := context.WithCancel(context.Background())
		line, done := startCLI(t, ctx, nil, "proxy", "--db", db, "--mock-upstream", "--listen", c.listen)
		base := listenURL(t, line)
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
		base = "http://127.0.0.1:" + port
		for _, p := range []string{"/metrics", "/healthz"} {
			for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port} {
				if code := do(base+p, host, ""); code != http.StatusOK {
					t.Errorf("--listen %s: GET %s Host %s: %d; want 200", c.listen, p, host, code)
				}
			}
			want := http.StatusForbidden
			if !c.loopback {
				want = http.StatusOK
			}
			if code := do(base+p, "evil.example:"+port, ""); code != want {
				t.Errorf("--listen %s: GET %s Host evil.example: %d; want %d", c.listen, p, code, want)
			}
		}
		if code := do(base+"/v1/chat/completions", "api.internal.example", secret); code != http.StatusOK {
			t.Errorf("--listen %s: the API with Host api.internal.example: %d; want 200", c.listen, code)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("proxy exited with %v", err)
		}
	}
}
