package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// TestProxyFlags: bad flags exit 2 before any database is created.
func TestProxyFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"--upstream", "http://x", "--mock-upstream"},
		{"--upstream", "ftp://x"},
		{"--upstream", "not a url"},
		{"--mock-upstream", "--mode", "sometimes"},
		{"--mock-upstream", "--max-body", "0"},
		{"--mock-upstream", "--default-max-output", "-1"},
		{"--mock-upstream", "stray"},
		{"--mock-upstream", "--reservation-ttl", "500ms"},
		{"--mock-upstream", "--max-write-backoff", "5ms"},
		{"--mock-upstream", "--body-timeout", "0s"},
		{"--mock-upstream", "--header-timeout", "-1s"},
		{"--mock-upstream", "--stream-idle-timeout", "0s"},
		{"--mock-upstream", "--max-inflight-bytes", "0"},
		{"--mock-upstream", "--max-inflight-bytes-per-key", "-1"},
		{"--mock-upstream", "--min-body-rate", "-1"},
		{"--mock-upstream", "--provider", "open\nai"},
		{"--mock-upstream", "--provider", strings.Repeat("p", 300)},
		{"--mock-upstream", "--cap-field", "max_words"},
		{"--mock-upstream", "--max-client-wait", "-1s"},
		{"--mock-upstream", "--log-format", "xml"},
		// many upstreams
		{"--upstream", "deepseek=https://api.deepseek.com"},                                                            // no kind
		{"--upstream", "openai=https://x", "--upstream", "openai=https://y"},                                           // twice
		{"--upstream", "openai=ftp://x"},                                                                               // not http
		{"--upstream", "=https://x", "--upstream", "openai=https://y"},                                                 // no name
		{"--upstream", "openai=https://x", "--upstream-api", "other=openai"},                                           // unknown name
		{"--upstream", "ds=https://x", "--upstream-api", "ds=cohere"},                                                  // unknown kind
		{"--upstream", "openai=https://x", "--provider", "openai"},                                                     // --provider is the single form's
		{"--upstream", "openai=https://x", "--upstream-key-env", "anthropic=K"},                                        // unknown name
		{"--upstream", "openai=https://x", "--upstream-key-env", "openai="},                                            // no variable
		{"--upstream", "openai=https://x", "--model-route", "gpt-*=anthropic"},                                         // unknown name
		{"--upstream", "openai=https://x", "--upstream", "anthropic=https://y", "--model-route", "claude-*=anthropic"}, // not OpenAI-kind
		{"--upstream", "https://x", "--model-route", "gpt-*=openai"},                                                   // single form
		{"--upstream", "https://x", "--upstream-key-env", "openai=K"},                                                  // single form
		{"--upstream", "https://x", "--upstream-api", "openai=openai"},                                                 // single form
		{"--mock-upstream", "--upstream", "openai=https://x"},
	} {
		db := tempDB(t)
		mustRun(t, 2, append([]string{"proxy", "--db", db}, args...)...)
		if exists(db) {
			t.Errorf("proxy %v created the database", args)
		}
	}
	mustRun(t, 2, "mock-upstream", "--chunk-delay", "-1s")
	help := mustRun(t, 0, "proxy", "-h").stdout
	for _, want := range []string{"--upstream-key-env", "X-Tokenbudget-Request-Id",
		"-reservation-ttl duration", "(default 20s)", "-body-timeout duration", "(default 30s)",
		"-header-timeout duration", "(default 10m0s)", "-stream-idle-timeout duration", "(default 5m0s)",
		"-max-inflight-bytes int", "(default 268435456)", "-max-inflight-bytes-per-key int", "-min-body-rate int", "(default 4096)", "-max-client-wait duration", "(default 1m0s)",
		"-cap-field string", `(default "auto")`, "-max-write-backoff duration", "(default 5s)", "-require-limits", "-log-format string", "GET /v1/models",
		"X-Budget-Tags", "X-Tokenbudget-Cost", "X-Tokenbudget-Charged-Tokens", "trailers", "tagged requests keep the store path", "settle_failed"} {
		if !strings.Contains(help, want) {
			t.Errorf("proxy -h lacks %q:\n%s", want, help)
		}
	}
}

// TestProxyKeyNames: key add refuses a name with control characters or
// over the bound with exit 2, quoting only its start, before any database
// is created.
func TestProxyKeyNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a\tb", "a\x00b", "a\u0085b", strings.Repeat("k", 100<<10)} {
		db := tempDB(t)
		r := mustRun(t, 2, "key", "add", name, "--db", db)
		if len(r.stderr) > 1024 {
			t.Errorf("key add %.20q: %d bytes on stderr", name, len(r.stderr))
		}
		if exists(db) {
			t.Errorf("key add %.20q created the database", name)
		}
	}
}

