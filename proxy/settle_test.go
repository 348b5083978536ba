package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// reservation reads a reservation as stored.
func (e *env) reservation(id string) budget.ReservationRow {
	e.t.Helper()
	ctx := context.Background()
	var r budget.ReservationRow
	// A handle of its own on the file, as another process would read it.
	s, err := tokenbudget.OpenStore(ctx, e.path, tokenbudget.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Close()
	if err := s.View(ctx, func(tx budget.Tx) error {
		rows, err := tx.Reservations(ctx, []string{id})
		if err == nil && len(rows) != 1 {
			err = fmt.Errorf("%d rows", len(rows))
		}
		if err == nil {
			r = rows[0]
		}
		return err
	}); err != nil {
		e.t.Fatalf("reservation %s: %v", id, err)
	}
	return r
}

// TestRequestIDHeader: every proxied answer (2xx, streamed, an upstream
// error, an unreachable upstream) carries X-Tokenbudget-Request-Id, once,
// even when the upstream sends one of its own; the usage is recorded under
// that id: the reservation id in reserve mode (released on an error: on
// the store path its row says so; from leases nothing is charged for it
// and nothing stays held once the lease idles), a generated id in check
// mode.
func TestRequestIDHeader(t *testing.T) {
	t.Parallel()
	upstream := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Tokenbudget-Request-Id", "upstream-says")
		switch r.Header.Get("X-Test") {
		case "stream":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, chatChunk+chatUsageChunk+"data: [DONE]\n\n")
		case "error":
			writeJSON(w, 500, `{"error":{"message":"boom"}}`)
		default:
			writeJSON(w, 200, chatUsageJSON(10, 20))
		}
	}
	for _, m := range []struct {
		name      string
		mode      proxy.Mode
		storePath bool
	}{{"reserve", proxy.ModeReserve, false}, {"reserve-store", proxy.ModeReserve, true}, {"check", proxy.ModeCheck, false}} {
		mode := m.mode
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: mode, storePath: m.storePath, clock: true}, upstream)
			lim := e.limit("", "", "tokens", "1h", 1000)
			prefix := map[proxy.Mode]string{proxy.ModeReserve: "rsv_", proxy.ModeCheck: "req_"}[mode]
			seen := map[string]bool{}
			for _, c := range []struct {
				name, test string
				stream     bool
				status     int
				want       *usageRow // nil: nothing recorded
			}{
				{"json", "", false, 200, &usageRow{10, 20, 0}},
				{"stream", "stream", true, 200, &usageRow{5, 7, 0}},
				{"upstream error", "error", false, 500, nil},
			} {
				r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, c.stream), "X-Test", c.test)
				ids := r.header.Values("X-Tokenbudget-Request-Id")
				if r.status != c.status || len(ids) != 1 || !strings.HasPrefix(ids[0], prefix) || seen[ids[0]] {
					t.Errorf("%s: status %d, request ids %q; want %d and one new %s... id", c.name, r.status, ids, c.status, prefix)
					continue
				}
				id := ids[0]
				seen[id] = true
				rows := e.usageRows(id)
				switch {
				case c.want == nil && len(rows) != 0:
					t.Errorf("%s: recorded %v; want nothing", c.name, rows)
				case c.want != nil && (len(rows) != 1 || rows[id] != *c.want):
					t.Errorf("%s: recorded %v under %s; want %v", c.name, rows, id, *c.want)
				}
				if mode == proxy.ModeReserve && m.storePath {
					want := budget.ReservationCommitted
					if c.want == nil {
						want = budget.ReservationReleased
					}
					if got := e.reservation(id).State; got != want {
						t.Errorf("%s: reservation %s is %s; want %s", c.name, id, got, want)
					}
				}
			}
			e.upstream.Close()
			r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false))
			if ids := r.header.Values("X-Tokenbudget-Request-Id"); r.status != http.StatusBadGateway || len(ids) != 1 || !strings.HasPrefix(ids[0], prefix) {
				t.Errorf("unreachable upstream: status %d, request ids %q; want 502 and one id", r.status, ids)
			}
			if !e.leased() {
				return
			}
			// Only the two answers' usage is charged; the errors' room is
			// free once the lease idles; and leases did answer.
			if used, reserved := e.settled(lim); used != 30+12 || reserved != 0 {
				t.Errorf("used %d reserved %d once the lease idled; want 42 (the two answers) and 0", used, reserved)
			}
			if n := e.db.Stats().Leased; n == 0 {
				t.Errorf("no reservation came from a lease")
			}
		})
	}
}

