package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// costModes are the admission modes the cost tests run in: check, reserve
// on the store's path (budget proxy --leases=false), and reserve from
// leases (the default).
var costModes = []struct {
	name      string
	mode      proxy.Mode
	storePath bool
}{{"check", proxy.ModeCheck, false}, {"reserve-store", proxy.ModeReserve, true}, {"reserve-leases", proxy.ModeReserve, false}}

// keyHeader sends the gateway key where path's SDK does.
func (e *env) keyHeader(path string) []string {
	if path == "/v1/messages" {
		return []string{"Authorization", "", "X-Api-Key", e.secret}
	}
	return []string{"Authorization", "Bearer " + e.secret}
}

// events are the events stored for key "team".
func (e *env) events() []budget.Usage {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.db.Flush(ctx); err != nil {
		e.t.Fatal(err)
	}
	var evs []budget.Usage
	if _, err := e.db.Export(ctx, time.Unix(0, 0), time.Now().Add(time.Hour), "team", func(u budget.Usage) error {
		evs = append(evs, u)
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return evs
}

// setCostPrices prices the models the cost tests request.
func (e *env) setCostPrices() {
	e.t.Helper()
	cacheRead, write5m, write1h := "1.25", "3.75", "6"
	if _, err := e.db.SetPrices(context.Background(),
		budget.PriceSpec{Provider: "openai", Model: "gpt-4o", Input: "2.5", Output: "10", CacheRead: &cacheRead},
		budget.PriceSpec{Provider: "anthropic", Model: "claude-sonnet-4-5", Input: "3", Output: "15", CacheWrite: &write5m, CacheWrite1h: &write1h},
	); err != nil {
		e.t.Fatal(err)
	}
}

// TestCostOnTheResponse: a response carries what its settlement charged,
// the cost and the billable tokens of the event stored for it: a whole
// answer in its headers (X-Tokenbudget-Cost in dollars with six places,
// X-Tokenbudget-Charged-Tokens), a stream in trailers (and the access log
// line says the same), for OpenAI's and Anthropic's shapes, in
// check mode, reserve mode and reserve mode from leases. The captures'
// usage includes cache reads (OpenAI's cached_tokens) and 5-minute and
// 1-hour cache writes, each priced at its own rate; the expected dollars
// are worked out by hand from the capture's counts.
func TestCostOnTheResponse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file, path, model string
		stream            bool
		tokens            int64
		cost              string
	}{
		// 120 uncached at $2.5, 1024 cached at $1.25, 2 out at $10.
		{"openai-chat-json-1.json", "/v1/chat/completions", "gpt-4o", false, 1146, "0.001600"},
		{"openai-chat-stream-1.txt", "/v1/chat/completions", "gpt-4o", true, 1146, "0.001600"},
		// 4 uncached at $3, 1163 5-minute writes at $3.75, 187 out at $15:
		// 7178.25 micro-dollars, rounded half up.
		{"anthropic-messages-json-1.json", "/v1/messages", "claude-sonnet-4-5", false, 1354, "0.007178"},
		// 17 at $3, 1500 5-minute writes at $3.75, 1000 1-hour writes at
		// $6, 10 out at $15.
		{"anthropic-messages-json-1h.json", "/v1/messages", "claude-sonnet-4-5", false, 2527, "0.011826"},
		{"anthropic-messages-stream-1h.txt", "/v1/messages", "claude-sonnet-4-5", true, 2527, "0.011826"},
	}
	for _, m := range costModes {
		for _, c := range cases {
			t.Run(m.name+"/"+c.file, func(t *testing.T) {
				t.Parallel()
				data, err := os.ReadFile(filepath.Join(capturesDir, c.file))
				if err != nil {
					t.Fatal(err)
				}
				access := &syncBuffer{}
				e := newEnv(t, envOptions{mode: m.mode, storePath: m.storePath, cfg: func(pc *proxy.Config) {
					pc.AccessLog = slog.New(slog.NewJSONHandler(access, nil))
				}}, func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					if c.stream {
						w.Header().Set("Content-Type", "text/event-stream")
					}
					w.WriteHeader(http.StatusOK)
					writeChunked(w, data)
				})
				e.limit("", "", "tokens", "1h", 1_000_000)
				e.setCostPrices()
				body, _ := json.Marshal(map[string]any{"model": c.model, "max_tokens": 300, "stream": c.stream,
					"messages": []any{map[string]any{"role": "user", "content": "hi"}}})
				r := e.send(c.path, string(body), e.keyHeader(c.path)...)
				e.wait(1)
				if r.status != http.StatusOK {
					t.Fatalf("status %d: %s", r.status, r.body)
				}
				got, other := r.header, r.trailer
				if c.stream {
					got, other = r.trailer, r.header
				}
				if other.Get("X-Tokenbudget-Cost") != "" || other.Get("X-Tokenbudget-Charged-Tokens") != "" {
					t.Errorf("cost in the wrong place (stream %v): header %v trailer %v", c.stream, r.header, r.trailer)
				}
				evs := e.events()
				if len(evs) != 1 {
					t.Fatalf("%d events stored; want 1: %+v", len(evs), evs)
				}
				ev := evs[0]
				if got.Get("X-Tokenbudget-Cost") != c.cost || proxy.FormatCost(ev.Cost) != c.cost {
					t.Errorf("cost: response %q, stored %d micro-dollars; want %s both", got.Get("X-Tokenbudget-Cost"), ev.Cost, c.cost)
				}
				if n := got.Get("X-Tokenbudget-Charged-Tokens"); n != strconv.FormatInt(c.tokens, 10) || ev.Billable() != c.tokens {
					t.Errorf("charged tokens: response %q, stored %d; want %d both", n, ev.Billable(), c.tokens)
				}
				if ev.RequestID != r.header.Get("X-Tokenbudget-Request-Id") || ev.NoPrice {
					t.Errorf("event %+v; want request id %s, priced", ev, r.header.Get("X-Tokenbudget-Request-Id"))
				}
				var line struct {
					Cost    string `json:"cost"`
					Charged int64  `json:"charged_tokens"`
				}
				if err := json.Unmarshal([]byte(access.String()), &line); err != nil || line.Cost != c.cost || line.Charged != c.tokens {
					t.Errorf("access log line %s (%v); want cost %s, charged_tokens %d", access, err, c.cost, c.tokens)
				}
			})
		}
	}
}

