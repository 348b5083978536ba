package dashboard_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/tokenbudget/tokenbudget/admin"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/dashboard"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

// serveAdmin serves the dashboard (with its management forms) and the
// admin API on one origin, as `budget proxy --admin-listen addr` does,
// with token as the global admin token ("": none), and returns its URL.
func serveAdmin(t *testing.T, f *fixture, addr, token string) string {
	t.Helper()
	api, err := admin.New(admin.Config{Tracker: f.db.Tracker, Keys: f.db.KeyStore(), Tokens: f.db.AdminTokens(),
		Now: func() time.Time { return now }, Token: token, OpenReads: token == ""})
	if err != nil {
		t.Fatal(err)
	}
	pages, err := dashboard.Protect(f.handler(t, dashboard.Config{Manage: true, Refresh: time.Hour}), addr, token)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(admin.Prefix, api)
	mux.Handle("/", pages)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return fmt.Sprintf("http://127.0.0.1:%d", ln.Addr().(*net.TCPAddr).Port)
}

// ui drives one browser tab.
type ui struct {
	t    *testing.T
	ctx  context.Context
	base string
}

func (u *ui) open(path string) {
	u.t.Helper()
	resp, err := chromedp.Run(u.ctx, chromedp.NavigateResponse(u.base+path))
	if err != nil || resp.Status != http.StatusOK {
		u.t.Fatalf("GET %s: %v %v", path, resp, err)
	}
	u.settled()
}

// settled waits until the page's script has asked the API who the
// session is (and shown the panel): leaving the page before would abort
// that request.
func (u *ui) settled() {
	u.t.Helper()
	if _, err := chromedp.Run(u.ctx, chromedp.Poll[bool](`(() => { const m = document.getElementById("manage"); return !m || !m.hidden; })()`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		u.t.Fatalf("the management panel never settled: %v", err)
	}
}

// fill sets the fields of the form sel.
func (u *ui) fill(sel string, fields map[string]string) {
	u.t.Helper()
	for name, v := range fields {
		if err := chromedp.Do(u.ctx, chromedp.SetValue(chromedp.CSS(sel+` [name="`+name+`"]`), v)); err != nil {
			u.t.Fatalf("%s %s: %v", sel, name, err)
		}
	}
}

// submitReload submits the form sel and waits for the page it reloads.
func (u *ui) submitReload(sel string) {
	u.t.Helper()
	if _, err := chromedp.Run(u.ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(sel+` button[type=submit]`)))); err != nil {
		u.t.Fatalf("submitting %s: %v", sel, err)
	}
	u.settled()
}

