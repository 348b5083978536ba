package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/dashboard"
)

func TestNoOrAWrongTokenIs401(t *testing.T) {
	f := newFixture(t, false)
	for _, auth := range []string{"", "Bearer wrong-token-0123456789", "Basic dXNlcjpwdw==", "Bearer "} {
		r := httptest.NewRequest("GET", "http://127.0.0.1:8081/admin/v1/keys", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, r)
		answer{w.Code, w.Body.Bytes(), w.Header()}.wantError(t, http.StatusUnauthorized, "unauthorized", "")
		if !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%q: WWW-Authenticate %q", auth, w.Header().Get("WWW-Authenticate"))
		}
	}
}

func TestReadOnlyTokenOnlyGets(t *testing.T) {
	f := newFixture(t, false)
	f.do("red-viewer", "GET", "/admin/v1/keys/red-app", nil).want(t, http.StatusOK, nil)
	f.do("red-viewer", "DELETE", "/admin/v1/keys/red-app", nil).wantError(t, http.StatusForbidden, "forbidden", "")
	f.do("red-viewer", "PATCH", "/admin/v1/limits/"+f.limits["red-app"], map[string]any{"limit": 1}).wantError(t, http.StatusForbidden, "forbidden", "")
	keys, _ := f.db.KeyStore().ListKeys(t.Context())
	for _, k := range keys {
		if !k.RevokedAt.IsZero() {
			t.Fatalf("a read-only token revoked %s", k.Name)
		}
	}
}

func TestLoopbackWithoutATokenReadsButNeverWrites(t *testing.T) {
	f := newFixture(t, true)
	f.do("", "GET", "/admin/v1/keys", nil).want(t, http.StatusOK, nil)
	f.do("", "POST", "/admin/v1/keys", map[string]any{"name": "x"}).wantError(t, http.StatusUnauthorized, "unauthorized", "")
	f.do("", "DELETE", "/admin/v1/keys/red-app", nil).wantError(t, http.StatusUnauthorized, "unauthorized", "")
	// A scoped token still writes, within its scope.
	f.do("red-lead", "POST", "/admin/v1/keys", map[string]any{"name": "x"}).want(t, http.StatusCreated, nil)
	// A page of another site that a DNS rebinding pointed here names its
	// own host: no open reads for it.
	r := httptest.NewRequest("GET", "http://evil.example:8081/admin/v1/keys", nil)
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	answer{w.Code, w.Body.Bytes(), w.Header()}.wantError(t, http.StatusUnauthorized, "unauthorized", "")
}

// browser sends requests as a browser on the dashboard's origin would,
// with the cookies it was given.
type browser struct {
	f       *fixture
	cookies []*http.Cookie
}

func (b *browser) do(method, path, body, site string) answer {
	r := httptest.NewRequest(method, "http://127.0.0.1:8081"+path, strings.NewReader(body))
	if site != "" {
		r.Header.Set("Sec-Fetch-Site", site)
	}
	for _, c := range b.cookies {
		r.AddCookie(c)
	}
	w := httptest.NewRecorder()
	b.f.h.ServeHTTP(w, r)
	for _, c := range w.Result().Cookies() {
		b.cookies = append(b.cookies[:0], c)
	}
	a := answer{w.Code, w.Body.Bytes(), w.Header()}
	a.conforms(b.f.t, b.f.h, method, path, []byte(body))
	return a
}

