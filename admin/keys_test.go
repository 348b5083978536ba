package admin_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

func TestKeyCreateShowsTheSecretOnceAndItOpensTheKey(t *testing.T) {
	f := newFixture(t, false)
	var got jsonview.Secret
	f.do("admin", "POST", "/admin/v1/keys", map[string]any{"name": "new-app", "team": "red"}).want(t, http.StatusCreated, &got)
	if got.Name != "new-app" || !strings.HasPrefix(got.Secret, "tbk_") {
		t.Fatalf("created %+v", got)
	}
	k, err := f.db.KeyStore().KeyByHash(t.Context(), gatekey.HashSecret(got.Secret))
	if err != nil || k.Name != "new-app" || !k.Accepts(gatekey.HashSecret(got.Secret), f.now) {
		t.Fatalf("the secret opens %+v (%v)", k, err)
	}
	var key jsonview.Key
	a := f.do("admin", "GET", "/admin/v1/keys/new-app", nil).want(t, http.StatusOK, &key)
	if key.Team == nil || *key.Team != "red" || key.State != "active" || strings.Contains(string(a.body), got.Secret) {
		t.Fatalf("GET after create: %s", a.body)
	}
	var list struct{ Keys []jsonview.Key }
	f.do("admin", "GET", "/admin/v1/keys", nil).want(t, http.StatusOK, &list)
	if len(list.Keys) != 5 || strings.Contains(string(a.body), got.Secret) {
		t.Fatalf("listed %d keys, want 5", len(list.Keys))
	}
}

func TestKeyCreateErrors(t *testing.T) {
	f := newFixture(t, false)
	f.do("admin", "POST", "/admin/v1/keys", map[string]any{"name": "bad name"}).wantError(t, http.StatusBadRequest, "invalid", "name")
	f.do("admin", "POST", "/admin/v1/keys", map[string]any{"name": "x", "team": "nope"}).wantError(t, http.StatusBadRequest, "invalid", "team")
	f.do("admin", "POST", "/admin/v1/keys", map[string]any{"name": "x", "colour": "red"}).wantError(t, http.StatusBadRequest, "invalid", "colour")
	f.do("admin", "POST", "/admin/v1/keys", `{"name": 5}`).wantError(t, http.StatusBadRequest, "invalid", "name")
	f.do("admin", "POST", "/admin/v1/keys", `{"name":`).wantError(t, http.StatusBadRequest, "invalid", "body")
	f.do("admin", "POST", "/admin/v1/keys", map[string]any{"name": "red-app"}).wantError(t, http.StatusConflict, "conflict", "name")
	f.do("", "POST", "/admin/v1/keys", map[string]any{"name": "x"}).wantError(t, http.StatusUnauthorized, "unauthorized", "")
	f.do("red-lead", "POST", "/admin/v1/keys", map[string]any{"name": "x", "team": "blue"}).wantError(t, http.StatusForbidden, "forbidden", "")
	f.do("red-viewer", "POST", "/admin/v1/keys", map[string]any{"name": "x"}).wantError(t, http.StatusForbidden, "forbidden", "")
	keys, _ := f.db.KeyStore().ListKeys(t.Context())
	if len(keys) != 4 {
		t.Fatalf("refused creates left %d keys, want the fixture's 4", len(keys))
	}
}

func TestKeyCreateByATeamTokenLandsInItsTeam(t *testing.T) {
	f := newFixture(t, false)
	f.do("red-lead", "POST", "/admin/v1/keys", map[string]any{"name": "red-2"}).want(t, http.StatusCreated, nil)
	var key jsonview.Key
	f.do("red-lead", "GET", "/admin/v1/keys/red-2", nil).want(t, http.StatusOK, &key)
	if key.Team == nil || *key.Team != "red" {
		t.Fatalf("a team token's key: %+v, want in team red", key)
	}
}