// TestCostOfUnpricedAndFailedAnswers: a model no price matches is charged
// its tokens and no dollars, and the answer says so by leaving
// X-Tokenbudget-Cost out (an unknown cost is not $0) while it still
// carries the tokens; an upstream error is charged nothing and says
// $0.000000 and 0 tokens; a compressed body (whose usage the proxy cannot
// read) passes through as it came, without the cost headers, charged at
// the estimate.
func TestCostOfUnpricedAndFailedAnswers(t *testing.T) {
	t.Parallel()
	for _, m := range costModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			var answer func(w http.ResponseWriter)
			e := newEnv(t, envOptions{mode: m.mode, storePath: m.storePath}, func(w http.ResponseWriter, r *http.Request) {
				answer(w)
			})
			e.limit("", "", "tokens", "1h", 1_000_000)
			e.setCostPrices()

			answer = func(w http.ResponseWriter) { writeJSON(w, http.StatusOK, chatUsageJSON(30, 12)) }
			r := e.do("/v1/chat/completions", chatBody("mystery-model", 50, false))
			if r.status != http.StatusOK || r.header.Values("X-Tokenbudget-Cost") != nil || r.header.Get("X-Tokenbudget-Charged-Tokens") != "42" {
				t.Errorf("unpriced: %d, cost %q, tokens %q; want 200, no cost header, 42 tokens", r.status,
					r.header.Values("X-Tokenbudget-Cost"), r.header.Get("X-Tokenbudget-Charged-Tokens"))
			}
			if evs := e.events(); len(evs) != 1 || !evs[0].NoPrice || evs[0].Cost != 0 || evs[0].Billable() != 42 {
				t.Errorf("unpriced events %+v; want one of 42 tokens, no price", evs)
			}

			answer = func(w http.ResponseWriter) {
				writeJSON(w, http.StatusInternalServerError, `{"error":{"message":"boom","type":"server_error"}}`)
			}
			r = e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false))
			if r.status != http.StatusInternalServerError || r.header.Get("X-Tokenbudget-Cost") != "0.000000" || r.header.Get("X-Tokenbudget-Charged-Tokens") != "0" {
				t.Errorf("upstream error: %d, cost %q, tokens %q; want 500, 0.000000, 0", r.status,
					r.header.Get("X-Tokenbudget-Cost"), r.header.Get("X-Tokenbudget-Charged-Tokens"))
			}

			answer = func(w http.ResponseWriter) {
				// Brotli: the upstream transport decodes only the gzip it asked for.
				w.Header().Set("Content-Encoding", "br")
				writeJSON(w, http.StatusOK, "brotli bytes")
			}
			r = e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false))
			if r.body != "brotli bytes" || r.header.Values("X-Tokenbudget-Cost") != nil || r.header.Values("X-Tokenbudget-Charged-Tokens") != nil {
				t.Errorf("compressed: %q, headers %v; want the body as it came, no cost headers", r.body, r.header)
			}
			if evs := e.events(); len(evs) != 2 || evs[1].Billable() == 0 {
				t.Errorf("events %+v; want the unpriced one and the compressed one at its estimate", evs)
			}
		})
	}
}

