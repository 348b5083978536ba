package main

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestProxyLeases: reserve mode with --leases charges every request
// exactly (its actual usage), holds nothing once it stopped, and leaves no
// journal behind: its leases were given back and their journals removed.
func TestProxyLeases(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "1000000", "--window", "daily")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	line, done := startCLI(t, ctx, nil, "proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0", "--leases")
	base := listenURL(t, line)
	const n = 20
	for range n {
		if code, body := post(t, base+"/v1/messages", secret, `{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`); code != 200 {
			t.Fatalf("POST /v1/messages: %d %s", code, body)
		}
	}
	if _, err := os.Stat(db + ".leases"); err != nil {
		t.Fatalf("the lease journal directory: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy exited with %v", err)
	}
	// mock: input ceil((4+2)/4)+3 = 5, output 10 (cut at max_tokens)
	v := decode(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout)
	if l := v["limits"].([]any)[0].(map[string]any); l["used"] != float64(n*15) || l["reserved"] != 0.0 {
		t.Errorf("after %d requests and shutdown: used %v, reserved %v; want %d, 0", n, l["used"], l["reserved"], n*15)
	}
	if entries, err := os.ReadDir(db + ".leases"); err != nil || len(entries) != 0 {
		t.Errorf("journals left after shutdown: %d (%v)", len(entries), err)
	}
	mustRun(t, 0, "verify", "--db", db)
}
