package proxy_test

import (
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/tokenbudget/tokenbudget/proxy"
)

// journalWatcher is a ResponseWriter that notes, at each write of the
// body to the client, how large the lease journal is.
type journalWatcher struct {
	http.ResponseWriter
	size func() int64
	at   *atomic.Int64 // the journal's size at the last body write
}

func (w *journalWatcher) Write(p []byte) (int, error) {
	w.at.Store(w.size())
	return w.ResponseWriter.Write(p)
}

func (w *journalWatcher) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestLeasedSettlementJournaledBeforeTheLastBytes: a leased request's
// commit is in its lease's journal before the client's response ends: a
// crash after the client heard of it charges it its actual usage. A whole
// answer is held and written after the commit is journaled, so the journal
// is as large at its write as once the request is over.
//
// Streams are not covered: their data (the last event included, a held
// one flushed by endStream) goes out before the settlement is known, and
// their end (the terminating chunk and the cost trailers) is written by
// net/http after the handler returns, whether the settlement was queued
// before or after it; no write the handler makes can tell the orders
// apart.
func TestLeasedSettlementJournaledBeforeTheLastBytes(t *testing.T) {
	var at atomic.Int64
	var journal string
	size := func() int64 {
		var n int64
		names, _ := filepath.Glob(filepath.Join(journal, "*.gen"))
		for _, name := range names {
			if fi, err := os.Stat(name); err == nil {
				n += fi.Size()
			}
		}
		return n
	}
	around := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(&journalWatcher{ResponseWriter: w, size: size, at: &at}, r)
		})
	}
	e := newEnv(t, envOptions{mode: proxy.ModeReserve, around: around}, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, chatUsageJSON(9, 4))
	})
	journal = e.path + ".leases"
	e.limit("global", "", "tokens", "daily", 1_000_000)
	for i := range 3 { // the first takes the store's path, the rest a lease
		before := e.db.Stats().Leased
		r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false))
		if r.status != 200 {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
		if e.db.Stats().Leased == before {
			continue
		}
		if got, want := at.Load(), size(); got != want || want == 0 {
			t.Fatalf("leased request %d: journal %d bytes at the answer's last write, %d once it was over; want them equal (the commit journaled first)", i, got, want)
		}
		return
	}
	t.Fatal("no request was answered from a lease")
}
