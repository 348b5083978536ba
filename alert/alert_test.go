package alert_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/alert"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

var ctx = context.Background()

// hook is a test webhook: it answers with the statuses given, in turn
// (200 once they run out), and keeps what it received.
type hook struct {
	mu       sync.Mutex
	statuses []int
	got      []received
}

type received struct {
	id, sig string
	body    []byte
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, received{r.Header.Get("X-Budget-Alert-Id"), r.Header.Get("X-Budget-Signature"), body})
	status := http.StatusOK
	if len(h.statuses) > 0 {
		status, h.statuses = h.statuses[0], h.statuses[1:]
	}
	w.WriteHeader(status)
}

func (h *hook) received() []received {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]received(nil), h.got...)
}

func open(t *testing.T, path string, c *storetest.Clock) *tokenbudget.DB {
	t.Helper()
	cfg := budget.DefaultConfig()
	cfg.Now = c.Now
	cfg.SweepInterval = -1
	db, err := tokenbudget.Open(ctx, path, tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(ctx) })
	return db
}

// An alert reaches the webhook signed, is retried after the webhook
// fails, and once acknowledged is never sent again, by this deliverer or
// by another after a restart.
func TestDeliverRetryRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	c := storetest.NewClock(storetest.T0)
	db := open(t, path, c)
	max := int64(100)
	if _, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max, Alerts: &[]int{80}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecordSync(ctx, budget.Usage{RequestID: "r1", Key: "k", Provider: "p", Model: "m", Input: 90}); err != nil {
		t.Fatal(err)
	}
	h := &hook{statuses: []int{http.StatusInternalServerError}}
	srv := httptest.NewServer(h)
	defer srv.Close()
	secret := []byte("s3cret")
	d := &alert.Deliverer{Tracker: db.Tracker, URL: srv.URL, Secret: secret, Owner: "proxy-1"}

	res, err := d.RunOnce(ctx)
	if err != nil || res.Failed != 1 || res.Delivered != 0 {
		t.Fatalf("first run = %+v, %v; want one failed delivery", res, err)
	}
	if res, _ := d.RunOnce(ctx); res != (alert.Result{}) {
		t.Fatalf("a run right after the failure = %+v; want nothing before the 1 s retry", res)
	}
	c.Advance(time.Second)
	if res, err := d.RunOnce(ctx); err != nil || res.Delivered != 1 {
		t.Fatalf("run after the retry delay = %+v, %v; want the alert delivered", res, err)
	}
	got := h.received()
	if len(got) != 2 || got[0].id != got[1].id || got[0].id == "" {
		t.Fatalf("webhook received %d posts (ids %v); want the same alert twice", len(got), got)
	}
	if want := alert.Sign(secret, got[1].body); got[1].sig != want {
		t.Fatalf("signature %q; want %q (HMAC-SHA256 of the body)", got[1].sig, want)
	}
	var o alert.Object
	if err := json.Unmarshal(got[1].body, &o); err != nil {
		t.Fatal(err)
	}
	if o.ID != got[1].id || o.Threshold == nil || *o.Threshold != 80 || o.Kind != "threshold" || o.Metric == nil || *o.Metric != "tokens" || o.Used != 90 || o.Limit != 100 || o.Level != "key" || o.Owner == nil || *o.Owner != "k" || o.DeliveredAt != nil {
		t.Fatalf("posted alert %+v; want threshold 80 at 90 of 100 for key k", o)
	}

	// A restart: a new tracker and deliverer on the same file send nothing.
	db.Close(ctx)
	db2 := open(t, path, c)
	d2 := &alert.Deliverer{Tracker: db2.Tracker, URL: srv.URL, Owner: "proxy-2"}
	c.Advance(time.Hour)
	if res, err := d2.RunOnce(ctx); err != nil || res != (alert.Result{}) {
		t.Fatalf("after a restart = %+v, %v; want nothing sent again", res, err)
	}
	as, err := db2.Alerts(ctx, 10)
	if err != nil || len(as) != 1 || as[0].DeliveredAt.IsZero() {
		t.Fatalf("Alerts = %+v, %v; want it delivered", as, err)
	}
}

