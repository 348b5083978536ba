package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// gatedStore holds every write transaction while its gate is closed: a
// database that takes a write only once the test lets it.
type gatedStore struct {
	budget.Store
	closed  atomic.Bool
	blocked chan struct{} // a write reached the closed gate
	open    chan struct{} // closed by the test to let the writes through
}

func (g *gatedStore) Update(ctx context.Context, fn func(budget.Tx) error) error {
	if g.closed.Load() {
		select {
		case g.blocked <- struct{}{}:
		default:
		}
		<-g.open
	}
	return g.Store.Update(ctx, fn)
}

func (g *gatedStore) Unwrap() budget.Store { return g.Store }

// TestClientNeverWaitsForTheStoreWrite: the settlement's store write
// follows the response. With every write held at a gate from the moment
// the upstream is called, the client gets the whole answer, its cost
// headers (or a stream's trailers) included, while the write of its
// settlement waits at the gate and nothing is stored; shutting down (the
// middleware's Close, then the tracker's) waits for that write, and once
// the gate opens the event is in the database at the cost the client was
// told. In check mode, in reserve mode on the store's path (where the
// middleware's Close itself waits for the commit) and from leases.
func TestClientNeverWaitsForTheStoreWrite(t *testing.T) {
	t.Parallel()
	for _, m := range costModes {
		for _, stream := range []bool{false, true} {
			name := m.name + "/json"
			if stream {
				name = m.name + "/stream"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				testWriteAfterResponse(t, m.mode, m.mode == proxy.ModeReserve && !m.storePath, stream)
			})
		}
	}
}

func testWriteAfterResponse(t *testing.T, mode proxy.Mode, leases, stream bool) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "budget.db")
	s, err := tokenbudget.OpenStore(ctx, path, tokenbudget.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedStore{Store: s, blocked: make(chan struct{}, 1), open: make(chan struct{})}
	cfg := budget.DefaultConfig()
	cfg.Leases, cfg.LeaseJournal = leases, path+".leases"
	tr, err := budget.New(ctx, g, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := budget.StoreAs[proxy.KeyStore](tr)
	secret, err := proxy.AddKey(ctx, ks, "team", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	max := int64(1_000_000)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "team", Metric: "tokens", Window: "1h", Max: &max}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.SetPrices(ctx, budget.PriceSpec{Provider: "openai", Model: "gpt-4o", Input: "2.5", Output: "10"}); err != nil {
		t.Fatal(err)
	}
	keys := proxy.NewKeys(ks)
	mw, err := proxy.New(tr, proxy.Config{Mode: mode, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		g.closed.Store(true) // admitted: from here on no write goes through
		if !stream {
			writeJSON(w, http.StatusOK, chatUsageJSON(400, 100))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"ok"}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":400,"completion_tokens":100,"total_tokens":500}}`+"\n\ndata: [DONE]\n\n")
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	up, err := proxy.NewUpstream(proxy.UpstreamConfig{URL: u, OpenAIKey: upstreamOpenAIKey})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(mw.Wrap(up))

	body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "max_tokens": 200, "stream": stream,
		"messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	// A proxy that waited for the write would never answer: the bound
	// turns that hang into a failure.
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("the client did not get its answer while the store write was held: %v", err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("the client did not get the whole answer while the store write was held: %v", err)
	}
	cost := resp.Header
	if stream {
		cost = resp.Trailer
	}
	// 400 in at $2.5, 100 out at $10.
	if resp.StatusCode != http.StatusOK || len(got) == 0 || cost.Get("X-Tokenbudget-Cost") != "0.002000" || cost.Get("X-Tokenbudget-Charged-Tokens") != "500" {
		t.Fatalf("answer %d %q cost %q tokens %q; want 200 with cost 0.002000 and 500 tokens",
			resp.StatusCode, got, cost.Get("X-Tokenbudget-Cost"), cost.Get("X-Tokenbudget-Charged-Tokens"))
	}
	<-g.blocked // the settlement's write is at the gate
	front.Close()
	if n := storedEvents(t, tr); len(n) != 0 {
		t.Fatalf("%d events stored before the gate opened; want 0", len(n))
	}
	if !leases && mode == proxy.ModeReserve {
		// The commit waits for its batch: the middleware's Close waits
		// for the commit.
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if err := mw.Close(cancelled); !errors.Is(err, context.Canceled) {
			t.Fatalf("Close with the commit held returned %v; want it to wait (context.Canceled)", err)
		}
	}
	shut := make(chan error, 1)
	go func() {
		err := mw.Close(ctx)
		keys.Wait()
		shut <- errors.Join(err, tr.Close(ctx), s.Close())
	}()
	close(g.open)
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	db, err := tokenbudget.Open(ctx, path, tokenbudget.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	evs := storedEvents(t, db.Tracker)
	if len(evs) != 1 || evs[0].Billable() != 500 || proxy.FormatCost(evs[0].Cost) != "0.002000" ||
		evs[0].RequestID != resp.Header.Get("X-Tokenbudget-Request-Id") {
		t.Fatalf("after shutdown the database holds %+v; want the one event of 500 tokens at $0.002000", evs)
	}
}

// storedEvents are the events in tr's database (a read: the gate holds
// writes only).
func storedEvents(t *testing.T, tr *budget.Tracker) []budget.Usage {
	t.Helper()
	var evs []budget.Usage
	if _, err := tr.Export(context.Background(), time.Unix(0, 0), time.Now().Add(time.Hour), "", func(u budget.Usage) error {
		evs = append(evs, u)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestNextRequestDecidedAfterTheLastSettlement: the settlement is queued
// in the tracker before the response ends, so a client's next request,
// sent as soon as the last answer arrived (without waiting for any
// write), is admitted against the last one's actual usage, not its held
// estimate: with 1,000 tokens, estimates of 560 and answers of 100, five
// requests in a row fit (the fifth has 600 left) and the sixth does not,
// in every mode.
func TestNextRequestDecidedAfterTheLastSettlement(t *testing.T) {
	t.Parallel()
	for _, m := range costModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: m.mode, storePath: m.storePath}, func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusOK, chatUsageJSON(50, 50))
			})
			e.limit("", "", "tokens", "1h", 1000)
			var statuses []int
			for range 6 {
				statuses = append(statuses, e.send("/v1/chat/completions", chatBody("gpt-4o", 550, false), e.keyHeader("")...).status)
			}
			e.wait(6)
			if want := []int{200, 200, 200, 200, 200, 429}; !slices.Equal(statuses, want) {
				t.Errorf("statuses %v; want %v", statuses, want)
			}
		})
	}
}
