package postgres_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/postgres"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// commitCutter is a TCP forwarder in front of the server that, while armed,
// cuts the connection when the server answers a COMMIT: the server has
// committed, the client never hears it.
type commitCutter struct {
	ln       net.Listener
	upstream func() (net.Conn, error)
	every    atomic.Int64 // cut every n-th COMMIT answer; 0: none
	seen     atomic.Int64
	cuts     atomic.Int64
	wg       sync.WaitGroup
}

func newCommitCutter(t *testing.T, upstream func() (net.Conn, error)) *commitCutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &commitCutter{ln: ln, upstream: upstream}
	c.wg.Add(1)
	go c.accept()
	t.Cleanup(func() { ln.Close(); c.wg.Wait() })
	return c
}

func (c *commitCutter) accept() {
	defer c.wg.Done()
	for {
		down, err := c.ln.Accept()
		if err != nil {
			return
		}
		up, err := c.upstream()
		if err != nil {
			down.Close()
			continue
		}
		c.wg.Add(2)
		go func() { // client to server, as it is
			defer c.wg.Done()
			io.Copy(up, down)
			up.Close()
			down.Close()
		}()
		go func() {
			defer c.wg.Done()
			c.serverToClient(up, down)
			up.Close()
			down.Close()
		}()
	}
}

// serverToClient forwards the server's messages (a type byte, a length
// counting itself, the body; sslmode=disable, so no unframed SSL answer)
// and drops the connection in place of a CommandComplete "COMMIT" it cuts.
func (c *commitCutter) serverToClient(up, down net.Conn) {
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(up, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		body := make([]byte, n)
		if _, err := io.ReadFull(up, body); err != nil {
			return
		}
		if hdr[0] == 'C' && bytes.Equal(body, []byte("COMMIT\x00")) {
			if e := c.every.Load(); e > 0 && c.seen.Add(1)%e == 0 {
				c.cuts.Add(1)
				return
			}
		}
		if _, err := down.Write(append(hdr[:], body...)); err != nil {
			return
		}
	}
}

// A COMMIT the server applied but whose answer the connection lost is not
// run again: every request is charged exactly once, no reservation is left
// live without an owner (recovery finds nothing to charge), and no caller
// is answered an error for a reservation that committed.
func TestAmbiguousCommitThroughCutter(t *testing.T) {
	dsn := freshSchema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	var upstream func() (net.Conn, error)
	if h := q.Get("host"); h != "" && filepath.IsAbs(h) {
		port := q.Get("port")
		if port == "" {
			port = "5432"
		}
		sock := filepath.Join(h, ".s.PGSQL."+port)
		upstream = func() (net.Conn, error) { return net.Dial("unix", sock) }
	} else {
		addr := u.Host
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "5432")
		}
		upstream = func() (net.Conn, error) { return net.Dial("tcp", addr) }
	}
	if q.Get("sslmode") != "disable" {
		t.Skip("the cutter reads the protocol in the clear: needs sslmode=disable")
	}
	cut := newCommitCutter(t, upstream)
	q.Del("host")
	q.Del("port")
	u.RawQuery = q.Encode()
	u.Host = cut.ln.Addr().String()

	db, err := postgres.Open(context.Background(), u.String(), postgres.Options{MaxConns: 4})
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	c := storetest.NewClock(storetest.T0)
	cfg := budget.DefaultConfig()
	cfg.Now = c.Now
	cfg.SweepInterval = -1
	tr, err := budget.New(context.Background(), db, cfg)
	if err != nil {
		t.Fatalf("budget.New: %v", err)
	}
	t.Cleanup(func() { tr.Close(context.Background()) })
	tok := storetest.SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1_000_000)
	reqs := storetest.SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily", Metric: "requests"}, 1_000_000)

	ctx := context.Background()
	const n = 20
	cut.every.Store(2)
	for i := range n {
		r, err := tr.ReserveWith(ctx, budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Tokens: 100}},
			budget.ReserveOptions{TTL: time.Minute, OnExpiry: budget.ExpireCharge})
		if err != nil {
			t.Fatalf("request %d: Reserve = %v; want the reservation (the outage is within FlushFailures)", i, err)
		}
		if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 7, Output: 3}); err != nil {
			t.Fatalf("request %d: Commit = %v; want committed", i, err)
		}
	}
	// Then concurrent callers, so that one batch carries several
	// reservations and commits when its answer is lost.
	const workers, each = 8, 5
	cut.every.Store(3)
	errs := make(chan error, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				r, err := tr.ReserveWith(ctx, budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Tokens: 100}},
					budget.ReserveOptions{TTL: time.Minute, OnExpiry: budget.ExpireCharge})
				if err != nil {
					errs <- fmt.Errorf("concurrent Reserve = %w; want the reservation", err)
					continue
				}
				if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 7, Output: 3}); err != nil {
					errs <- fmt.Errorf("concurrent Commit = %w; want committed", err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	const total = n + workers*each
	cut.every.Store(0)
	if cut.cuts.Load() == 0 {
		t.Fatal("the cutter cut no COMMIT: the test tested nothing")
	}
	t.Logf("%d COMMIT answers cut", cut.cuts.Load())

	check := func(when string) {
		t.Helper()
		if used, res := storetest.Used(t, tr, budget.Request{Key: "k"}, c.Now(), tok.ID); used != total*10 || res != 0 {
			t.Fatalf("%s: tokens used/reserved = %d/%d; want %d/0", when, used, res, total*10)
		}
		if used, _ := storetest.Used(t, tr, budget.Request{Key: "k"}, c.Now(), reqs.ID); used != total {
			t.Fatalf("%s: requests charged = %d; want %d, one per request", when, used, total)
		}
	}
	check("after the cut commits")
	c.Advance(5 * time.Minute)
	rec, err := tr.Recover(ctx, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rec.ChargedReservations != 0 || rec.ReleasedReservations != 0 {
		t.Fatalf("Recover = %+v; want no orphan reservation to recover", rec)
	}
	check("after recovery")
	if d, err := tr.Verify(ctx); err != nil || len(d) != 0 {
		t.Fatalf("Verify = %+v, %v; want no drift", d, err)
	}
}
