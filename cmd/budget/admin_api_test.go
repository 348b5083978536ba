package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The admin API of `budget proxy --admin-listen` (package admin), end to
// end: a real proxy, its admin listener, and the CLI on the same database.

const apiToken = "admin-api-token-0123456789"

// adminProxy starts a proxy on db with the mock upstream and an admin
// listener taking apiToken, and returns the proxy's and the admin
// listener's URLs; it stops when the test ends.
func adminProxy(t *testing.T, db string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lines, done := startCLILines(t, ctx, map[string]string{"ADMIN": apiToken}, 2, "proxy", "--db", db, "--mock-upstream",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--admin-token-env", "ADMIN")
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("proxy exited with %v", err)
		}
	})
	return listenURL(t, lines[0]), strings.TrimSuffix(listenURL(t, lines[1]), "/")
}

// adminCall sends method path to the admin API with the global token and
// a JSON body ("" for none), and checks the status.
func adminCall(t *testing.T, admin, method, path, body string, want int) string {
	t.Helper()
	code, out := call(t, method, admin+path, body, "Authorization", "Bearer "+apiToken, "Content-Type", "application/json")
	if code != want {
		t.Fatalf("%s %s: status %d, want %d\n%s", method, path, code, want, out)
	}
	return out
}

// TestAdminAPIEndToEnd creates a team, two keys and a dollar budget over
// HTTP only, sends traffic through the proxy with both keys, and reads the
// report and the audit log back over HTTP.
func TestAdminAPIEndToEnd(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	api, admin := adminProxy(t, db)

	adminCall(t, admin, "PUT", "/admin/v1/teams/research", `{"org": "acme"}`, http.StatusCreated)
	adminCall(t, admin, "POST", "/admin/v1/prices", `{"provider": "openai", "model": "gpt-4o-mini", "input": "1", "output": "2"}`, http.StatusCreated)
	secrets := map[string]string{}
	for _, k := range []string{"alice", "bob"} {
		var s struct{ Name, Secret string }
		if err := json.Unmarshal([]byte(adminCall(t, admin, "POST", "/admin/v1/keys", `{"name": "`+k+`", "team": "research"}`, http.StatusCreated)), &s); err != nil {
			t.Fatal(err)
		}
		secrets[k] = s.Secret
	}
	var lim struct {
		ID     string `json:"id"`
		Metric string `json:"metric"`
		Limit  int64  `json:"limit"`
	}
	out := adminCall(t, admin, "POST", "/admin/v1/limits", `{"team": "research", "metric": "usd", "limit": "5.00", "window": "daily"}`, http.StatusCreated)
	if err := json.Unmarshal([]byte(out), &lim); err != nil || lim.Metric != "usd" || lim.Limit != 5_000_000 {
		t.Fatalf("the budget: %s (%v)", out, err)
	}

	// One connection: the proxy reads a request on it only once the one
	// before has been settled (its handler returned, the commit written),
	// so after the last answer and one more request all three are charged.
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	send := func(method, url, secret, body string) (int, string) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, k := range []string{"alice", "bob", "alice"} {
		code, body := send("POST", api+"/v1/chat/completions", secrets[k], `{"model":"gpt-4o-mini","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`)
		if code != http.StatusOK {
			t.Fatalf("%s's request: %d %s", k, code, body)
		}
	}
	if code, _ := send("GET", api+"/healthz", "", ""); code != http.StatusOK {
		t.Fatalf("healthz %d", code)
	}

	var rep struct {
		Rows []struct {
			Key      string  `json:"key"`
			Team     string  `json:"team"`
			Requests int64   `json:"requests"`
			Tokens   int64   `json:"tokens"`
			USD      float64 `json:"usd"`
		} `json:"rows"`
	}
	out = adminCall(t, admin, "GET", "/admin/v1/report?by=key,team&until=2026-03-03", "", http.StatusOK)
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 || rep.Rows[0].Key != "alice" || rep.Rows[0].Requests != 2 || rep.Rows[1].Key != "bob" ||
		rep.Rows[1].Requests != 1 || rep.Rows[0].Team != "research" || rep.Rows[0].USD <= 0 || rep.Rows[0].Tokens <= 0 {
		t.Fatalf("the report by key and team:\n%s", out)
	}

	out = adminCall(t, admin, "GET", "/admin/v1/audit", "", http.StatusOK)
	var raw struct {
		Entries []map[string]any `json:"entries"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range raw.Entries {
		if e["actor"] != "admin" {
			t.Errorf("entry %v: actor %v, want admin", e["id"], e["actor"])
		}
		got = append(got, e["action"].(string)+" "+e["object"].(string)+" "+e["object_id"].(string))
	}
	want := []string{"create team research", "create price", "create key alice", "create key bob", "create limit " + lim.ID}
	if !containsInOrder(got, want) {
		t.Fatalf("the audit log: %q\nwant, in this order: %q", got, want)
	}

	// A team's token, made with the CLI on the proxy's database, works at
	// once: it sees its team's keys, and its changes are logged by name.
	lead := strings.TrimSpace(mustRun(t, 0, "admin", "token", "add", "--db", db, "lead", "--team", "research").stdout)
	code, body := call(t, "GET", admin+"/admin/v1/keys", "", "Authorization", "Bearer "+lead)
	if code != http.StatusOK || !strings.Contains(body, `"alice"`) || !strings.Contains(body, `"bob"`) {
		t.Fatalf("the team's token lists keys: %d %s", code, body)
	}
	if code, body = call(t, "DELETE", admin+"/admin/v1/keys/bob", "", "Authorization", "Bearer "+lead); code != http.StatusOK {
		t.Fatalf("the team's token revokes bob: %d %s", code, body)
	}
	if code, body = call(t, "PUT", admin+"/admin/v1/teams/research", `{"org": "other"}`, "Authorization", "Bearer "+lead); code != http.StatusForbidden {
		t.Fatalf("the team's token moves its team: %d %s, want 403", code, body)
	}
	out = mustRun(t, 0, "audit", "ls", "--db", db, "--json", "--limit", "1").stdout
	if !strings.Contains(out, `"actor": "lead"`) || !strings.Contains(out, `"action": "revoke"`) {
		t.Fatalf("the newest audit entry:\n%s\nwant lead's revoke", out)
	}
}

// containsInOrder reports whether every one of want prefixes an entry of
// got, in want's order.
func containsInOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && strings.HasPrefix(g, want[i]) {
			i++
		}
	}
	return i == len(want)
}

// TestAdminAPIAnswersAsTheCLIPrints: every listing of the API is, byte
// for byte, what the CLI's --json (or report's csv, or export) prints for
// the same database at the same instant.
func TestAdminAPIAnswersAsTheCLIPrints(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "team", "set", "--db", db, "research", "--org", "acme")
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "--db", db, "app", "--team", "research").stdout)
	mustRun(t, 0, "key", "add", "--db", db, "idle")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "100000", "--window", "daily", "--alert", "1")
	mustRun(t, 0, "limit", "set", "--db", db, "--team", "research", "--metric", "usd", "--limit", "2.5", "--window", "monthly")
	mustRun(t, 0, "price", "set", "--db", db, "--provider", "openai", "--model", "gpt-4o-mini", "--input", "1", "--output", "2")
	api, admin := adminProxy(t, db)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	for range 2 {
		req, _ := http.NewRequest("POST", api+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if resp, err := client.Get(api + "/healthz"); err != nil { // on the same connection: both are settled
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}

	for _, c := range []struct {
		path string
		cli  []string
	}{
		{"/admin/v1/keys", []string{"key", "ls", "--json"}},
		{"/admin/v1/teams", []string{"team", "ls", "--json"}},
		{"/admin/v1/limits", []string{"limit", "ls", "--json"}},
		{"/admin/v1/limits?key=app", []string{"limit", "ls", "--json", "--key", "app"}},
		{"/admin/v1/prices", []string{"price", "ls", "--json"}},
		{"/admin/v1/alerts", []string{"alerts", "ls", "--json"}},
		{"/admin/v1/report?by=key,team,model&until=2026-03-03", []string{"report", "--format", "json", "--by", "key,team,model", "--until", "2026-03-03"}},
		{"/admin/v1/report?by=day&format=csv&until=2026-03-03", []string{"report", "--format", "csv", "--by", "day", "--until", "2026-03-03"}},
		{"/admin/v1/usage", []string{"export"}},
		{"/admin/v1/audit", []string{"audit", "ls", "--json"}},
	} {
		want := mustRun(t, 0, append(c.cli, "--db", db)...).stdout
		got := adminCall(t, admin, "GET", c.path, "", http.StatusOK)
		if got != want {
			t.Errorf("GET %s:\n%s\nbudget %s:\n%s", c.path, got, strings.Join(c.cli, " "), want)
		}
	}
}
