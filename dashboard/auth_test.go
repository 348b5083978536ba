package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/dashboard"
)

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("page " + r.URL.RequestURI())) })

const token = "0123456789abcdef-token"

// TestRequireToken: a bearer token or the cookie a ?token= visit sets
// opens the pages; the visit is redirected to the same page without the
// token; anything else is 401.
func TestRequireToken(t *testing.T) {
	t.Parallel()
	h := dashboard.RequireToken(ok, token)
	do := func(target string, header ...string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, target, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, c := range []struct {
		name   string
		target string
		header []string
		status int
	}{
		{"nothing", "/", nil, http.StatusUnauthorized},
		{"bearer", "/", []string{"Authorization", "Bearer " + token}, http.StatusOK},
		{"bearer, lower case", "/", []string{"Authorization", "bearer " + token}, http.StatusOK},
		{"wrong bearer", "/", []string{"Authorization", "Bearer " + token + "x"}, http.StatusUnauthorized},
		{"a prefix of the token", "/", []string{"Authorization", "Bearer " + token[:10]}, http.StatusUnauthorized},
		{"wrong token in the URL", "/?token=nope", nil, http.StatusUnauthorized},
		{"wrong cookie", "/", []string{"Cookie", dashboard.TokenCookie + "=" + token}, http.StatusUnauthorized},
	} {
		if rec := do(c.target, c.header...); rec.Code != c.status {
			t.Errorf("%s: status %d; want %d", c.name, rec.Code, c.status)
		} else if c.status == http.StatusUnauthorized && !strings.Contains(rec.Body.String(), "?token=") {
			t.Errorf("%s: the 401 does not say how to get in: %s", c.name, rec.Body.String())
		}
	}
	rec := do("/?key=alice&token=" + token + "&sort=name")
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/?key=alice&sort=name" {
		t.Fatalf("?token=: status %d to %q; want 303 to /?key=alice&sort=name", rec.Code, rec.Header().Get("Location"))
	}
	cs := rec.Result().Cookies()
	if len(cs) != 1 || cs[0].Name != dashboard.TokenCookie || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode ||
		strings.Contains(cs[0].Value, token) {
		t.Fatalf("?token= cookies: %+v; want one HttpOnly SameSite=Strict cookie without the token in it", cs)
	}
	// The 401 page's form posts the token to the page asked for.
	if body := do("/?key=alice").Body.String(); !strings.Contains(body, `<form method="post" action="/?key=alice">`) {
		t.Errorf("the 401 page has no form posting to the page asked for:\n%s", body)
	}
	req := httptest.NewRequest(http.MethodPost, "/?key=alice", strings.NewReader("token="+token))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	post := httptest.NewRecorder()
	h.ServeHTTP(post, req)
	if post.Code != http.StatusSeeOther || post.Header().Get("Location") != "/?key=alice" || len(post.Result().Cookies()) != 1 {
		t.Errorf("posting the token: status %d to %q; want 303 to /?key=alice with the cookie", post.Code, post.Header().Get("Location"))
	}
	req = httptest.NewRequest(http.MethodPost, "/", strings.NewReader("token=nope"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	post = httptest.NewRecorder()
	h.ServeHTTP(post, req)
	if post.Code != http.StatusUnauthorized || len(post.Result().Cookies()) != 0 {
		t.Errorf("posting a wrong token: status %d; want 401 and no cookie", post.Code)
	}
	rec = do("/?key=alice", "Cookie", cs[0].Name+"="+cs[0].Value)
	if rec.Code != http.StatusOK || rec.Body.String() != "page /?key=alice" {
		t.Errorf("with the cookie: status %d %q; want the page", rec.Code, rec.Body.String())
	}
}

// TestLoopbackOnly: without a token, only loopback Host names are served.
func TestLoopbackOnly(t *testing.T) {
	t.Parallel()
	h := dashboard.LoopbackOnly(ok)
	for host, want := range map[string]int{
		"127.0.0.1:8081": http.StatusOK, "localhost:8081": http.StatusOK, "[::1]:8081": http.StatusOK, "127.0.0.2": http.StatusOK,
		"LOCALHOST": http.StatusOK, "evil.example:8081": http.StatusForbidden, "10.0.0.1:8081": http.StatusForbidden,
		"localhost.evil.example": http.StatusForbidden,
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %s: status %d; want %d", host, rec.Code, want)
		}
	}
}

// TestProtect: a loopback address needs nothing, any other a token of
// at least MinTokenLen characters.
func TestProtect(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr, token string
		err         bool
	}{
		{"127.0.0.1:8081", "", false}, {"localhost:0", "", false}, {"[::1]:8081", "", false},
		{":8081", "", true}, {"0.0.0.0:8081", "", true}, {"[::]:8081", "", true}, {"192.168.1.5:8081", "", true},
		{"0.0.0.0:8081", token, false}, {"0.0.0.0:8081", "short", true}, {"127.0.0.1:8081", token, false},
	} {
		_, err := dashboard.Protect(ok, c.addr, c.token)
		if (err != nil) != c.err {
			t.Errorf("Protect(%q, %q): error %v; want error %v", c.addr, c.token, err, c.err)
		}
	}
	// A token applies on loopback too.
	h, _ := dashboard.Protect(ok, "127.0.0.1:8081", token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("loopback with a token, none sent: status %d; want 401", rec.Code)
	}
}

// TestRequireTokenStaysOnOrigin: a path that a browser would read as
// another site ("//evil.example/x", "/\evil.example") neither becomes the
// login form's action nor the redirect after a right token: both go to
// the same path on this origin.
func TestRequireTokenStaysOnOrigin(t *testing.T) {
	t.Parallel()
	h := dashboard.RequireToken(ok, token)
	for _, c := range []struct{ target, want string }{
		{"//evil.example/x", "/evil.example/x"},
		{"///evil.example/x?key=a", "/evil.example/x?key=a"},
		{`/\evil.example/x`, "/%5Cevil.example/x"},
		{"/keys/../..//evil.example", "/evil.example"},
		{"/keys/", "/keys/"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.target, nil))
		if want := `action="` + strings.ReplaceAll(c.want, "&", "&amp;") + `"`; rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("GET %s: status %d, body %s; want 401 with %s", c.target, rec.Code, rec.Body.String(), want)
		}
		sep := "?"
		if strings.Contains(c.target, "?") {
			sep = "&"
		}
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.target+sep+"token="+token, nil))
		if loc := rec.Header().Get("Location"); rec.Code != http.StatusSeeOther || loc != c.want {
			t.Errorf("GET %s with the token: status %d to %q; want 303 to %q", c.target, rec.Code, loc, c.want)
		}
	}
}
