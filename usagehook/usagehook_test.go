package usagehook_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/usagehook"
)

var t0 = time.Date(2026, 3, 2, 18, 0, 0, 0, time.UTC)

// openAt opens a database whose clock reads *now, and record writes one
// event of a token for key under request id at that instant.
func openAt(t *testing.T, now *time.Time) (db *tokenbudget.DB, record func(key, id string)) {
	t.Helper()
	ctx := context.Background()
	cfg := budget.DefaultConfig()
	cfg.Now = func() time.Time { return *now }
	db, err := tokenbudget.Open(ctx, filepath.Join(t.TempDir(), "b.db"), tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(ctx) })
	return db, func(key, id string) {
		t.Helper()
		if _, err := db.RecordSync(ctx, budget.Usage{Key: key, RequestID: id, Input: 1, At: *now}); err != nil {
			t.Fatal(err)
		}
	}
}

// A library delivers its usage events in-process: it registers a hook
// once, records as usual, and runs a Deliverer whose Sender is its own
// function. A Sender's error leaves the batch to be sent again.
func ExampleDeliverer() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "usagehook-example")
	defer os.RemoveAll(dir)
	cfg := budget.DefaultConfig()
	now := t0
	cfg.Now = func() time.Time { return now }
	db, err := tokenbudget.Open(ctx, filepath.Join(dir, "budget.db"), tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		panic(err)
	}
	defer db.Close(ctx)

	fails := 1
	d := &usagehook.Deliverer{Tracker: db.Tracker, Dest: "ledger",
		Send: usagehook.SenderFunc(func(_ context.Context, batch []usagehook.Event) error {
			if fails > 0 {
				fails--
				return errors.New("ledger unavailable")
			}
			for _, e := range batch {
				fmt.Println(e.ID, e.Subject, e.Data.RequestID, e.Data.Input, e.Time)
			}
			return nil
		})}
	if err := d.Register(ctx); err != nil {
		panic(err)
	}
	for _, id := range []string{"r1", "r2"} {
		if _, err := db.RecordSync(ctx, budget.Usage{Key: "team-a", RequestID: id, Provider: "openai", Model: "gpt-4o", Input: 10, At: t0}); err != nil {
			panic(err)
		}
	}
	res, _ := d.RunOnce(ctx)
	fmt.Println("failed:", res.Failed)
	now = now.Add(budget.UsageRetryDelay(1)) // the retry is due
	res, _ = d.RunOnce(ctx)
	fmt.Println("delivered:", res.Delivered)
	// Output:
	// failed: 2
	// ev_1f9fe66866f1cd394698f97120beaa80 team-a r1 10 2026-03-02T18:00:00Z
	// ev_b324f1db470ec23df91e2e747ad303fa team-a r2 10 2026-03-02T18:00:00Z
	// delivered: 2
}

// A Webhook's POST that is redirected is not delivered: the redirect
// would turn it into a GET whose 2xx says nothing. A 2xx is delivered.
func TestWebhookRedirectIsNoDelivery(t *testing.T) {
	var posts int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/ok", http.StatusFound)
			return
		}
		if r.Method == http.MethodPost {
			posts++
		}
	}))
	defer srv.Close()
	ev := []usagehook.Event{{ID: "ev_1"}}
	if err := (&usagehook.Webhook{URL: srv.URL + "/moved"}).Send(context.Background(), ev); err == nil {
		t.Errorf("Send to a redirect = nil; want an error")
	}
	if err := (&usagehook.Webhook{URL: srv.URL + "/ok"}).Send(context.Background(), ev); err != nil || posts != 1 {
		t.Errorf("Send to a 200 = %v after %d posts; want nil after 1", err, posts)
	}
}

