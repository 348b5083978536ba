package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// The leased crash test's requests, all on one route (key, provider,
// model): fast ones the upstream answers at once with leaseCrashIn and
// leaseCrashOut, whole or streamed; held ones ("waits for the crash") whose
// stream the upstream starts, then holds until the proxy is gone.
const (
	leaseCrashFast     = `{"model":"fast","max_tokens":30,"messages":[{"role":"user","content":"answer me now"}]}`
	leaseCrashFastSSE  = `{"model":"fast","max_tokens":30,"stream":true,"messages":[{"role":"user","content":"stream it to me"}]}`
	leaseCrashHeld     = `{"model":"fast","max_tokens":40,"stream":true,"messages":[{"role":"user","content":"this one waits for the crash"}]}`
	leaseCrashIn       = 9 // the usage every fast answer reports
	leaseCrashOut      = 4
	leaseCrashUsageSSE = `data: {"id":"c","object":"chat.completion.chunk","model":"fast","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4}}` + "\n\n"
)

// leaseCrashUpstream answers fast requests with their usage, and starts a
// held request's stream, tells held, then waits until the request is gone.
func leaseCrashUpstream(t *testing.T, held chan<- struct{}) string {
	t.Helper()
	return newLoopback(t, func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		var body struct {
			Stream bool `json:"stream"`
		}
		if err == nil {
			err = json.Unmarshal(raw, &body)
		}
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		if !body.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"c","object":"chat.completion","model":"fast","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, leaseCrashIn, leaseCrashOut)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"ok"}}]}`+"\n\n")
		if !bytes.Contains(raw, []byte("waits for the crash")) {
			io.WriteString(w, leaseCrashUsageSSE+"data: [DONE]\n\n")
			return
		}
		http.NewResponseController(w).Flush()
		held <- struct{}{}
		<-r.Context().Done() // the proxy died
	})
}

// exportedEvent is one line of budget export.
type exportedEvent struct {
	RequestID string `json:"request_id"`
	Input     int64  `json:"input"`
	Output    int64  `json:"output"`
	Reasoning int64  `json:"reasoning"`
}

// TestProxyLeasedCrashChargesExactly: SIGKILL of budget proxy with its
// default leases, mid-traffic, charges exactly. 48 clients send up to
// 1,920 requests the upstream answers at once (whole and streamed); once a
// quarter are answered, 16 streams on the same route start and are held
// open by the upstream, carved from the route's lease (no reservation row
// of their own; at least one must be). Once half the fast requests were
// answered, with the clients still sending and the held streams open, the
// proxy is SIGKILLed, its leases live (their journals are there).
// Recovery by 'budget recover' (polled until nothing is reserved and every
// journal is settled, within the 2 s TTL of --reservation-ttl and the
// lease's renewal) charges each request id once: each complete 200 its
// actual usage, each held stream its estimate (the charge policy), each
// answer the kill cut short its estimate or its actual usage, and at most
// one request per client whose id no client saw its estimate, its actual
// usage or nothing; the limit's used is exactly the sum. verify passes. On
// SQLite (the journal beside the file) and on PostgreSQL (the default
// journal directory under $XDG_STATE_HOME, which recover finds too).
func TestProxyLeasedCrashChargesExactly(t *testing.T) {
	t.Parallel()
	bin := buildBudget(t)
	for _, target := range moveTargets {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			testLeasedCrash(t, bin, target.fresh(t))
		})
	}
}