// TestBodyOverTheParseCapPassesThrough: a non-streamed answer larger than
// MaxResponseBody is not held: it reaches the client whole, as it came,
// without the cost headers, and is charged at the estimate, whether its
// Content-Length declares the size (it is never held) or it is chunked
// (held up to the cap, then let through).
func TestBodyOverTheParseCapPassesThrough(t *testing.T) {
	t.Parallel()
	reply := chatUsageJSON(30, 12) // 300-odd bytes
	for _, chunked := range []bool{false, true} {
		t.Run("chunked="+strconv.FormatBool(chunked), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: proxy.ModeReserve, cfg: func(pc *proxy.Config) { pc.MaxResponseBody = 100 }},
				func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					if !chunked {
						w.Header().Set("Content-Length", strconv.Itoa(len(reply)))
						io.WriteString(w, reply)
						return
					}
					writeChunked(w, []byte(reply))
				})
			id := e.limit("", "", "tokens", "1h", 1_000_000)
			r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false))
			if r.status != http.StatusOK || r.body != reply {
				t.Fatalf("got %d %q; want 200 and the upstream's body", r.status, r.body)
			}
			if r.header.Values("X-Tokenbudget-Cost") != nil || r.header.Values("X-Tokenbudget-Charged-Tokens") != nil {
				t.Errorf("headers %v; want no cost headers on a body over the parse cap", r.header)
			}
			// The estimate: the prompt's and max_tokens' 50, not the 42 reported.
			if used, _ := e.used(id); used == 42 || used < 50 {
				t.Errorf("charged %d; want the estimate (at least the 50 of max_tokens), not the reported 42", used)
			}
		})
	}
}

// TestCostTrailersOverHTTP2: a stream's cost trailers reach an HTTP/2
// client too (budget proxy serves unencrypted HTTP/2, which the AWS SDKs
// speak), equal to the stored event's.
func TestCostTrailersOverHTTP2(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(capturesDir, "anthropic-messages-stream-1h.txt"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{mode: proxy.ModeReserve}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeChunked(w, data)
	})
	e.setCostPrices()
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	h2 := httptest.NewUnstartedServer(e.proxy.Config.Handler)
	h2.Config.Protocols = &protocols
	h2.Start()
	defer h2.Close()
	req, _ := http.NewRequest(http.MethodPost, h2.URL+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Api-Key", e.secret)
	resp, err := (&http.Client{Transport: &http.Transport{Protocols: &protocols}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	e.wait(1)
	evs := e.events()
	if resp.ProtoMajor != 2 || len(evs) != 1 || resp.Trailer.Get("X-Tokenbudget-Cost") != "0.011826" ||
		proxy.FormatCost(evs[0].Cost) != "0.011826" || resp.Trailer.Get("X-Tokenbudget-Charged-Tokens") != "2527" {
		t.Errorf("%s: trailers %v, events %+v; want the cost 0.011826 and 2527 tokens, as stored", resp.Proto, resp.Trailer, evs)
	}
}
