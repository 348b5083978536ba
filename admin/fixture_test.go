package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/admin"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

// The fixture: an org acme with teams red and blue, a team green in org
// other, keys red-app (red), blue-app (blue), green-app (green) and loose
// (no team); a key limit for each of red-app and blue-app, a team limit
// for red and blue, an org limit for acme and a default limit. Tokens:
// the global one, red-lead (team red), red-viewer (team red, read-only)
// and acme-ops (org acme).

const globalToken = "global-admin-token-0123456789"

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

type fixture struct {
	t      testing.TB
	db     *tokenbudget.DB
	h      *admin.Handler
	now    time.Time
	tokens map[string]string // secret by token name
	limits map[string]string // limit id by "red-app", "team:red", "org:acme", "default", ...
	store  *tokenStore
	tick   bool // every reading of the clock moves it on a millisecond, as a wall clock does
}

func (f *fixture) clock() time.Time {
	if f.tick {
		f.now = f.now.Add(time.Millisecond)
	}
	return f.now
}

func (f *fixture) tokenStore() *tokenStore { return f.store }

func newFixture(t testing.TB, open bool) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{t: t, now: t0, tokens: map[string]string{}, limits: map[string]string{}}
	cfg := budget.DefaultConfig()
	cfg.Now = f.clock
	db, err := tokenbudget.Open(ctx, filepath.Join(t.TempDir(), "b.db"), tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	f.db = db
	for _, tm := range [][2]string{{"red", "acme"}, {"blue", "acme"}, {"green", "other"}} {
		if _, err := db.SetTeam(ctx, tm[0], tm[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range [][2]string{{"red-app", "red"}, {"blue-app", "blue"}, {"green-app", "green"}, {"loose", ""}} {
		if err := db.KeyStore().InsertKey(ctx, gatekey.Key{Name: k[0], Hash: gatekey.HashSecret("s-" + k[0]), CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		if k[1] != "" {
			if err := db.SetKeyTeam(ctx, k[0], k[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	max := int64(1000)
	for name, spec := range map[string]budget.LimitSpec{
		"red-app": {Key: "red-app"}, "blue-app": {Key: "blue-app"}, "green-app": {Key: "green-app"},
		"team:red": {Team: "red"}, "team:blue": {Team: "blue"}, "org:acme": {Org: "acme"}, "org:other": {Org: "other"},
		"default": {Default: true},
	} {
		spec.Window, spec.Max = "daily", &max
		l, _, err := db.SetLimit(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		f.limits[name] = l.ID
	}
	store := &tokenStore{byHash: map[string]gatekey.AdminToken{}}
	f.store = store
	for name, scope := range map[string]budget.AdminScope{
		"red-lead": {Team: "red"}, "red-viewer": {Team: "red", ReadOnly: true}, "acme-ops": {Org: "acme"},
	} {
		secret, err := gatekey.AddAdminToken(ctx, store, name, scope, t0)
		if err != nil {
			t.Fatal(err)
		}
		f.tokens[name] = secret
	}
	// open: a loopback listener without a global token.
	token := globalToken
	if open {
		token = ""
	} else {
		f.tokens["admin"] = globalToken
	}
	h, err := admin.New(admin.Config{Tracker: db.Tracker, Keys: db.KeyStore(), Now: f.clock,
		Token: token, Tokens: store, OpenReads: open})
	if err != nil {
		t.Fatal(err)
	}
	f.h = h
	return f
}

// answer is a response: its status, body and headers.
type answer struct {
	status int
	body   []byte
	header http.Header
}

// do sends method path with body (nil: none; a string: as is; else
// JSON) as the token named who ("": no token).
func (f *fixture) do(who, method, path string, body any) answer {
	f.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			f.t.Fatal(err)
		}
	}
	var rd io.Reader
	if raw != nil {
		rd = bytes.NewReader(raw)
	}
	r := httptest.NewRequest(method, "http://127.0.0.1:8081"+path, rd)
	if who != "" {
		secret, ok := f.tokens[who]
		if !ok {
			f.t.Fatalf("no token %q", who)
		}
		r.Header.Set("Authorization", "Bearer "+secret)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	a := answer{w.Code, w.Body.Bytes(), w.Header()}
	a.conforms(f.t, f.h, method, path, raw)
	return a
}

// want checks the status, then decodes the body into v (nil: not).
func (a answer) want(t testing.TB, status int, v any) answer {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d; body %s", a.status, status, a.body)
	}
	if v != nil {
		if err := json.Unmarshal(a.body, v); err != nil {
			t.Fatalf("body %s: %v", a.body, err)
		}
	}
	return a
}

// wantError checks an error answer: status, code and field ("" for null).
func (a answer) wantError(t testing.TB, status int, code, field string) {
	t.Helper()
	var e struct {
		Error struct {
			Code    string  `json:"code"`
			Message string  `json:"message"`
			Field   *string `json:"field"`
		} `json:"error"`
	}
	a.want(t, status, &e)
	got := ""
	if e.Error.Field != nil {
		got = *e.Error.Field
	}
	if e.Error.Code != code || got != field || e.Error.Message == "" {
		t.Fatalf("error %+v (field %q), want code %q field %q; body %s", e.Error, got, code, field, a.body)
	}
}

// tokenStore is an in-memory gatekey.AdminStore: the HTTP layer's tests
// need scoped tokens, not a database's.
type tokenStore struct {
	mu     sync.Mutex
	byHash map[string]gatekey.AdminToken
}

func (s *tokenStore) InsertAdminToken(_ context.Context, t gatekey.AdminToken) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byHash[t.Hash] = t
	return nil
}

func (s *tokenStore) AdminTokenByHash(_ context.Context, hash string) (gatekey.AdminToken, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.byHash[hash]
	if !ok {
		return t, budget.ErrNotFound
	}
	return t, nil
}

func (s *tokenStore) ListAdminTokens(context.Context) ([]gatekey.AdminToken, error) { return nil, nil }

func (s *tokenStore) RevokeAdminToken(_ context.Context, name string, at time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, t := range s.byHash {
		if t.Name == name {
			t.RevokedAt = at
			s.byHash[h] = t
			return true, nil
		}
	}
	return false, budget.ErrNotFound
}
