package admin_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/gatekey"
)

// call is one request of the scope walk.
type call struct {
	method, path string
	body         any
	status       int // 403, or a success whose body must not name blue
}

// TestTeamTokenCannotReachAnotherTeamThroughAnyRoute walks every route of
// the OpenAPI document (which TestOpenAPIMatchesTheRoutes proves is every
// route served) with team red's token, at team blue's keys and limits:
// each is refused, or answers without a trace of blue; and afterwards
// nothing of blue has changed.
func TestTeamTokenCannotReachAnotherTeamThroughAnyRoute(t *testing.T) {
	f := newFixture(t, false)
	for _, name := range []string{"red-app", "blue-app", "team:blue"} {
		f.do("admin", "PATCH", "/admin/v1/limits/"+f.limits[name], map[string]any{"alerts": []int{5}}).want(t, http.StatusOK, nil)
	}
	f.traffic()
	blueKey, blueLimit, blueTeamLimit := "blue-app", f.limits["blue-app"], f.limits["team:blue"]
	before := blueState(t, f)

	walk := map[string][]call{
		"POST /admin/v1/session":   {{"POST", "/admin/v1/session", map[string]any{"token": f.tokens["red-lead"]}, 201}},
		"DELETE /admin/v1/session": {{"DELETE", "/admin/v1/session", nil, 204}},
		"GET /admin/v1/session":    {{"GET", "/admin/v1/session", nil, 200}},
		"GET /admin/v1/keys":       {{"GET", "/admin/v1/keys", nil, 200}},
		"POST /admin/v1/keys": {
			{"POST", "/admin/v1/keys", map[string]any{"name": "mine", "team": "blue"}, 403},
			{"POST", "/admin/v1/keys", map[string]any{"name": blueKey, "reuse": true}, 403},
		},
		"GET /admin/v1/keys/{name}":         {{"GET", "/admin/v1/keys/" + blueKey, nil, 403}},
		"PATCH /admin/v1/keys/{name}":       {{"PATCH", "/admin/v1/keys/" + blueKey, map[string]any{"team": "red"}, 403}},
		"DELETE /admin/v1/keys/{name}":      {{"DELETE", "/admin/v1/keys/" + blueKey, nil, 403}},
		"POST /admin/v1/keys/{name}/rotate": {{"POST", "/admin/v1/keys/" + blueKey + "/rotate", nil, 403}},
		"GET /admin/v1/limits": {
			{"GET", "/admin/v1/limits", nil, 200},
			{"GET", "/admin/v1/limits?key=" + blueKey, nil, 403},
			{"GET", "/admin/v1/limits?team=blue", nil, 403},
			{"GET", "/admin/v1/limits?org=acme", nil, 403},
		},
		"POST /admin/v1/limits": {
			{"POST", "/admin/v1/limits", map[string]any{"key": blueKey, "limit": 1, "window": "daily"}, 403},
			{"POST", "/admin/v1/limits", map[string]any{"team": "blue", "limit": 1, "window": "daily"}, 403},
			{"POST", "/admin/v1/limits", map[string]any{"org": "acme", "limit": 1, "window": "daily"}, 403},
			{"POST", "/admin/v1/limits", map[string]any{"default": true, "limit": 1, "window": "daily"}, 403},
		},
		"GET /admin/v1/limits/{id}": {
			{"GET", "/admin/v1/limits/" + blueLimit, nil, 403},
			{"GET", "/admin/v1/limits/" + blueTeamLimit, nil, 403},
		},
		"PATCH /admin/v1/limits/{id}": {
			{"PATCH", "/admin/v1/limits/" + blueLimit, map[string]any{"limit": 1}, 403},
			{"PATCH", "/admin/v1/limits/" + blueTeamLimit, map[string]any{"enabled": false}, 403},
		},
		"DELETE /admin/v1/limits/{id}": {
			{"DELETE", "/admin/v1/limits/" + blueLimit, nil, 403},
			{"DELETE", "/admin/v1/limits/" + blueTeamLimit, nil, 403},
		},
		"POST /admin/v1/limits/{id}/raises": {
			{"POST", "/admin/v1/limits/" + blueLimit + "/raises", map[string]any{"by": 1}, 403},
			{"POST", "/admin/v1/limits/" + blueTeamLimit + "/raises", map[string]any{"by": 1}, 403},
		},
		"GET /admin/v1/teams":           {{"GET", "/admin/v1/teams", nil, 200}},
		"PUT /admin/v1/teams/{name}":    {{"PUT", "/admin/v1/teams/blue", map[string]any{"org": "other"}, 403}},
		"DELETE /admin/v1/teams/{name}": {{"DELETE", "/admin/v1/teams/blue", nil, 403}},
		"GET /admin/v1/prices":          {{"GET", "/admin/v1/prices", nil, 200}},
		"POST /admin/v1/prices": {{"POST", "/admin/v1/prices", map[string]any{"provider": "openai", "model": "gpt-4o",
			"input": 0, "output": 0}, 403}},
		"GET /admin/v1/alerts": {{"GET", "/admin/v1/alerts", nil, 200}},
		"GET /admin/v1/report": {
			{"GET", "/admin/v1/report?by=key,team,org", nil, 200},
			{"GET", "/admin/v1/report?key=" + blueKey, nil, 403},
		},
		"GET /admin/v1/usage": {
			{"GET", "/admin/v1/usage", nil, 200},
			{"GET", "/admin/v1/usage?key=" + blueKey, nil, 403},
		},
		"GET /admin/v1/audit":        {{"GET", "/admin/v1/audit", nil, 200}},
		"GET /admin/v1/openapi.json": {{"GET", "/admin/v1/openapi.json", nil, 200}},
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	f.do("", "GET", "/admin/v1/openapi.json", nil).want(t, http.StatusOK, &doc)
	seen := 0
	for path, item := range doc.Paths {
		for method := range item {
			route := strings.ToUpper(method) + " " + path
			calls, ok := walk[route]
			if !ok {
				t.Errorf("the walk has no call for %s: add one", route)
				continue
			}
			seen++
			for _, c := range calls {
				a := f.do("red-lead", c.method, c.path, c.body)
				if c.status == http.StatusForbidden {
					a.wantError(t, http.StatusForbidden, "forbidden", "")
					continue
				}
				a.want(t, c.status, nil)
				if c.path != "/admin/v1/openapi.json" && strings.Contains(string(a.body), "blue") {
					t.Errorf("red-lead %s %s shows blue: %s", c.method, c.path, a.body)
				}
			}
		}
	}
	if seen != len(walk) {
		t.Errorf("walked %d routes of the document, the table has %d", seen, len(walk))
	}
	if after := blueState(t, f); !reflect.DeepEqual(before, after) {
		t.Errorf("blue changed under red's token:\nbefore %+v\nafter  %+v", before, after)
	}
}

// blueState is everything of team blue: its key, its limits, the team.
func blueState(t *testing.T, f *fixture) any {
	t.Helper()
	ctx := t.Context()
	keys, err := f.db.KeyStore().ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var key gatekey.Key
	for _, k := range keys {
		if k.Name == "blue-app" {
			key = k
		}
	}
	ls, err := f.db.Limits(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var limits []string
	for _, l := range ls {
		if l.Key == "blue-app" || l.Team == "blue" || l.Org == "acme" || l.IsDefault() {
			b, _ := json.Marshal(l)
			limits = append(limits, string(b))
		}
	}
	ts, err := f.db.Teams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := f.db.ListPrices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return struct {
		Key    gatekey.Key
		Limits []string
		Teams  any
		Prices int
		Keys   int
	}{key, limits, ts, len(ps), len(keys)}
}