// Alerts a deliverer claimed and never reported (it died) are delivered by
// another once the claim expires.
func TestClaimedByADeadDeliverer(t *testing.T) {
	c := storetest.NewClock(storetest.T0)
	db := open(t, filepath.Join(t.TempDir(), "a.db"), c)
	max := int64(100)
	if _, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max, Alerts: &[]int{50, 100}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecordSync(ctx, budget.Usage{RequestID: "r1", Key: "k", Provider: "p", Model: "m", Input: 100}); err != nil {
		t.Fatal(err)
	}
	if as, err := db.ClaimAlerts(ctx, "dead", time.Minute, 10); err != nil || len(as) != 2 {
		t.Fatalf("the dead deliverer's claim = %+v, %v", as, err)
	}
	h := &hook{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	d := &alert.Deliverer{Tracker: db.Tracker, URL: srv.URL, Owner: "live", ClaimTTL: time.Minute}
	if res, _ := d.RunOnce(ctx); res != (alert.Result{}) {
		t.Fatalf("while the claim lasts = %+v; want nothing", res)
	}
	c.Advance(time.Minute)
	if res, err := d.RunOnce(ctx); err != nil || res.Delivered != 2 {
		t.Fatalf("after the claim expired = %+v, %v; want both delivered", res, err)
	}
	if n := len(h.received()); n != 2 {
		t.Fatalf("webhook received %d posts; want 2", n)
	}
}

// A webhook answering with a redirect has not received the alert: it is
// tried again, not marked delivered.
func TestRedirectIsNoDelivery(t *testing.T) {
	c := storetest.NewClock(storetest.T0)
	db := open(t, filepath.Join(t.TempDir(), "a.db"), c)
	max := int64(100)
	if _, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max, Alerts: &[]int{50}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecordSync(ctx, budget.Usage{RequestID: "r1", Key: "k", Provider: "p", Model: "m", Input: 60}); err != nil {
		t.Fatal(err)
	}
	ok := httptest.NewServer(&hook{})
	defer ok.Close()
	redirect := httptest.NewServer(http.RedirectHandler(ok.URL, http.StatusFound))
	defer redirect.Close()
	d := &alert.Deliverer{Tracker: db.Tracker, URL: redirect.URL, Owner: "p"}
	if res, err := d.RunOnce(ctx); err != nil || res.Failed != 1 || res.Delivered != 0 {
		t.Fatalf("RunOnce against a redirect = %+v, %v; want one failed delivery", res, err)
	}
}

// Retries wait 1 s, doubling, at most 5 minutes.
func TestRetryDelays(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 100: 5 * time.Minute} {
		if got := budget.AlertRetryDelay(n); got != want {
			t.Errorf("AlertRetryDelay(%d) = %v; want %v", n, got, want)
		}
	}
}

// TestPostErrorHidesTheURLsToken: Post's error (stored as the outbox's
// last error) names the webhook's URL without its query and credentials,
// where a token sits: a refused connection, and a URL that does not
// parse.
func TestPostErrorHidesTheURLsToken(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // every connection refused
	dest := strings.Replace(srv.URL, "http://", "http://u:pw@", 1) + "/hook?token=s3cret"
	for _, c := range []struct{ dest, want string }{
		{dest, alert.RedactURL(dest)},
		{"http://127.0.0.1/%zz?token=s3cret", "(unparsable URL)"},
	} {
		err := alert.Post(context.Background(), alert.NewClient(nil), c.dest, "application/json", []byte("{}"), nil, nil)
		if err == nil {
			t.Fatalf("Post to %s succeeded; want an error", c.dest)
		}
		if msg := err.Error(); strings.Contains(msg, "s3cret") || strings.Contains(msg, "pw") || !strings.Contains(msg, c.want) {
			t.Errorf("Post's error %q; want it to name %s, no token", msg, c.want)
		}
	}
	if r := alert.RedactURL(dest); !strings.HasPrefix(r, srv.URL+"/hook#") {
		t.Errorf("RedactURL(%s) = %s; want %s/hook#<hash>", dest, r, srv.URL)
	}
}
