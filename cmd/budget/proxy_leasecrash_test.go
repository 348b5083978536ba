package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
// default leases, under load, charges exactly. 48 clients send 1,200
// requests the upstream answers at once (whole and streamed); once a
// quarter are answered, 16 streams on the same route start and are held
// open by the upstream, carved from the route's lease (no reservation row
// of their own; at least one must be). Once every fast answer reached its
// client, with the held streams still open, the proxy is SIGKILLed, its
// leases live (their journals are there). Recovery by 'budget recover'
// (polled until nothing is reserved and every journal is settled, within
// the 2 s TTL of --reservation-ttl and the lease's renewal) leaves exactly
// one event per request id a client saw: each 200 its actual usage, each
// held stream its estimate (the charge policy), and nothing else: the
// limit's used is exactly their sum. verify passes. On SQLite (the journal
// beside the file) and on PostgreSQL (the default journal directory under
// $XDG_STATE_HOME, which recover finds too).
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
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--db", db)...)
		cmd.Env = append(os.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("budget %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
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

	const heldN, clients, each = 16, 48, 25
	var (
		mu         sync.Mutex
		fast       []string // request ids of the 200s
		holding    []string // request ids of the held streams
		heldResps  []*http.Response
		wg, fastWG sync.WaitGroup
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
					t.Errorf("fast request: %v", err)
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				id := resp.Header.Get("X-Tokenbudget-Request-Id")
				if resp.StatusCode != 200 || err != nil || id == "" {
					t.Errorf("fast request: %d %v, id %q: %s", resp.StatusCode, err, id, b)
					return
				}
				mu.Lock()
				fast = append(fast, id)
				if len(fast) == clients*each/4 {
					loadedOnce()
				}
				mu.Unlock()
			}
		})
	}
	fastWG.Wait()
	loadedOnce() // had a fast request failed before
	wg.Wait()
	for range heldN {
		select {
		case <-held:
		case <-time.After(time.Minute):
			t.Fatalf("the held streams never reached the upstream\n%s", p.stderr)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	p.kill(t)
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

	ri, err := proxy.ParseRequest(proxy.OpenAIChat, []byte(leaseCrashHeld))
	if err != nil {
		t.Fatal(err)
	}
	est := ri.Estimate(proxy.OpenAIChat, proxy.DefaultMaxOutput, proxy.DefaultImageTokens)
	if est.Output != 40 {
		t.Fatalf("held estimate %+v; want output 40, its max_tokens", est)
	}
	want := map[string]exportedEvent{}
	for _, id := range fast {
		want[id] = exportedEvent{id, leaseCrashIn, leaseCrashOut, 0}
	}
	for _, id := range holding {
		want[id] = exportedEvent{id, est.Input, est.Output, 0}
	}
	if len(fast) != clients*each || len(holding) != heldN || len(want) != len(fast)+len(holding) {
		t.Fatalf("%d 200s and %d held streams, %d distinct ids; want %d and %d, all distinct", len(fast), len(holding), len(want), clients*each, heldN)
	}
	got := map[string]exportedEvent{}
	bad := 0
	for line := range strings.Lines(cli("export", "--key", "app")) {
		var ev exportedEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		if _, dup := got[ev.RequestID]; dup || want[ev.RequestID] != ev {
			if bad++; bad <= 5 {
				t.Errorf("event %+v (a second one: %v); want %+v", ev, dup, want[ev.RequestID])
			}
		}
		got[ev.RequestID] = ev
	}
	for id, w := range want {
		if _, ok := got[id]; !ok {
			if bad++; bad <= 10 {
				t.Errorf("request %s (%+v) was never charged", id, w)
			}
		}
	}
	total := int64(len(fast))*(leaseCrashIn+leaseCrashOut) + int64(len(holding))*(est.Input+est.Output)
	l := decode(t, cli("inspect", "--json"))["limits"].([]any)[0].(map[string]any)
	if l["used"] != float64(total) {
		t.Errorf("used %v; want exactly %d: %d answers × %d + %d held × %d", l["used"], total,
			len(fast), leaseCrashIn+leaseCrashOut, len(holding), est.Input+est.Output)
	}
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
