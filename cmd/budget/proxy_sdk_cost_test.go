package main

import (
	"bufio"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/proxy"
)

// sdkCost is one call of testdata/sdk/cost.cjs.
type sdkCost struct {
	SDK       string  `json:"sdk"`
	Stream    bool    `json:"stream"`
	RequestID string  `json:"request_id"`
	Cost      *string `json:"cost"`
	Tokens    *string `json:"tokens"`
	Usage     int64   `json:"usage"`
	Text      string  `json:"text"`
}

// TestProxySDKCostHeaders: the official SDKs (openai 7.55.0,
// @anthropic-ai/sdk 1.10.0) read X-Tokenbudget-Cost and
// X-Tokenbudget-Charged-Tokens through their raw-response API, and the
// values are the stored event's cost and tokens, which are the usage the
// SDK itself parsed, in reserve and check mode. Their streams, which now
// declare the cost trailers, parse as before (fetch hides trailers: the
// headers carry no cost) and are stored at the usage the SDK saw.
func TestProxySDKCostHeaders(t *testing.T) {
	t.Parallel()
	modules := sdkModules(t)
	for _, mode := range []string{"reserve", "check"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			db := tempDB(t)
			secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
			mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "1000000", "--window", "daily")
			mustRun(t, 0, "price", "set", "--db", db, "--provider", "openai", "--model", "gpt-4o-mini", "--input", "0.15", "--output", "0.6")
			mustRun(t, 0, "price", "set", "--db", db, "--provider", "anthropic", "--model", "claude-sonnet-4-5", "--input", "3", "--output", "15")

			ctx, cancel := context.WithCancel(context.Background())
			line, done := startCLI(t, ctx, nil, "proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0", "--mode", mode)
			stop := func() {
				if cancel != nil {
					cancel()
					cancel = nil
					if err := <-done; err != nil {
						t.Errorf("proxy exited with %v", err)
					}
				}
			}
			defer stop()
			out := nodeScript(t, modules, "cost.cjs", listenURL(t, line), secret)
			stop() // it waits for the settlements' writes
			var calls []sdkCost
			if err := json.Unmarshal(out, &calls); err != nil || len(calls) != 4 {
				t.Fatalf("node cost.cjs printed %q (%v)", out, err)
			}

			type event struct {
				RequestID                string `json:"request_id"`
				Input, Output, Reasoning int64
				Cost                     *int64 `json:"cost"`
			}
			stored := map[string]event{}
			sc := bufio.NewScanner(strings.NewReader(mustRun(t, 0, "export", "--db", db).stdout))
			for sc.Scan() {
				var ev event
				if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
					t.Fatal(err)
				}
				stored[ev.RequestID] = ev
			}
			for _, c := range calls {
				ev, ok := stored[c.RequestID]
				if !ok || ev.Cost == nil || *ev.Cost == 0 {
					t.Errorf("%s stream=%v: no priced event under request id %q (events %v)", c.SDK, c.Stream, c.RequestID, stored)
					continue
				}
				billable := ev.Input + ev.Output + ev.Reasoning
				if c.Text == "" || c.Usage != billable {
					t.Errorf("%s stream=%v: the SDK got text %q and usage %d; want text, and the %d tokens stored", c.SDK, c.Stream, c.Text, c.Usage, billable)
				}
				if c.Stream {
					if c.Cost != nil || c.Tokens != nil {
						t.Errorf("%s stream: headers carry cost %v tokens %v; want them in trailers only", c.SDK, *c.Cost, *c.Tokens)
					}
					continue
				}
				if c.Cost == nil || *c.Cost != proxy.FormatCost(*ev.Cost) || c.Tokens == nil || *c.Tokens != strconv.FormatInt(billable, 10) {
					t.Errorf("%s: the SDK read cost %v tokens %v; want %s and %d, the stored event's", c.SDK, deref(c.Cost), deref(c.Tokens),
						proxy.FormatCost(*ev.Cost), billable)
				}
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<absent>"
	}
	return *s
}
