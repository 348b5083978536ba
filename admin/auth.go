package admin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/dashboard"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

// Who may call the API, in the order a request is tried:
//
//  1. Authorization: Bearer SECRET: the global token (Config.Token, the
//     proxy's --admin-token-env), acting as "admin"; else a scoped admin
//     token Config.Tokens finds, acting as its name with its scope.
//  2. The dashboard's session cookie for the global token (a browser that
//     opened the dashboard with it), as "admin"; or the API's own session
//     cookie (POST /admin/v1/session with a token), as that token.
//  3. Nothing, on a loopback listener without a global token
//     (Config.OpenReads) and a loopback Host: GET only, as a read-only
//     global "loopback". Every write needs a token.
//
// Anything else is 401. A read-only token is 403 on anything but GET.
// Cross-site requests are refused whatever they carry (csrf.go).

// Principal is who makes a request: the actor the audit log names and
// the scope it may see and change (budget.AdminScope decides).
type Principal struct {
	Name  string // the actor as the audit log shows it ("admin", a token's name)
	Actor budget.Actor
	Scope budget.AdminScope
}

// principalJSON is GET /admin/v1/session's answer.
type principalJSON struct {
	Name     string  `json:"name"`
	Team     *string `json:"team"`
	Org      *string `json:"org"`
	ReadOnly bool    `json:"read_only"`
}

func (p *Principal) json() principalJSON {
	o := principalJSON{Name: p.Name, ReadOnly: p.Scope.ReadOnly}
	if p.Scope.Team != "" {
		o.Team = &p.Scope.Team
	}
	if p.Scope.Org != "" {
		o.Org = &p.Scope.Org
	}
	return o
}

// global is the principal of the global token.
var global = Principal{Name: "admin", Actor: budget.Actor{Kind: budget.ActorAdmin}}

// loopbackReader is the principal of a credential-less GET on a loopback
// listener without a global token: it reads everything, changes nothing.
var loopbackReader = Principal{Name: "loopback", Scope: budget.AdminScope{ReadOnly: true}}

// SessionCookie is the cookie of a session POST /admin/v1/session opens.
const SessionCookie = "tokenbudget_admin"

// sessionTTL is how long a session lasts without use.
const sessionTTL = 12 * time.Hour

// sessions are the API's browser sessions: a random id standing for the
// secret it was opened with, which is looked up again on every request so
// a revoked token ends its sessions at once.
type sessions struct {
	mu sync.Mutex
	m  map[string]session
}

type session struct {
	secret string
	seen   time.Time
}

func (s *sessions) open(secret string, now time.Time) string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	id := hex.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]session{}
	}
	for k, v := range s.m { // few sessions: sweeping on open keeps the map bounded
		if now.Sub(v.seen) > sessionTTL {
			delete(s.m, k)
		}
	}
	s.m[id] = session{secret, now}
	return id
}

func (s *sessions) secret(id string, now time.Time) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	if !ok || now.Sub(v.seen) > sessionTTL {
		delete(s.m, id)
		return "", false
	}
	v.seen = now
	s.m[id] = v
	return v.secret, true
}

func (s *sessions) close(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

var errUnauthorized = &apiError{http.StatusUnauthorized, codeUnauthorized,
	"this API needs an admin token: send Authorization: Bearer TOKEN", ""}

// authenticate is who r comes from, or errUnauthorized.
func (h *Handler) authenticate(r *http.Request) (Principal, error) {
	if a := r.Header.Get("Authorization"); a != "" {
		secret, ok := bearer(a)
		if !ok {
			return Principal{}, errUnauthorized
		}
		return h.byToken(r.Context(), secret)
	}
	if dashboard.HasSession(r, h.cfg.Token) {
		return global, nil
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		if secret, ok := h.sessions.secret(c.Value, h.cfg.Now()); ok {
			return h.byToken(r.Context(), secret)
		}
	}
	if h.cfg.OpenReads && h.cfg.Token == "" && (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		dashboard.LoopbackHost(r.Host) {
		return loopbackReader, nil
	}
	return Principal{}, errUnauthorized
}

// byToken is the principal whose token secret is.
func (h *Handler) byToken(ctx context.Context, secret string) (Principal, error) {
	if h.cfg.Token != "" {
		got, want := sha256.Sum256([]byte(secret)), sha256.Sum256([]byte(h.cfg.Token))
		if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
			return global, nil
		}
	}
	if h.cfg.Tokens == nil || secret == "" {
		return Principal{}, errUnauthorized
	}
	t, err := gatekey.LookupAdminToken(ctx, h.cfg.Tokens, secret)
	switch {
	case errors.Is(err, gatekey.ErrUnknownAdminToken):
		return Principal{}, errUnauthorized
	case err != nil:
		return Principal{}, err
	}
	return Principal{Name: t.Actor().String(), Actor: t.Actor(), Scope: t.Scope}, nil
}

func bearer(a string) (string, bool) {
	if len(a) < 7 || !strings.EqualFold(a[:7], "bearer ") {
		return "", false
	}
	return strings.TrimSpace(a[7:]), true
}

// sessionIn is the body of POST /admin/v1/session.
type sessionIn struct {
	Token string `json:"token" required:"true"`
}

// openSession checks the token a browser gives and opens a session for it.
func (h *Handler) openSession(w http.ResponseWriter, r *http.Request, _ *Principal) error {
	var in sessionIn
	if err := decode(w, r, &in); err != nil {
		return err
	}
	in.Token = strings.TrimSpace(in.Token)
	if in.Token == "" {
		return invalid("token", "token is required")
	}
	p, err := h.byToken(r.Context(), in.Token)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: h.sessions.open(in.Token, h.cfg.Now()), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	writeJSON(w, http.StatusCreated, p.json())
	return nil
}

// closeSession ends the request's session, if it has one.
func (h *Handler) closeSession(w http.ResponseWriter, r *http.Request, _ *Principal) error {
	if c, err := r.Cookie(SessionCookie); err == nil {
		h.sessions.close(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// whoami answers who the request comes from.
func (h *Handler) whoami(w http.ResponseWriter, r *http.Request, p *Principal) error {
	writeJSON(w, http.StatusOK, p.json())
	return nil
}
