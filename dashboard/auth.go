package dashboard

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// Who may see the dashboard: on a loopback address, whoever can connect
// to it (LoopbackOnly); anywhere else, only who has the token
// (RequireToken). Protect picks one from the listening address.

// TokenCookie is the cookie RequireToken gives a browser that opened a page
// with ?token=.
const TokenCookie = "tokenbudget_dashboard"

// MinTokenLen is the shortest token Protect accepts.
const MinTokenLen = 16

// RequireToken serves h only to requests that carry token: as
// "Authorization: Bearer TOKEN" (for scripts), or as the cookie
// TokenCookie, which a browser gets by sending the token once, either from
// the form of the 401 page (a POST) or by opening any page with
// ?token=TOKEN. The answer to that sets the cookie (HttpOnly,
// SameSite=Strict, for the browser session) and redirects to the same page
// without the token, so it stays out of the address bar and the Referer.
// Anything else is 401 with that form. Every comparison takes the same
// time whatever the token's length and content.
func RequireToken(h http.Handler, token string) http.Handler {
	want := sha256.Sum256([]byte(token))
	cookie := cookieValue(token)
	matches := func(got string) bool {
		sum := sha256.Sum256([]byte(got))
		return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			if matches(strings.TrimSpace(a[7:])) {
				h.ServeHTTP(w, r)
				return
			}
			unauthorized(w, r, "The bearer token is wrong.")
			return
		}
		q := r.URL.Query()
		var given string
		var sent bool
		switch {
		case r.Method == http.MethodPost:
			r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
			if err := r.ParseForm(); err == nil {
				given, sent = r.PostForm.Get("token"), r.PostForm.Has("token")
			}
		case q.Has("token"):
			given, sent = q.Get("token"), true
		}
		if sent {
			if !matches(given) {
				unauthorized(w, r, "That token is wrong.")
				return
			}
			http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: cookie, Path: "/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			w.Header().Set("Cache-Control", "no-store")
			http.Redirect(w, r, sameOrigin(r.URL), http.StatusSeeOther)
			return
		}
		if c, err := r.Cookie(TokenCookie); err == nil &&
			subtle.ConstantTimeCompare([]byte(c.Value), []byte(cookie)) == 1 {
			h.ServeHTTP(w, r)
			return
		}
		unauthorized(w, r, "")
	})
}

// HasSession reports whether r carries the session cookie RequireToken
// gives a browser for token, in constant time. The admin API takes it as
// the token itself, so the dashboard's forms act with the session the
// pages were opened in.
func HasSession(r *http.Request, token string) bool {
	c, err := r.Cookie(TokenCookie)
	return err == nil && token != "" && subtle.ConstantTimeCompare([]byte(c.Value), []byte(cookieValue(token))) == 1
}

// cookieValue is the cookie that stands for token: a MAC of a fixed text
// under it, so the cookie does not hold the token itself.
func cookieValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("tokenbudget dashboard session"))
	return hex.EncodeToString(m.Sum(nil))
}

// unauthorizedPage asks for the token: a form that posts it to the page
// asked for. It loads nothing (its icon is empty), so a browser makes no
// other request.
var unauthorizedPage = template.Must(template.New("401").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Token needed · tokenbudget</title>
<link rel="icon" href="data:,">
</head>
<body>
<h1>401: this dashboard needs its admin token</h1>
<p>{{if .Why}}{{.Why}} {{end}}Give the value of the environment variable that <code>budget proxy --admin-token-env</code> names.
Scripts can send it as <code>Authorization: Bearer TOKEN</code>; a browser can also open any page once with <code>?token=TOKEN</code>.</p>
<form method="post" action="{{.Path}}">
<label>Admin token <input type="password" name="token" autocomplete="current-password" required></label>
<button type="submit">Open the dashboard</button>
</form>
</body>
</html>
`))

func unauthorized(w http.ResponseWriter, r *http.Request, why string) {
	h := w.Header()
	h.Set("WWW-Authenticate", `Bearer realm="tokenbudget dashboard"`)
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; img-src data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusUnauthorized)
	unauthorizedPage.Execute(w, struct{ Why, Path string }{why, sameOrigin(r.URL)})
}

// sameOrigin is the page u asks for, without its token, as a path a
// browser resolves on this origin. The request's path is the client's:
// "//evil.example/x" (or "/\evil.example", which browsers read the same)
// taken as it is would send the form, or the redirect after a right
// token, to another site. Cleaning folds the leading slashes and dot
// segments; escaping keeps a backslash from reading as a slash.
func sameOrigin(u *url.URL) string {
	p := path.Clean("/" + u.Path)
	if strings.HasSuffix(u.Path, "/") && p != "/" {
		p += "/"
	}
	q := u.Query()
	q.Del("token")
	clean := url.URL{Path: p, RawQuery: q.Encode()}
	return clean.RequestURI()
}

// LoopbackOnly serves h only to requests whose Host is a loopback name
// (localhost, 127.0.0.0/8, ::1): a dashboard without a token on a loopback
// address must not answer a page of another site that a DNS rebinding
// pointed at it. Others get 403.
func LoopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !LoopbackHost(r.Host) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintln(w, "403 forbidden: this dashboard has no token, so it answers only at a loopback address such as http://127.0.0.1:PORT/ or http://localhost:PORT/")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// IsLoopback reports whether the listening address addr ("host:port")
// accepts connections from this machine only: localhost or a loopback IP.
// An empty host (":8081") or an unspecified one (0.0.0.0, ::) is not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return loopbackName(host)
}

// LoopbackHost reports whether a Host header ("host" or "host:port") names
// this machine's loopback.
func LoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return loopbackName(strings.Trim(host, "[]"))
}

func loopbackName(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Protect is h as it may be served on addr: behind RequireToken when
// token is set (on any address), else behind LoopbackOnly when addr is a
// loopback address. A non-loopback address without a token, or a token
// shorter than MinTokenLen, is an error.
func Protect(h http.Handler, addr, token string) (http.Handler, error) {
	switch {
	case token != "" && len(token) < MinTokenLen:
		return nil, fmt.Errorf("the admin token has %d characters; use a random one of at least %d (openssl rand -hex 16)", len(token), MinTokenLen)
	case token != "":
		return RequireToken(h, token), nil
	case IsLoopback(addr):
		return LoopbackOnly(h), nil
	}
	return nil, fmt.Errorf("%s is not a loopback address: a dashboard there needs an admin token", addr)
}