// TestProxyRequestID: in both modes the usage of a proxied request is
// recorded under the X-Tokenbudget-Request-Id its response carries.
func TestProxyRequestID(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"reserve", "check"} {
		db := tempDB(t)
		secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
		ctx, cancel := context.WithCancel(context.Background())
		line, done := startCLI(t, ctx, nil, "proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0", "--mode", mode)
		base := listenURL(t, line)
		var ids []string
		for _, stream := range []string{"false", "true"} {
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","max_tokens":5,"stream":`+stream+`,"messages":[]}`))
			req.Header.Set("Authorization", "Bearer "+secret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if id := resp.Header.Get("X-Tokenbudget-Request-Id"); resp.StatusCode != 200 || id == "" {
				t.Errorf("%s, stream %s: status %d, request id %q", mode, stream, resp.StatusCode, id)
			} else {
				ids = append(ids, id)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("%s: proxy exited with %v", mode, err)
		}
		for id, n := range usageCounts(t, db, "app", ids) {
			if n != 1 {
				t.Errorf("%s: %d usage rows under %s; want 1", mode, n, id)
			}
		}
	}
}

// TestProxyHealthz: /healthz is 200 "ok", and 503 with the reason once the
// database file is deleted under the running proxy.
func TestProxyHealthz(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "key", "add", "app", "--db", db)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	line, done := startCLI(t, ctx, nil, "proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0")
	base := listenURL(t, line)
	if code, body := getURL(http.DefaultClient, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q; want 200 ok", code, body)
	}
	if err := os.Remove(db); err != nil {
		t.Fatal(err)
	}
	if code, body := getURL(http.DefaultClient, base+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "deleted") {
		t.Errorf("/healthz after the database file was deleted: %d %q; want 503 naming the deletion", code, body)
	}
	cancel()
	<-done
}

// startCLI runs the budget command line args until ctx ends and returns
// the first line it prints and a channel with Run's error.
func startCLI(t *testing.T, ctx context.Context, env map[string]string, args ...string) (string, <-chan error) {
	t.Helper()
	return startCLIStderr(t, ctx, env, io.Discard, args...)
}

// startCLIStderr is startCLI writing the command's stderr to stderr.
func startCLIStderr(t *testing.T, ctx context.Context, env map[string]string, stderr io.Writer, args ...string) (string, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	m := &Main{Stdout: pw, Stderr: stderr, Getenv: func(k string) string { return env[k] },
		Now: func() time.Time { return testNow }}
	done := make(chan error, 1)
	go func() {
		err := m.Run(ctx, args)
		pw.Close()
		done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("budget %v printed nothing: %v", args, err)
	}
	go io.Copy(io.Discard, pr)
	return line, done
}

// listenURL is the URL in a "... listening on URL, ..." line.
func listenURL(t *testing.T, line string) string {
	t.Helper()
	i := strings.Index(line, "http://")
	if i < 0 {
		t.Fatalf("no URL in %q", line)
	}
	return strings.TrimRight(strings.Fields(line[i:])[0], ",")
}

func post(t *testing.T, url, secret, body string) (int, string) {
	t.Helper()
	return call(t, http.MethodPost, url, body, "Authorization", "Bearer "+secret)
}

// call sends method to url with body ("" for none) and header's pairs set,
// and returns the status and the body of the answer.
func call(t *testing.T, method, url, body string, header ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProxyCommand: budget proxy --mock-upstream serves the API under the
// budget, /healthz and /metrics, and on cancel (SIGINT) drains the request
// in flight, writes the usage and exits 0.
func TestProxyCommand(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "1000000", "--window", "daily")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	line, done := startCLI(t, ctx, nil, "proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0", "--mode", "check")
	base := listenURL(t, line)
	if code, body := post(t, base+"/v1/messages", secret, `{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`); code != 200 ||
		!strings.Contains(body, `"usage"`) {
		t.Fatalf("POST /v1/messages: %d %s", code, body)
	}
	if code, _ := post(t, base+"/v1/chat/completions", "tbk_wrong", `{}`); code != 401 {
		t.Errorf("wrong key: %d", code)
	}
	for path, want := range map[string]string{"/healthz": "ok\n", "/metrics": `tokenbudget_proxy_requests_total{outcome="ok"} 1`} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q:\n%s", path, want, b)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v", err)
	}
	// mock: input ceil((4+2)/4)+3 = 5, output 10 (cut at max_tokens)
	v := decode(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout)
	if l := v["limits"].([]any)[0].(map[string]any); l["used"] != 15.0 {
		t.Errorf("usage after shutdown: used %v; want 15", l["used"])
	}
}

// TestProxyDrain: a request in flight when the proxy is told to stop is
// answered in full and charged before it exits; the upstream credential
// comes from --upstream-key-env.
func TestProxyDrain(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "1000000", "--window", "daily")
	arrived, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer from-env" || strings.Contains(r.Header.Get("Authorization"), secret) {
			t.Errorf("upstream got Authorization %q", r.Header.Get("Authorization"))
		}
		close(arrived)
		<-release
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"m","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2}}`)
	}))
	defer up.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	line, done := startCLI(t, ctx, map[string]string{"MY_KEY": "from-env", "OPENAI_API_KEY": "not-this"},
		"proxy", "--db", db, "--upstream", up.URL+"/v1", "--listen", "127.0.0.1:0", "--upstream-key-env", "MY_KEY")
	base := listenURL(t, line)
	type result struct {
		code int
		body string
	}
	got := make(chan result, 1)
	go func() {
		code, body := post(t, base+"/v1/chat/completions", secret, `{"model":"m","max_tokens":5,"messages":[]}`)
		got <- result{code, body}
	}()
	<-arrived
	cancel() // SIGINT: stop accepting, drain
	select {
	case err := <-done:
		t.Fatalf("proxy exited with a request in flight: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if r := <-got; r.code != 200 || !strings.Contains(r.body, `"prompt_tokens":40`) {
		t.Errorf("in-flight request: %d %s", r.code, r.body)
	}
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v", err)
	}
	v := decode(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout)
	if l := v["limits"].([]any)[0].(map[string]any); l["used"] != 42.0 {
		t.Errorf("usage after drain: used %v; want 42", l["used"])
	}
}
