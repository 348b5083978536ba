package admin_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/tokenbudget/tokenbudget/jsonview"
)

func teamNames(ts []jsonview.Team) []string {
	out := make([]string, len(ts))
	for i := range ts {
		out[i] = ts[i].Name
	}
	return out
}

func TestTeamPutCreatesThenMoves(t *testing.T) {
	f := newFixture(t, false)
	var tm jsonview.Team
	f.do("admin", "PUT", "/admin/v1/teams/violet", map[string]any{"org": "acme"}).want(t, http.StatusCreated, &tm)
	if tm.Name != "violet" || tm.Org == nil || *tm.Org != "acme" || tm.Keys == nil {
		t.Fatalf("created %+v", tm)
	}
	f.do("admin", "PUT", "/admin/v1/teams/red", nil).want(t, http.StatusOK, &tm) // no org: out of any
	if tm.Org != nil || !slices.Equal(tm.Keys, []string{"red-app"}) {
		t.Fatalf("moved %+v", tm)
	}
	var list struct{ Teams []jsonview.Team }
	f.do("admin", "GET", "/admin/v1/teams", nil).want(t, http.StatusOK, &list)
	if got := teamNames(list.Teams); !slices.Equal(got, []string{"blue", "green", "red", "violet"}) {
		t.Fatalf("teams %v", got)
	}
	f.do("admin", "PUT", "/admin/v1/teams/red", map[string]any{"org": "red"}).wantError(t, http.StatusBadRequest, "invalid", "org")
	f.do("admin", "PUT", "/admin/v1/teams/a%E2%80%AEb", nil).wantError(t, http.StatusBadRequest, "invalid", "team")
}

func TestTeamScopes(t *testing.T) {
	f := newFixture(t, false)
	var list struct{ Teams []jsonview.Team }
	f.do("acme-ops", "GET", "/admin/v1/teams", nil).want(t, http.StatusOK, &list)
	if got := teamNames(list.Teams); !slices.Equal(got, []string{"blue", "red"}) {
		t.Fatalf("acme-ops sees %v", got)
	}
	f.do("red-lead", "GET", "/admin/v1/teams", nil).want(t, http.StatusOK, &list)
	if got := teamNames(list.Teams); !slices.Equal(got, []string{"red"}) {
		t.Fatalf("red-lead sees %v", got)
	}
	// An org's token makes and removes teams in its org, nowhere else.
	f.do("acme-ops", "PUT", "/admin/v1/teams/violet", map[string]any{"org": "acme"}).want(t, http.StatusCreated, nil)
	f.do("acme-ops", "PUT", "/admin/v1/teams/violet", map[string]any{"org": "other"}).wantError(t, http.StatusForbidden, "forbidden", "")
	f.do("acme-ops", "PUT", "/admin/v1/teams/green", map[string]any{"org": "acme"}).wantError(t, http.StatusForbidden, "forbidden", "")
	f.do("acme-ops", "DELETE", "/admin/v1/teams/violet", nil).want(t, http.StatusNoContent, nil)
	// A team's token changes no team, not even its own.
	f.do("red-lead", "PUT", "/admin/v1/teams/red", map[string]any{"org": "acme"}).wantError(t, http.StatusForbidden, "forbidden", "")
	f.do("red-lead", "DELETE", "/admin/v1/teams/red", nil).wantError(t, http.StatusForbidden, "forbidden", "")
}

func TestTeamDelete(t *testing.T) {
	f := newFixture(t, false)
	f.do("admin", "DELETE", "/admin/v1/teams/red", nil).wantError(t, http.StatusConflict, "conflict", "team")
	f.do("admin", "DELETE", "/admin/v1/limits/"+f.limits["team:red"], nil).want(t, http.StatusNoContent, nil)
	f.do("admin", "DELETE", "/admin/v1/teams/red", nil).want(t, http.StatusNoContent, nil)
	f.do("admin", "DELETE", "/admin/v1/teams/red", nil).wantError(t, http.StatusNotFound, "not_found", "")
	var key jsonview.Key
	f.do("admin", "GET", "/admin/v1/keys/red-app", nil).want(t, http.StatusOK, &key)
	if key.Team != nil {
		t.Fatalf("a removed team's key: %+v, want in no team", key)
	}
}

func TestPrices(t *testing.T) {
	f := newFixture(t, false)
	in := map[string]any{"provider": "openai", "model": "gpt-4o", "input": 2.5, "output": "10"}
	var p jsonview.Price
	f.do("admin", "POST", "/admin/v1/prices", in).want(t, http.StatusCreated, &p)
	if p.Provider != "openai" || p.Input != "2.50" || p.Output != "10.00" || p.CacheRead != "2.50" || p.From != jsonview.Time(f.now) {
		t.Fatalf("set %+v", p)
	}
	var list struct{ Prices []jsonview.Price }
	f.do("red-viewer", "GET", "/admin/v1/prices", nil).want(t, http.StatusOK, &list)
	if len(list.Prices) != 1 || list.Prices[0] != p {
		t.Fatalf("listed %+v", list.Prices)
	}
	f.do("admin", "POST", "/admin/v1/prices", map[string]any{"provider": "openai", "input": 1, "output": 1}).wantError(t, http.StatusBadRequest, "invalid", "model")
	f.do("admin", "POST", "/admin/v1/prices", map[string]any{"provider": "openai", "model": "m", "input": -1, "output": 1}).wantError(t, http.StatusBadRequest, "invalid", "input")
	f.do("admin", "POST", "/admin/v1/prices", map[string]any{"provider": "openai", "model": "m", "input": 1, "output": 1, "from": "May"}).wantError(t, http.StatusBadRequest, "invalid", "from")
	f.do("acme-ops", "POST", "/admin/v1/prices", in).wantError(t, http.StatusForbidden, "forbidden", "")
}
