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
// policy and a 20 s TTL by default, renewed every third of it. A
// reservation whose proxy does not renew it in time (here: the clock jumps
// past its expiry before its renewal goes off) is charged its estimate by
// recovery under its id; the renewal that then goes off finds it lost and
// the proxy renews it no more; the commit that still arrives records only
// the excess, as id:late, priced as the excess (its trailer still states
// the response's whole usage and cost). Nothing is charged twice or lost.
func TestReservationChargedOnExpiry(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	e := newEnv(t, envOptions{storePath: true, clock: true, renewals: true},
		sseUpstream(anthropicStart+anthropicDelta, anthropicEnd, release))
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
	renewal := e.renewal()
	if renewal.every != proxy.DefaultReservationTTL/3 {
		t.Fatalf("renewal armed for %s; want %s, a third of the TTL", renewal.every, proxy.DefaultReservationTTL/3)
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
	if !renewal.fire() {
		t.Fatal("the renewal timer was stopped while the response lasts")
	}
	if n := e.armedRenewals(); n != 0 || !strings.Contains(e.logs.String(), "expired before its response ended") || e.reservation(rid).State != budget.ReservationExpired {
		t.Errorf("the renewal of the recovered reservation: %d renewals armed after it, reservation %s; want none, expired, and a warning; log:\n%s",
			n, e.reservation(rid).State, e.logs)
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

// TestReservationRenewed: while a response lasts, the proxy renews its
// reservation every third of the TTL (Config.ReservationTTL), each time
// until the tracker's now plus the TTL, so it never expires; once the
// response is over the renewals stop; the commit records the actual usage.
func TestReservationRenewed(t *testing.T) {
	t.Parallel()
	const ttl = 30 * time.Second // not the default: the configured TTL is the one renewed
	release := make(chan struct{})
	e := newEnv(t, envOptions{storePath: true, clock: true, renewals: true, cfg: func(c *proxy.Config) { c.ReservationTTL = ttl }},
		sseUpstream(chatChunk, chatChunk+chatUsageChunk+"data: [DONE]\n\n", release))
	id := e.limit("", "", "tokens", "1h", 1000)
	resp := e.openStream(context.Background(), "/v1/chat/completions", chatBody("gpt-4o", 50, true))
	rid := resp.Header.Get("X-Tokenbudget-Request-Id")
	br := bufio.NewReader(resp.Body)
	readEvent(t, br)
	if r := e.reservation(rid); !r.At.Equal(testNow) || !r.ExpiresAt.Equal(testNow.Add(ttl)) {
		t.Fatalf("reserved at %s until %s; want %s until %s", r.At, r.ExpiresAt, testNow, testNow.Add(ttl))
	}
	now := testNow
	for i := 1; i <= 2; i++ {
		renewal := e.renewal()
		if renewal.every != ttl/3 {
			t.Fatalf("renewal %d armed for %s; want %s, a third of the TTL", i, renewal.every, ttl/3)
		}
		e.advance(ttl / 3)
		now = now.Add(ttl / 3)
		if !renewal.fire() {
			t.Fatalf("renewal %d: the timer was stopped while the response lasts", i)
		}
		if r := e.reservation(rid); r.State != budget.ReservationLive || !r.ExpiresAt.Equal(now.Add(ttl)) {
			t.Fatalf("after renewal %d at %s: %s until %s; want live until %s; log:\n%s", i, now, r.State, r.ExpiresAt, now.Add(ttl), e.logs)
		}
	}
	third := e.renewal() // armed by the second
	close(release)
	if _, err := io.ReadAll(br); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	e.wait(1)
	if n := e.armedRenewals(); !third.stopped() || n != 0 {
		t.Errorf("once the response ended: renewal timer stopped %t, %d renewals armed; want stopped, none", third.stopped(), n)
	}
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
