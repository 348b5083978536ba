package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/proxy"
)

// leaseReads is one limit's used and reserved as each read shows it.
type leaseReads struct {
	budget, dashboard, inspect [2]int64 // used, reserved
}

// TestProxyLeasedRoomReadAsReserved: while budget proxy holds leases (its
// default), every read counts their room as reserved, alike: GET
// /v1/budget and the dashboard (served by the proxy's tracker) and budget
// inspect (another process, reading the database) show the same used
// (exactly the answers' usage) and the same reserved, which is more than
// the one request then in flight holds: the fast route's lease keeps its
// free room. budget verify is exact meanwhile, and after shutdown nothing
// is reserved and verify is exact still. On SQLite and PostgreSQL.
func TestProxyLeasedRoomReadAsReserved(t *testing.T) {
	t.Parallel()
	for _, target := range moveTargets {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			testLeasedRoomRead(t, target.fresh(t))
		})
	}
}

func testLeasedRoomRead(t *testing.T, db string) {
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--id", "lim_app", "--limit", "1000000", "--window", "daily")
	held := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// On PostgreSQL the proxy keeps its lease journal under
	// $XDG_STATE_HOME.
	env := map[string]string{"XDG_STATE_HOME": t.TempDir()}
	lines, done := startCLILines(t, ctx, env, 2, "proxy", "--db", db, "--upstream", leaseCrashUpstream(t, held),
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	api, dash := listenURL(t, lines[0]), strings.TrimSuffix(listenURL(t, lines[1]), "/")

	const answers = 10
	for range answers {
		if code, body := post(t, api+"/v1/chat/completions", secret, leaseCrashFast); code != 200 {
			t.Fatalf("POST: %d %s", code, body)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, api+"/v1/chat/completions", strings.NewReader(leaseCrashHeld))
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := proxyClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); resp.StatusCode != 200 || err != nil {
		t.Fatalf("held stream: %d %v", resp.StatusCode, err)
	}
	<-held
	ri, _ := proxy.ParseRequest(proxy.OpenAIChat, []byte(leaseCrashHeld))
	est := ri.Estimate(proxy.OpenAIChat, proxy.DefaultMaxOutput, proxy.DefaultImageTokens)

	dashRE := regexp.MustCompile(`data-id="lim_app"[\s\S]*?data-used="(\d+)" data-reserved="(\d+)"`)
	var r leaseReads
	read := func() {
		_, body := call(t, http.MethodGet, api+"/v1/budget", "", "Authorization", "Bearer "+secret)
		var v struct {
			Limits []struct {
				ID             string
				Used, Reserved int64
			}
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil || len(v.Limits) != 1 || v.Limits[0].ID != "lim_app" {
			t.Fatalf("GET /v1/budget: %v %s", err, body)
		}
		r.budget = [2]int64{v.Limits[0].Used, v.Limits[0].Reserved}
		_, page := get(t, dash+"/")
		m := dashRE.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("the dashboard has no bar for lim_app:\n%s", page)
		}
		u, _ := strconv.ParseInt(m[1], 10, 64)
		rs, _ := strconv.ParseInt(m[2], 10, 64)
		r.dashboard = [2]int64{u, rs}
		l := decode(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout)["limits"].([]any)[0].(map[string]any)
		r.inspect = [2]int64{int64(l["used"].(float64)), int64(l["reserved"].(float64))}
	}
	// The proxy's writer writes the lease's hold and the commits in its
	// next batch: the database's view may lag the proxy's by one.
	waitFor(t, 10*time.Second, "every read shows the answers and the lease", func() (bool, string) {
		read()
		return r.budget == r.dashboard && r.dashboard == r.inspect &&
			r.inspect[0] == answers*(leaseCrashIn+leaseCrashOut) && r.inspect[1] > est.Input+est.Output, fmt.Sprintf("%+v", r)
	})
	mustRun(t, 0, "verify", "--db", db)

	resp.Body.Close() // the held stream's client leaves: it is settled
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy: %v", err)
	}
	l := decode(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout)["limits"].([]any)[0].(map[string]any)
	if l["reserved"] != 0.0 || l["used"].(float64) <= answers*(leaseCrashIn+leaseCrashOut) {
		t.Errorf("after shutdown: %v; want nothing reserved, the left stream charged", l)
	}
	mustRun(t, 0, "verify", "--db", db)
}