func TestSessionActsAsItsTokenAndRefusesCrossSiteWrites(t *testing.T) {
	f := newFixture(t, false)
	b := &browser{f: f}
	b.do("POST", "/admin/v1/session", `{"token": "nope"}`, "same-origin").wantError(t, http.StatusUnauthorized, "unauthorized", "")
	var who struct {
		Name     string  `json:"name"`
		Team     *string `json:"team"`
		ReadOnly bool    `json:"read_only"`
	}
	b.do("POST", "/admin/v1/session", `{"token": "`+f.tokens["red-lead"]+`"}`, "same-origin").want(t, http.StatusCreated, &who)
	if who.Name != "red-lead" || who.Team == nil || *who.Team != "red" || len(b.cookies) != 1 || !b.cookies[0].HttpOnly ||
		b.cookies[0].SameSite != http.SameSiteStrictMode || strings.Contains(b.cookies[0].Value, f.tokens["red-lead"]) {
		t.Fatalf("signed in as %+v, cookies %+v", who, b.cookies)
	}
	b.do("GET", "/admin/v1/session", "", "same-origin").want(t, http.StatusOK, &who)
	if who.Name != "red-lead" {
		t.Fatalf("GET session: %+v", who)
	}
	b.do("POST", "/admin/v1/keys", `{"name": "from-browser"}`, "cross-site").wantError(t, http.StatusForbidden, "forbidden", "")
	b.do("POST", "/admin/v1/keys", `{"name": "from-browser"}`, "same-site").wantError(t, http.StatusForbidden, "forbidden", "")
	b.do("POST", "/admin/v1/keys", `{"name": "blue-2", "team": "blue"}`, "same-origin").wantError(t, http.StatusForbidden, "forbidden", "")
	b.do("POST", "/admin/v1/keys", `{"name": "from-browser"}`, "same-origin").want(t, http.StatusCreated, nil)
	keys, _ := f.db.KeyStore().ListKeys(t.Context())
	if len(keys) != 5 {
		t.Fatalf("%d keys, want the fixture's 4 and from-browser", len(keys))
	}
	b.do("DELETE", "/admin/v1/session", "", "same-origin").want(t, http.StatusNoContent, nil)
	b.do("GET", "/admin/v1/session", "", "same-origin").wantError(t, http.StatusUnauthorized, "unauthorized", "")
}

func TestRevokedTokenEndsItsSessions(t *testing.T) {
	f := newFixture(t, false)
	b := &browser{f: f}
	b.do("POST", "/admin/v1/session", `{"token": "`+f.tokens["acme-ops"]+`"}`, "same-origin").want(t, http.StatusCreated, nil)
	b.do("GET", "/admin/v1/keys", "", "same-origin").want(t, http.StatusOK, nil)
	store := f.tokenStore()
	if _, err := store.RevokeAdminToken(context.Background(), "acme-ops", f.now); err != nil {
		t.Fatal(err)
	}
	b.do("GET", "/admin/v1/keys", "", "same-origin").wantError(t, http.StatusUnauthorized, "unauthorized", "")
	f.do("acme-ops", "GET", "/admin/v1/keys", nil).wantError(t, http.StatusUnauthorized, "unauthorized", "")
}

func TestDashboardSessionIsTheGlobalToken(t *testing.T) {
	f := newFixture(t, false)
	// The dashboard gives a browser its cookie for the global token.
	pages := dashboard.RequireToken(http.NotFoundHandler(), globalToken)
	w := httptest.NewRecorder()
	pages.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1:8081/?token="+globalToken, nil))
	b := &browser{f: f, cookies: w.Result().Cookies()}
	if len(b.cookies) != 1 {
		t.Fatalf("dashboard cookies %+v", b.cookies)
	}
	b.do("DELETE", "/admin/v1/keys/blue-app", "", "same-origin").want(t, http.StatusOK, nil)
	b.do("DELETE", "/admin/v1/keys/green-app", "", "cross-site").wantError(t, http.StatusForbidden, "forbidden", "")
}

func TestUnknownRouteAndMethodAnswerInTheErrorShape(t *testing.T) {
	f := newFixture(t, false)
	f.do("admin", "GET", "/admin/v1/nothing", nil).wantError(t, http.StatusNotFound, "not_found", "")
	a := f.do("admin", "PUT", "/admin/v1/keys", nil)
	a.wantError(t, http.StatusMethodNotAllowed, "method_not_allowed", "")
	if got := a.header.Get("Allow"); got != "GET, POST" {
		t.Fatalf("Allow %q", got)
	}
	// A name whose escape decodes to a "%": the 405 still names the methods
	// (the route exists), with no token or with one.
	for _, who := range []string{"", "admin"} {
		a = f.do(who, "PUT", "/admin/v1/keys/%25zz", nil)
		a.wantError(t, http.StatusMethodNotAllowed, "method_not_allowed", "")
		if got := a.header.Get("Allow"); got != "GET, PATCH, DELETE" {
			t.Fatalf("Allow %q for /admin/v1/keys/%%25zz", got)
		}
	}
}