func testLeasedCrash(t *testing.T, bin, db string) {
	state := t.TempDir()
	env := []string{"XDG_STATE_HOME=" + state}
	journal := db + ".leases"
	if isPostgres(db) {
		journal = filepath.Join(state, "tokenbudget", "leases", postgresIdentity(db))
	}
	run := binRunner(t, bin, db, env)
	cli := func(args ...string) string {
		t.Helper()
		out, _ := run(args...)
		return out
	}
	secret := strings.TrimSpace(cli("key", "add", "app"))
	cli("limit", "set", "--key", "app", "--limit", "1000000000", "--window", "daily", "--id", "day")

	held := make(chan struct{}, 64)
	p := startProxyProcEnv(t, bin, env, "--db", db, "--upstream", leaseCrashUpstream(t, held), "--reservation-ttl", "2s")
	client := proxyClient()
	send := func(body string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, p.url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		return client.Do(req)
	}

	const heldN, clients, each = 16, 48, 40
	const killAt = clients * each / 2 // answers before the kill, clients still sending
	var (
		mu         sync.Mutex
		fast       []string // request ids of the complete 200s
		cut        []string // ids of fast requests whose answer the kill cut short
		holding    []string // request ids of the held streams
		heldResps  []*http.Response
		wg, fastWG sync.WaitGroup
		killed     atomic.Bool
	)
	defer func() {
		for _, r := range heldResps {
			r.Body.Close()
		}
	}()
	// The held streams start once the load has given the route its lease,
	// so that they are carved from it.
	loaded := make(chan struct{})
	loadedOnce := sync.OnceFunc(func() { close(loaded) })
	killNow := make(chan struct{})
	killOnce := sync.OnceFunc(func() { close(killNow) })
	for range heldN {
		wg.Go(func() {
			<-loaded
			resp, err := send(leaseCrashHeld)
			if err != nil {
				t.Errorf("held stream: %v", err)
				return
			}
			id := resp.Header.Get("X-Tokenbudget-Request-Id")
			if _, err := bufio.NewReader(resp.Body).ReadString('\n'); resp.StatusCode != 200 || id == "" || err != nil {
				t.Errorf("held stream: %d, id %q, first line: %v", resp.StatusCode, id, err)
			}
			mu.Lock()
			holding, heldResps = append(holding, id), append(heldResps, resp)
			mu.Unlock()
		})
	}
	for c := range clients {
		fastWG.Go(func() {
			for i := range each {
				body := leaseCrashFast
				if (c+i)%2 == 1 {
					body = leaseCrashFastSSE
				}
				resp, err := send(body)
				if err != nil {
					if !killed.Load() {
						t.Errorf("fast request: %v", err)
					}
					return // never admitted, or its id never reached the client
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				id := resp.Header.Get("X-Tokenbudget-Request-Id")
				if resp.StatusCode != 200 || err != nil || id == "" {
					if !killed.Load() {
						t.Errorf("fast request: %d %v, id %q: %s", resp.StatusCode, err, id, b)
					}
					if id != "" {
						mu.Lock()
						cut = append(cut, id)
						mu.Unlock()
					}
					return
				}
				mu.Lock()
				fast = append(fast, id)
				switch len(fast) {
				case clients * each / 4:
					loadedOnce()
				case killAt:
					killOnce()
				}
				mu.Unlock()
			}
		})
	}
	for range heldN {
		select {
		case <-held:
		case <-time.After(time.Minute):
			t.Fatalf("the held streams never reached the upstream\n%s", p.stderr)
		}
	}
	wg.Wait()
	select {
	case <-killNow:
	case <-time.After(time.Minute):
		t.Fatalf("fewer than %d answers within a minute\n%s", killAt, p.stderr)
	}
	if t.Failed() {
		t.FailNow()
	}
	killed.Store(true)
	p.kill(t)
	fastWG.Wait()
	mu.Lock()
	answered := len(fast)
	mu.Unlock()
	if answered >= clients*each {
		t.Fatalf("every fast request was answered before the kill: the kill came after the traffic, not during it")
	}
	if entries, err := os.ReadDir(journal); err != nil || len(entries) == 0 {
		t.Fatalf("the dead proxy's lease journals in %s: %d (%v); want its live leases'", journal, len(entries), err)
	}
	// A reservation carved from a lease has no row of its own: only its
	// lease's journal knows it was in flight.
	if rows := reservationRows(t, db, holding); len(rows) == len(holding) {
		t.Fatalf("every held stream has a reservation row: none was carved from a lease")
	}

	// Recovery: once the dead proxy's leases expire, recover settles them
	// from their journals and removes the journals' names.
	waitFor(t, time.Minute, "recover settles every lease and reservation", func() (bool, string) {
		cli("recover")
		l := decode(t, cli("inspect", "--json"))["limits"].([]any)[0].(map[string]any)
		entries, _ := os.ReadDir(journal)
		return l["reserved"] == 0.0 && len(entries) == 0, fmt.Sprintf("reserved %v, %d journals", l["reserved"], len(entries))
	})

	estimate := func(body string) exportedEvent {
		ri, err := proxy.ParseRequest(proxy.OpenAIChat, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		e := ri.Estimate(proxy.OpenAIChat, proxy.DefaultMaxOutput, proxy.DefaultImageTokens)
		return exportedEvent{Input: e.Input, Output: e.Output}
	}
	heldEst, actual := estimate(leaseCrashHeld), exportedEvent{Input: leaseCrashIn, Output: leaseCrashOut}
	if heldEst.Output != 40 {
		t.Fatalf("held estimate %+v; want output 40, its max_tokens", heldEst)
	}
	fastEst := map[exportedEvent]bool{estimate(leaseCrashFast): true, estimate(leaseCrashFastSSE): true}
	// What each request id the clients saw may be charged: a complete
	// answer its actual usage; a held stream its estimate (the charge
	// policy); a fast one the kill cut short its estimate, or its actual
	// usage if its commit was journaled before the kill. A request whose
	// id no client saw (the proxy died before its headers) may have been
	// admitted, or not: its estimate, its actual usage or nothing, at
	// most one per client.
	kind := map[string]string{}
	for _, id := range fast {
		kind[id] = "answered"
	}
	for _, id := range cut {
		kind[id] = "cut"
	}
	for _, id := range holding {
		kind[id] = "held"
	}
	if len(kind) != len(fast)+len(cut)+len(holding) || len(holding) != heldN {
		t.Fatalf("%d 200s, %d cut, %d held streams, %d distinct ids; want %d held and all distinct", len(fast), len(cut), len(holding), len(kind), heldN)
	}
	got := map[string]exportedEvent{}
	var total, unseen int64
	bad := 0
	for line := range strings.Lines(cli("export", "--key", "app")) {
		var ev exportedEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		_, dup := got[ev.RequestID]
		got[ev.RequestID] = ev
		total += ev.Input + ev.Output + ev.Reasoning
		u := exportedEvent{Input: ev.Input, Output: ev.Output, Reasoning: ev.Reasoning}
		var ok bool
		switch kind[ev.RequestID] {
		case "answered":
			ok = u == actual
		case "held":
			ok = u == heldEst
		case "cut":
			ok = u == actual || fastEst[u]
		default:
			unseen++
			ok = u == actual || fastEst[u]
		}
		if dup || !ok {
			if bad++; bad <= 10 {
				t.Errorf("event %+v (%s; a second one for its id: %v); want it charged once, as its kind allows", ev, cmp.Or(kind[ev.RequestID], "id no client saw"), dup)
			}
		}
	}
	if unseen > clients {
		t.Errorf("%d events under ids no client saw; want at most %d (one request in flight per client)", unseen, clients)
	}
	for id, k := range kind {
		if _, ok := got[id]; !ok {
			if bad++; bad <= 20 {
				t.Errorf("request %s (%s) was never charged", id, k)
			}
		}
	}
	l := decode(t, cli("inspect", "--json"))["limits"].([]any)[0].(map[string]any)
	if l["used"] != float64(total) {
		t.Errorf("used %v; want exactly %d, the sum of the events checked above", l["used"], total)
	}
	t.Logf("killed after %d answers: %d answered, %d cut short, %d held, %d charged under ids no client saw", killAt, len(fast), len(cut), len(holding), unseen)
	cli("verify")
}

// reservationRows are the stored reservation rows of ids, read through
// the store as another process would.
func reservationRows(t *testing.T, db string, ids []string) []budget.ReservationRow {
	t.Helper()
	ctx := context.Background()
	s, err := tokenbudget.OpenStore(ctx, db, tokenbudget.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var rows []budget.ReservationRow
	if err := s.View(ctx, func(tx budget.Tx) error {
		rows, err = tx.Reservations(ctx, ids)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return rows
}