// After a failed Send a Deliverer claims nothing until that batch's retry
// is due, not even another key's new event: the receiver is down, and a
// claim with every key waiting reads the whole backlog. Then both go, in
// the order recorded.
func TestDelivererQuietUntilTheRetry(t *testing.T) {
	ctx := context.Background()
	now := t0
	db, record := openAt(t, &now)
	var sends [][]string
	fail := true
	d := &usagehook.Deliverer{Tracker: db.Tracker, Dest: "ledger", Send: usagehook.SenderFunc(func(_ context.Context, b []usagehook.Event) error {
		var ids []string
		for _, e := range b {
			ids = append(ids, e.Data.RequestID)
		}
		sends = append(sends, ids)
		if fail {
			return errors.New("down")
		}
		return nil
	})}
	if err := d.Register(ctx); err != nil {
		t.Fatal(err)
	}
	record("a", "a1")
	if res, err := d.RunOnce(ctx); err != nil || res.Failed != 1 {
		t.Fatalf("first round = %+v, %v; want 1 failed", res, err)
	}
	record("b", "b1")
	now = now.Add(budget.UsageRetryDelay(1) - time.Millisecond)
	if res, err := d.RunOnce(ctx); err != nil || res != (usagehook.Result{}) || len(sends) != 1 {
		t.Fatalf("round before the retry = %+v, %v after %d sends; want nothing claimed or sent", res, err, len(sends))
	}
	fail = false
	now = now.Add(time.Millisecond)
	if res, err := d.RunOnce(ctx); err != nil || res.Delivered != 2 || len(sends) != 2 || fmt.Sprint(sends[1]) != "[a1 b1]" {
		t.Fatalf("round at the retry = %+v, %v, sends %v; want [a1 b1] delivered", res, err, sends)
	}
}

// A webhook's token never reaches a metric label or a log line: its
// query and credentials go, a short hash keeps two such URLs apart.
func TestLabelHidesTokens(t *testing.T) {
	for in, want := range map[string]string{
		"https://billing.example.com/hook": "https://billing.example.com/hook",
		"ledger":                           "ledger",
	} {
		if got := usagehook.Label(in); got != want {
			t.Errorf("Label(%q) = %q; want it unchanged", in, got)
		}
	}
	a, b := usagehook.Label("https://billing.example.com/hook?token=s3cret"), usagehook.Label("https://u:pw@billing.example.com/hook?token=other")
	for _, l := range []string{a, b} {
		if strings.Contains(l, "s3cret") || strings.Contains(l, "other") || strings.Contains(l, "pw") || !strings.HasPrefix(l, "https://billing.example.com/hook#") {
			t.Errorf("Label = %q; want https://billing.example.com/hook#<hash>, no secret", l)
		}
	}
	if a == b {
		t.Errorf("two URLs with different tokens share the label %q", a)
	}
}

// A deliverer that finds events queued but none due (here all in another
// deliverer's live claim) looks again a second later, not at once; a new
// key's event waits that second; once the other claim expires, its
// events go too.
func TestDelivererBacksOffWhileEverythingWaits(t *testing.T) {
	ctx := context.Background()
	now := t0
	db, record := openAt(t, &now)
	var got []string
	d := &usagehook.Deliverer{Tracker: db.Tracker, Dest: "ledger", Send: usagehook.SenderFunc(func(_ context.Context, b []usagehook.Event) error {
		for _, e := range b {
			got = append(got, e.Data.RequestID)
		}
		return nil
	})}
	if err := d.Register(ctx); err != nil {
		t.Fatal(err)
	}
	record("a", "a1")
	if held, err := db.ClaimUsage(ctx, "ledger", "other", time.Minute, 10); err != nil || len(held) != 1 {
		t.Fatalf("the other deliverer's claim = %v, %v", held, err)
	}
	if res, err := d.RunOnce(ctx); err != nil || res != (usagehook.Result{}) {
		t.Fatalf("round with all held elsewhere = %+v, %v; want nothing", res, err)
	}
	record("b", "b1")
	if res, _ := d.RunOnce(ctx); res.Delivered != 0 {
		t.Fatalf("round right after = %+v; want none: backing off", res)
	}
	now = now.Add(time.Second)
	if res, err := d.RunOnce(ctx); err != nil || res.Delivered != 1 || fmt.Sprint(got) != "[b1]" {
		t.Fatalf("round a second later = %+v, %v, got %v; want b1", res, err, got)
	}
	now = now.Add(time.Minute) // the other claim expires
	if res, err := d.RunOnce(ctx); err != nil || res.Delivered != 1 || fmt.Sprint(got) != "[b1 a1]" {
		t.Fatalf("round after the other claim expired = %+v, %v, got %v; want a1 too", res, err, got)
	}
}