// A name that is already a key (placed in another team, or owning limits
// only a global admin manages) is not a free name for a scoped token: it
// cannot issue itself a secret for it, nor pull it into its own team. A
// key already in its team it may issue one for.
func TestKeyCreateByATeamTokenTakesNoKeyFromElsewhere(t *testing.T) {
	f := newFixture(t, false)
	ctx := context.Background()
	if err := f.db.SetKeyTeam(ctx, "lib-blue", "blue"); err != nil { // placed, no gateway key
		t.Fatal(err)
	}
	if err := f.db.SetKeyTeam(ctx, "lib-red", "red"); err != nil {
		t.Fatal(err)
	}
	max := int64(10)
	if _, _, err := f.db.SetLimit(ctx, budget.LimitSpec{Key: "lib-loose", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lib-blue", "lib-loose"} {
		f.do("red-lead", "POST", "/admin/v1/keys", map[string]any{"name": name}).wantError(t, http.StatusForbidden, "forbidden", "")
		f.do("admin", "GET", "/admin/v1/keys/"+name, nil).wantError(t, http.StatusNotFound, "not_found", "")
	}
	if ts, err := f.db.Teams(ctx); err != nil {
		t.Fatal(err)
	} else {
		for _, tm := range ts {
			if tm.Name == "red" && slices.Contains(tm.Keys, "lib-blue") {
				t.Errorf("lib-blue moved into red: %+v", tm)
			}
		}
	}
	f.do("red-lead", "POST", "/admin/v1/keys", map[string]any{"name": "lib-red"}).want(t, http.StatusCreated, nil)
	f.do("admin", "POST", "/admin/v1/keys", map[string]any{"name": "lib-loose"}).want(t, http.StatusCreated, nil)
}

func TestKeyPatchMovesItBetweenTeams(t *testing.T) {
	f := newFixture(t, false)
	var key jsonview.Key
	f.do("admin", "PATCH", "/admin/v1/keys/loose", map[string]any{"team": "green"}).want(t, http.StatusOK, &key)
	if key.Team == nil || *key.Team != "green" {
		t.Fatalf("patched %+v", key)
	}
	f.do("admin", "PATCH", "/admin/v1/keys/loose", map[string]any{"team": nil}).want(t, http.StatusOK, &key)
	if key.Team != nil {
		t.Fatalf("patched to null: %+v", key)
	}
	f.do("admin", "PATCH", "/admin/v1/keys/loose", map[string]any{}).want(t, http.StatusOK, &key)
	if key.Team != nil {
		t.Fatalf("an empty patch changed the team: %+v", key)
	}
	f.do("admin", "PATCH", "/admin/v1/keys/loose", map[string]any{"team": "nope"}).wantError(t, http.StatusBadRequest, "invalid", "team")
	f.do("admin", "PATCH", "/admin/v1/keys/nope", map[string]any{"team": "red"}).wantError(t, http.StatusNotFound, "not_found", "")
	// An org's token moves keys between its teams, not out of its org.
	f.do("acme-ops", "PATCH", "/admin/v1/keys/red-app", map[string]any{"team": "blue"}).want(t, http.StatusOK, &key)
	f.do("acme-ops", "PATCH", "/admin/v1/keys/red-app", map[string]any{"team": "green"}).wantError(t, http.StatusForbidden, "forbidden", "")
	f.do("acme-ops", "PATCH", "/admin/v1/keys/red-app", map[string]any{"team": nil}).wantError(t, http.StatusForbidden, "forbidden", "")
	f.do("red-lead", "PATCH", "/admin/v1/keys/red-app", map[string]any{"team": "red"}).wantError(t, http.StatusForbidden, "forbidden", "")
}

func TestKeyRotateAndRevoke(t *testing.T) {
	f := newFixture(t, false)
	var s jsonview.Secret
	f.do("red-lead", "POST", "/admin/v1/keys/red-app/rotate", map[string]any{"grace": "0s"}).want(t, http.StatusOK, &s)
	if s.Name != "red-app" || s.Secret == "" {
		t.Fatalf("rotated %+v", s)
	}
	k, err := f.db.KeyStore().KeyByHash(t.Context(), gatekey.HashSecret(s.Secret))
	if err != nil || !k.Accepts(gatekey.HashSecret(s.Secret), f.now) || k.Accepts(gatekey.HashSecret("s-red-app"), f.now) {
		t.Fatalf("after a rotation with no grace: %+v (%v)", k, err)
	}
	f.do("admin", "POST", "/admin/v1/keys/red-app/rotate", nil).want(t, http.StatusOK, nil) // no body: the default grace
	f.do("admin", "POST", "/admin/v1/keys/red-app/rotate", map[string]any{"grace": "soon"}).wantError(t, http.StatusBadRequest, "invalid", "grace")
	f.do("admin", "POST", "/admin/v1/keys/nope/rotate", nil).wantError(t, http.StatusNotFound, "not_found", "")

	f.now = f.now.Add(time.Minute)
	var key jsonview.Key
	f.do("red-lead", "DELETE", "/admin/v1/keys/red-app", nil).want(t, http.StatusOK, &key)
	if !key.Revoked || key.State != "revoked" || key.RevokedAt == nil || *key.RevokedAt != jsonview.Time(f.now) {
		t.Fatalf("revoked %+v", key)
	}
	f.do("red-lead", "DELETE", "/admin/v1/keys/red-app", nil).want(t, http.StatusOK, &key) // again: no error
	f.do("admin", "POST", "/admin/v1/keys/red-app/rotate", nil).wantError(t, http.StatusConflict, "conflict", "name")
	f.do("admin", "POST", "/admin/v1/keys", map[string]any{"name": "red-app"}).wantError(t, http.StatusConflict, "conflict", "name")
	f.do("admin", "POST", "/admin/v1/keys", map[string]any{"name": "red-app", "reuse": true}).want(t, http.StatusCreated, &s)
	f.do("admin", "DELETE", "/admin/v1/keys/nope", nil).wantError(t, http.StatusNotFound, "not_found", "")
}

func TestKeyExpiryAndModels(t *testing.T) {
	f := newFixture(t, false)
	expires := f.now.Add(48 * time.Hour).Format(time.RFC3339)
	f.do("admin", "POST", "/admin/v1/keys", map[string]any{"name": "temp", "expires_at": expires, "models": []string{"gpt-4o*", "claude-*"}}).
		want(t, http.StatusCreated, nil)
	var key jsonview.Key
	f.do("admin", "GET", "/admin/v1/keys/temp", nil).want(t, http.StatusOK, &key)
	if key.ExpiresAt == nil || *key.ExpiresAt != expires || len(key.Models) != 2 {
		t.Fatalf("created %+v", key)
	}
	stored, err := f.db.KeyStore().ListKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range stored {
		if k.Name == "temp" && (!k.AllowsModel("gpt-4o-mini") || k.AllowsModel("gemini-2.5-pro") || k.Expired(f.now) || !k.Expired(f.now.Add(49*time.Hour))) {
			t.Fatalf("stored %+v", k)
		}
	}
	f.do("admin", "PATCH", "/admin/v1/keys/temp", map[string]any{"expires_at": nil, "models": nil}).want(t, http.StatusOK, &key)
	if key.ExpiresAt != nil || len(key.Models) != 0 {
		t.Fatalf("patched to never and any model: %+v", key)
	}
	f.do("admin", "PATCH", "/admin/v1/keys/temp", map[string]any{"models": []string{"o3"}}).want(t, http.StatusOK, &key)
	if len(key.Models) != 1 || key.Models[0] != "o3" || key.ExpiresAt != nil {
		t.Fatalf("patched models only: %+v", key)
	}
	past := f.now.Add(-time.Hour).Format(time.RFC3339)
	f.do("admin", "PATCH", "/admin/v1/keys/temp", map[string]any{"expires_at": past}).wantError(t, http.StatusBadRequest, "invalid", "expires_at")
	f.do("admin", "PATCH", "/admin/v1/keys/temp", map[string]any{"expires_at": "tomorrow"}).wantError(t, http.StatusBadRequest, "invalid", "expires_at")
	f.do("admin", "POST", "/admin/v1/keys", map[string]any{"name": "t2", "models": []string{"a b"}}).wantError(t, http.StatusBadRequest, "invalid", "models")
	f.do("admin", "POST", "/admin/v1/keys", map[string]any{"name": "t3", "expires_at": past}).wantError(t, http.StatusBadRequest, "invalid", "expires_at")
	f.do("red-lead", "PATCH", "/admin/v1/keys/temp", map[string]any{"models": []string{"o3"}}).wantError(t, http.StatusForbidden, "forbidden", "")
	keys, _ := f.db.KeyStore().ListKeys(t.Context())
	if len(keys) != 5 {
		t.Fatalf("%d keys: refused creates wrote one", len(keys))
	}
}
