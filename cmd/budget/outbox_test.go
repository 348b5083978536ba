package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/usagehook"
)

// downHook is the URL of a webhook that refuses every connection.
func downHook(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL + "/usage"
}

// startUsageProxy starts an in-process proxy on db with --usage-webhook
// url, delivering only at its start (no ticks).
func startUsageProxy(t *testing.T, db, url string) *runningProxy {
	t.Helper()
	o := testProxyOptions(db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	o.usageWebhook, o.usageTicks = url, make(chan time.Time)
	return startChecked(t, &Main{Now: func() time.Time { return testNow }, Getenv: func(string) string { return "" }}, o, "")
}

// TestOutboxLsAndRm: outbox ls lists each usage hook with what it has
// not received (0 when up to date) and the undelivered alerts, as a table
// and as {"outbox": [...]}; outbox rm drops a hook's backlog, after which
// nothing is queued for it; a second rm is exit 4.
func TestOutboxLsAndRm(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "100", "--window", "daily", "--alert", "50", "--id", "lim")
	url := downHook(t)
	p := startUsageProxy(t, db, url)
	if err := p.stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, 0, "outbox", "ls", "--db", db).stdout; !strings.Contains(out, "usage  "+url+"  0 ") {
		t.Errorf("outbox ls of an up-to-date hook:\n%s\nwant %s with 0 pending", out, url)
	}
	mustRun(t, 0, "record", "--db", db, "--key", "app", "--provider", "openai", "--model", "m", "--input", "60", "--at", ts(testNow))
	mustRun(t, 0, "record", "--db", db, "--key", "app", "--provider", "openai", "--model", "m", "--input", "1", "--at", ts(testNow.Add(-time.Hour)))
	out := mustRun(t, 0, "outbox", "ls", "--db", db).stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "KIND") ||
		!strings.HasPrefix(lines[1], "usage  "+url+"  2 ") || !strings.Contains(lines[1], ts(testNow)) ||
		!strings.HasPrefix(lines[2], "alert  -") {
		t.Errorf("outbox ls:\n%s\nwant a header, 2 events pending for %s since %s, 1 alert", out, url, ts(testNow))
	}
	v := decode(t, mustRun(t, 0, "outbox", "ls", "--db", db, "--json").stdout)["outbox"].([]any)
	u, a := v[0].(map[string]any), v[1].(map[string]any)
	wantKeys(t, "outbox ls --json", u, "kind", "destination", "pending", "oldest", "attempts", "next_attempt", "last_error")
	if u["kind"] != "usage" || u["destination"] != url || u["pending"] != 2.0 || u["oldest"] != ts(testNow) || u["attempts"] != 0.0 ||
		u["next_attempt"] != nil || u["last_error"] != "" {
		t.Errorf("outbox ls --json usage line %v", u)
	}
	if a["kind"] != "alert" || a["destination"] != "" || a["pending"] != 1.0 {
		t.Errorf("outbox ls --json alert line %v; want 1 alert pending", a)
	}
	if out := mustRun(t, 0, "outbox", "rm", "--db", db, url).stdout; out != "removed usage hook "+url+": 2 undelivered events dropped\n" {
		t.Errorf("outbox rm printed %q", out)
	}
	mustRun(t, 4, "outbox", "rm", "--db", db, url)
	mustRun(t, 0, "record", "--db", db, "--key", "app", "--provider", "openai", "--model", "m", "--input", "1", "--at", ts(testNow))
	if v := decode(t, mustRun(t, 0, "outbox", "ls", "--db", db, "--json").stdout)["outbox"].([]any); len(v) != 1 || v[0].(map[string]any)["kind"] != "alert" {
		t.Errorf("outbox ls --json after rm and a record: %v; want the alerts only", v)
	}
	mustRun(t, 2, "outbox", "rm", "--db", db)
	mustRun(t, 2, "outbox", "frob", "--db", db)
}

// TestProxyOutboxGauges: /metrics reports the backlog of each usage hook
// and of alerts, store-wide.
func TestProxyOutboxGauges(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	url := downHook(t)
	p := startUsageProxy(t, db, url)
	defer p.stop(context.Background())
	for range 3 {
		if code, body := post(t, p.url+"/v1/chat/completions", secret, `{"model":"m","max_tokens":20,"messages":[]}`); code != 200 {
			t.Fatalf("proxied request: %d %s", code, body)
		}
	}
	p.inflight.Wait()
	if _, err := p.tracker.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, text := getURL(http.DefaultClient, p.url+"/metrics")
	for _, want := range []string{
		`tokenbudget_outbox_pending{destination="` + url + `",kind="usage"} 3`,
		`tokenbudget_outbox_oldest_age_seconds{destination="` + url + `",kind="usage"} 0`,
		`tokenbudget_outbox_attempts{destination="` + url + `",kind="usage"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(text, "tokenbudget_outbox"))
		}
	}
}

// grepLines are the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestOutboxLsHidesAWebhooksToken: a webhook URL's query and credentials
// (its token) appear nowhere in outbox ls's table, neither in its
// destination nor in the stored delivery error, which names the URL
// redacted; --json keeps the destination as registered (what outbox rm
// takes) but not in last_error.
func TestOutboxLsHidesAWebhooksToken(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	url := strings.Replace(downHook(t), "http://", "http://u:pw@", 1) + "?token=s3cret"
	p := startUsageProxy(t, db, url) // registers the hook
	if err := p.stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustRun(t, 0, "record", "--db", db, "--key", "app", "--provider", "openai", "--model", "m", "--input", "60", "--at", ts(testNow))
	var logs lockedBuffer
	o := testProxyOptions(db, slog.New(slog.NewTextHandler(&logs, nil)))
	ticks := make(chan time.Time)
	o.usageWebhook, o.usageTicks = url, ticks
	p = startChecked(t, &Main{Now: func() time.Time { return testNow }, Getenv: func(string) string { return "" }}, o, "")
	ticks <- time.Time{} // a delivery round, which fails
	ticks <- time.Time{} // that round has reported
	if err := p.stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "s3cret") || strings.Contains(logs.String(), "pw@") {
		t.Errorf("the proxy's log holds the webhook's token:\n%s", logs.String())
	}
	out := mustRun(t, 0, "outbox", "ls", "--db", db).stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	label := usagehook.Label(url)
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "usage  "+label+"  1 ") || !strings.Contains(lines[1], "Post \""+label+"\"") ||
		strings.Contains(out, "s3cret") || strings.Contains(out, "pw@") {
		t.Errorf("outbox ls:\n%s\nwant the hook as %s, 1 pending, its error naming it so, no token", out, label)
	}
	v := decode(t, mustRun(t, 0, "outbox", "ls", "--db", db, "--json").stdout)["outbox"].([]any)
	u := v[0].(map[string]any)
	if last, _ := u["last_error"].(string); u["destination"] != url || !strings.Contains(last, label) || strings.Contains(last, "s3cret") {
		t.Errorf("outbox ls --json: destination %v, last_error %q; want %s, and the error naming %s", u["destination"], last, url, label)
	}
}