// submitResult submits the form sel and returns what it shows once the
// API has answered.
func (u *ui) submitResult(sel string) string {
	u.t.Helper()
	if err := chromedp.Do(u.ctx, chromedp.Click(chromedp.CSS(sel+` button[type=submit]`))); err != nil {
		u.t.Fatal(err)
	}
	out, err := chromedp.Run(u.ctx, chromedp.Poll[string](`(() => { const t = document.querySelector(`+"`"+sel+` output.result`+"`"+`).textContent; return t && t !== "…" ? t : false; })()`,
		chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil {
		u.t.Fatalf("%s shows no answer: %v", sel, err)
	}
	return out
}

// text is the page's visible text.
func (u *ui) text() string {
	u.t.Helper()
	s, err := chromedp.Run(u.ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		u.t.Fatal(err)
	}
	return s
}

func (u *ui) waitForms() {
	u.t.Helper()
	if err := chromedp.Do(u.ctx, chromedp.WaitVisible(chromedp.CSS(`#manage .forms`))); err != nil {
		u.t.Fatalf("the management forms never showed: %v", err)
	}
}

// TestBrowserManage drives the management forms in Chromium: with the
// global token's dashboard session it creates a key (its secret shown
// once), sets a team's limit and a key's, changes, raises and deletes it,
// and revokes the key, each
// change in the audit log as admin; a page of another origin cannot use
// the session; and on a loopback dashboard a team's token signs in and
// may change its team only.
func TestBrowserManage(t *testing.T) {
	chrome := browser(t)
	f := showcase(t)
	ctx := t.Context()
	if _, err := gatekey.AddAdminToken(ctx, f.db.AdminTokens(), "platform-lead", budget.AdminScope{Team: "platform"}, now); err != nil {
		t.Fatal(err)
	}
	lead, err := gatekey.AddAdminToken(ctx, f.db.AdminTokens(), "platform-lead-2", budget.AdminScope{Team: "platform"}, now)
	if err != nil {
		t.Fatal(err)
	}
	base := serveAdmin(t, f, "0.0.0.0:0", adminToken)
	bctx, watch := startBrowser(t, chrome)
	u := &ui{t: t, ctx: bctx, base: base}
	u.open("/?token=" + adminToken)

	// A key, from the team page: its secret is shown once.
	u.open("/?team=research")
	u.waitForms()
	acting, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#manage .acting`)))
	if !strings.Contains(acting, "as admin (everything)") {
		t.Errorf("the panel says %q; want it acting as admin", acting)
	}
	u.fill(`form[data-path="/admin/v1/keys"]`, map[string]string{"name": "ml-eval"})
	shown := u.submitResult(`form[data-path="/admin/v1/keys"]`)
	secret, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`code.secret`)))
	if err != nil || !strings.HasPrefix(secret, "tbk_") || !strings.Contains(shown, "not shown again") {
		t.Fatalf("after creating a key the form shows %q, secret %q (%v)", shown, secret, err)
	}
	k, err := f.db.KeyStore().KeyByHash(ctx, gatekey.HashSecret(secret))
	if err != nil || k.Name != "ml-eval" {
		t.Fatalf("the secret shown opens %+v (%v)", k, err)
	}
	if pl, err := f.db.KeyPlaced(ctx, "ml-eval"); err != nil || pl.Team != "research" {
		t.Fatalf("ml-eval is placed %+v (%v); want in team research, the page's", pl, err)
	}
	u.open("/?team=research")
	if strings.Contains(u.text(), secret) {
		t.Fatal("the secret is shown again after a reload")
	}
	// A limit for the team, from its page.
	u.waitForms()
	teamLimit := `form[data-path="/admin/v1/limits"]`
	u.fill(teamLimit, map[string]string{"metric": "requests", "limit": "5000", "window": "1h"})
	u.submitReload(teamLimit)
	tls, err := f.db.Limits(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(tls, func(l budget.Limit) bool {
		return l.Team == "research" && l.Metric == budget.MetricRequests && l.Max == 5000 && l.Window.String() == "1h"
	}) {
		t.Fatalf("no 5000 requests an hour limit of team research after its form: %+v", tls)
	}

	// A dollar limit for it, from its key page; then changed and raised
	// from the limit's page.
	u.open("/key?name=ml-eval")
	u.waitForms()
	set := `form[data-path="/admin/v1/limits"]`
	u.fill(set, map[string]string{"metric": "usd", "limit": "2.50", "window": "daily"})
	u.submitReload(set)
	ls, err := f.db.Limits(ctx, "ml-eval")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ls, func(l budget.Limit) bool { return l.Key == "ml-eval" })
	if i < 0 || ls[i].Metric != budget.MetricUSD || ls[i].Max != 2_500_000 {
		t.Fatalf("after the form: limits %+v; want ml-eval's $2.50 a day", ls)
	}
	id := ls[i].ID
	if n, _ := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('li.limit[data-id="`+id+`"]').length`)); n != 1 {
		t.Errorf("the key page does not list the new limit %s", id)
	}
	u.open("/limit?id=" + id)
	u.waitForms()
	edit := `form[data-method="PATCH"]`
	u.fill(edit, map[string]string{"limit": "3"})
	u.submitReload(edit)
	raise := `form[data-path$="/raises"]`
	u.fill(raise, map[string]string{"by": "1", "until": "24"})
	u.submitReload(raise)
	ls, _ = f.db.Limits(ctx, "ml-eval")
	i = slices.IndexFunc(ls, func(l budget.Limit) bool { return l.ID == id })
	if i < 0 || ls[i].Max != 3_000_000 || len(ls[i].Raises) != 1 || ls[i].Raises[0].Amount != 1_000_000 || ls[i].Raises[0].Until.IsZero() {
		t.Fatalf("after change and raise: %+v", ls[i])
	}

	// Deleted from its page: the browser goes back to the overview.
	del := `form[data-method="DELETE"]`
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(del+` input[type=checkbox]`))); err != nil {
		t.Fatal(err)
	}
	u.submitReload(del)
	if loc, _ := chromedp.Run(bctx, chromedp.Location()); loc != base+"/" {
		t.Errorf("after deleting a limit the browser is at %s; want the overview", loc)
	}
	if ls, _ = f.db.Limits(ctx, "ml-eval"); slices.ContainsFunc(ls, func(l budget.Limit) bool { return l.ID == id }) {
		t.Fatalf("limit %s is still there after its delete form", id)
	}

	// Revoked from its key page.
	u.open("/key?name=ml-eval")
	u.waitForms()
	revoke := `form[data-method="DELETE"]`
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(revoke+` input[type=checkbox]`))); err != nil {
		t.Fatal(err)
	}
	u.submitReload(revoke)
	if k, err := f.db.KeyStore().KeyByHash(ctx, gatekey.HashSecret(secret)); err != nil || k.RevokedAt.IsZero() {
		t.Fatalf("after revoking: %+v (%v)", k, err)
	}
	es, err := f.db.Audit(ctx, budget.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		if e.Actor.String() == "admin" {
			got = append(got, string(e.Action)+" "+string(e.Object))
		}
	}
	for _, w := range []string{"create key", "create limit", "update limit", "raise limit", "delete limit", "revoke key"} {
		if !slices.Contains(got, w) {
			t.Errorf("the audit log's changes by admin: %q; want %q among them", got, w)
		}
	}

	// Another origin's page (same site: the session cookie goes along)
	// cannot use the session.
	evil := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!DOCTYPE html><title>elsewhere</title><p>another site</p>`)
	}), ReadHeaderTimeout: 10 * time.Second}
	eln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go evil.Serve(eln)
	t.Cleanup(func() { evil.Close() })
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+eln.Addr().String()+"/")); err != nil {
		t.Fatal(err)
	}
	// A "simple" request, as a form or a script of that page can send
	// without asking the API first; its answer is opaque to the page.
	sent, err := chromedp.Run(bctx, chromedp.Evaluate[string](`fetch(`+"`"+base+`/admin/v1/keys`+"`"+`, {method: "POST", mode: "no-cors", credentials: "include",
		body: '{"name": "evil-key"}'}).then(() => "sent", e => "failed: " + e)`, chromedp.EvalAwaitPromise))
	if err != nil || sent != "sent" {
		t.Fatalf("the other origin's request: %q (%v)", sent, err)
	}
	if keys, _ := f.db.KeyStore().ListKeys(ctx); slices.ContainsFunc(keys, func(k gatekey.Key) bool { return k.Name == "evil-key" }) {
		t.Fatal("a page of another origin created a key with the dashboard's session")
	}
	// The browser reports the refused answer as a failed load, in its own
	// time: wait for it, so it is not taken for a later page's.
	watch.waitFor("POST "+base+"/admin/v1/keys", 10*time.Second)
	watch.take()

	// The pages themselves take no other method.
	req, _ := http.NewRequest(http.MethodPost, base+"/key?name=ml-eval", strings.NewReader("x"))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST to a page: %v %v; want 405", resp, err)
	} else {
		resp.Body.Close()
	}

	// A loopback dashboard without a global token: a team's token signs
	// in, and changes only its own team.
	lu := &ui{t: t, ctx: bctx, base: serveAdmin(t, f, "127.0.0.1:0", "")}
	lu.open("/")
	if err := chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(`form.signin`))); err != nil {
		t.Fatalf("no sign-in form: %v", err)
	}
	lu.fill(`form.signin`, map[string]string{"token": lead})
	lu.submitReload(`form.signin`)
	lu.waitForms()
	if acting, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#manage .acting`))); !strings.Contains(acting, "platform-lead-2 (team platform)") {
		t.Errorf("signed in, the panel says %q", acting)
	}
	newKey := `form[data-path="/admin/v1/keys"]`
	lu.fill(newKey, map[string]string{"name": "sneaky", "team": "research"})
	if out := lu.submitResult(newKey); !strings.Contains(out, "may not change key") {
		t.Errorf("a key in another team: the form shows %q; want the API's refusal", out)
	}
	lu.fill(newKey, map[string]string{"name": "platform-2", "team": "platform"})
	if out := lu.submitResult(newKey); !strings.Contains(out, "not shown again") {
		t.Errorf("a key in its own team: the form shows %q", out)
	}
	keys, _ := f.db.KeyStore().ListKeys(ctx)
	if slices.ContainsFunc(keys, func(k gatekey.Key) bool { return k.Name == "sneaky" }) ||
		!slices.ContainsFunc(keys, func(k gatekey.Key) bool { return k.Name == "platform-2" }) {
		t.Fatalf("keys after the scoped token's forms: %+v", keys)
	}

	problems, _ := watch.take()
	for _, p := range problems {
		if !strings.Contains(p, "status of 403") { // the refused key's answer
			t.Errorf("the browser reported: %s", p)
		}
	}
}