// TestReservationChargedOnExpiry: the proxy reserves with the charge
// policy and a 20 s TTL by default. A reservation whose proxy stops
// renewing it (here: the clock jumps past its expiry) is charged its
// estimate by recovery under its id; the commit that still arrives records
// only the excess, as id:late, priced as the excess (its trailer still
// states the response's whole usage and cost). Nothing is charged twice
// or lost.
func TestReservationChargedOnExpiry(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	e := newEnv(t, envOptions{clock: true}, sseUpstream(anthropicStart+anthropicDelta, anthropicEnd, release))
	id := e.limit("", "", "tokens", "1h", 1000)
	if _, err := e.db.SetPrices(context.Background(), budget.PriceSpec{Provider: "anthropic", Model: "claude-x", Input: "3", Output: "15",
		From: testNow.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	resp := e.openStream(context.Background(), "/v1/messages",
		`{"model":"claude-x","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	rid := resp.Header.Get("X-Tokenbudget-Request-Id")
	br := bufio.NewReader(resp.Body)
	readEvent(t, br)
	r := e.reservation(rid)
	if r.OnExpiry != budget.ExpireCharge || r.ExpiresAt.Sub(r.At) != proxy.DefaultReservationTTL || proxy.DefaultReservationTTL != 20*time.Second {
		t.Fatalf("reservation: on expiry %q, TTL %s; want charge, 20s", r.OnExpiry, r.ExpiresAt.Sub(r.At))
	}

	e.advance(3 * time.Minute)
	rec, err := e.db.Recover(context.Background(), e.db.Now())
	if err != nil || rec.ChargedReservations != 1 {
		t.Fatalf("recover: %+v %v; want 1 charged", rec, err)
	}
	// estimate: ceil((4+2)/4) + 4 = 6 input, 100 output
	if rows := e.usageRows(rid); len(rows) != 1 || rows[rid] != (usageRow{6, 100, 0}) {
		t.Errorf("after recovery: %v; want the estimate 6/100 under %s", rows, rid)
	}
	close(release)
	if _, err := io.ReadAll(br); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	e.wait(1)
	// actual 20 input (17 + 3 cached), 9 output: 14 input over the estimate
	if rows := e.usageRows(rid); len(rows) != 2 || rows[rid] != (usageRow{6, 100, 0}) || rows[rid+":late"] != (usageRow{14, 0, 0}) {
		t.Errorf("after the late commit: %v; want the estimate and 14 input late", rows)
	}
	if used, reserved := e.used(id); used != 120 || reserved != 0 {
		t.Errorf("used %d reserved %d; want 120 0", used, reserved)
	}
	// The late event costs its 14 input tokens at $3 (the whole usage,
	// 20 in and 9 out, would be 195 micro-dollars), the trailer the whole.
	late := int64(-1)
	for _, ev := range e.events() {
		if ev.RequestID == rid+":late" {
			late = ev.Cost
		}
	}
	if late != 42 {
		t.Errorf("the late event costs %d micro-dollars (-1: none); want 42, its excess's", late)
	}
	if c := resp.Trailer.Get("X-Tokenbudget-Cost"); c != "0.000195" {
		t.Errorf("trailer cost %q; want 0.000195, the response's usage", c)
	}
}

// TestReservationRenewed: while a response lasts longer than the
// reservation's TTL, the proxy renews the reservation (every third of the
// TTL), so it never expires; the commit records the actual usage.
func TestReservationRenewed(t *testing.T) {
	t.Parallel()
	const ttl = 900 * time.Millisecond // renewed every 300ms: room for a slow writer on a loaded machine
	release := make(chan struct{})
	e := newEnv(t, envOptions{cfg: func(c *proxy.Config) { c.ReservationTTL = ttl }},
		sseUpstream(chatChunk, chatChunk+chatUsageChunk+"data: [DONE]\n\n", release))
	id := e.limit("", "", "tokens", "1h", 1000)
	resp := e.openStream(context.Background(), "/v1/chat/completions", chatBody("gpt-4o", 50, true))
	rid := resp.Header.Get("X-Tokenbudget-Request-Id")
	br := bufio.NewReader(resp.Body)
	readEvent(t, br)
	first := e.reservation(rid)
	if got := first.ExpiresAt.Sub(first.At); got != ttl {
		t.Fatalf("TTL %s; want %s", got, ttl)
	}
	// Renewed twice: the expiry has moved past the first renewal's.
	deadline := time.Now().Add(10 * time.Second)
	for r := e.reservation(rid); !r.ExpiresAt.After(first.ExpiresAt.Add(ttl / 3)); r = e.reservation(rid) {
		if time.Now().After(deadline) {
			t.Fatalf("not renewed in 10s: expires %s, first %s; log:\n%s", r.ExpiresAt, first.ExpiresAt, e.logs)
		}
		<-time.After(ttl / 10)
	}
	close(release)
	if _, err := io.ReadAll(br); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	e.wait(1)
	if r := e.reservation(rid); r.State != budget.ReservationCommitted {
		t.Errorf("reservation %s; want committed", r.State)
	}
	if rows := e.usageRows(rid); len(rows) != 1 || rows[rid] != (usageRow{5, 7, 0}) {
		t.Errorf("recorded %v; want 5/7 under %s", rows, rid)
	}
	if used, _ := e.used(id); used != 12 {
		t.Errorf("used %d; want 12", used)
	}
}

// TestInvalidUsage: a usage whose billable sum (input + output + reasoning)
// is over 2^53-1, though each count alone is not, is invalid: the request
// is charged its estimate and counted as a response without usage, JSON
// or streamed.
func TestInvalidUsage(t *testing.T) {
	t.Parallel()
	max := strconv.FormatInt(budget.MaxTokens, 10)
	release := make(chan struct{})
	close(release)
	stream := sseUpstream(anthropicStart+anthropicDelta,
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":"+max+"}}\n\n", release)
	e := newEnv(t, envOptions{}, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/messages" {
			stream(w, r)
			return
		}
		io.Copy(io.Discard, r.Body)
		writeJSON(w, 200, `{"model":"m","choices":[],"usage":{"prompt_tokens":`+max+`,"completion_tokens":1}}`)
	})
	id := e.limit("", "", "tokens", "1h", 1_000_000)
	if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false)); r.status != 200 {
		t.Fatalf("json: status %d %s", r.status, r.body)
	}
	if used, _ := e.used(id); used != 56 {
		t.Errorf("json: used %d; want the estimate 56", used)
	}
	if r := e.do("/v1/messages", `{"model":"claude-x","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`); r.status != 200 {
		t.Fatalf("stream: status %d %s", r.status, r.body)
	}
	if used, _ := e.used(id); used != 56+106 {
		t.Errorf("stream: used %d; want 56 + the estimate 106", used)
	}
	if m := e.metrics(); !strings.Contains(m, `tokenbudget_proxy_responses_without_usage_total{provider="anthropic"} 1`) ||
		!strings.Contains(m, `tokenbudget_proxy_responses_without_usage_total{provider="openai"} 1`) {
		t.Errorf("/metrics does not count both as responses without usage")
	}
}
