package admin_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

func ids(ls []jsonview.Limit) []string {
	out := make([]string, len(ls))
	for i := range ls {
		out[i] = ls[i].ID
	}
	slices.Sort(out)
	return out
}

func (f *fixture) ids(names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = f.limits[n]
	}
	slices.Sort(out)
	return out
}

func TestLimitCreateThenSameIdentityUpdates(t *testing.T) {
	f := newFixture(t, false)
	in := map[string]any{"key": "loose", "metric": "usd", "limit": "2.50", "window": "monthly", "alerts": []int{50, 100}}
	var l jsonview.Limit
	f.do("admin", "POST", "/admin/v1/limits", in).want(t, http.StatusCreated, &l)
	if l.Metric != "usd" || l.Limit != 2_500_000 || l.Level != "key" || *l.Key != "loose" || !slices.Equal(l.Alerts, []int{50, 100}) {
		t.Fatalf("created %+v", l)
	}
	in["limit"] = 3_000_000 // a number is in the object's unit: micro-dollars
	var again jsonview.Limit
	f.do("admin", "POST", "/admin/v1/limits", in).want(t, http.StatusOK, &again)
	if again.ID != l.ID || again.Limit != 3_000_000 {
		t.Fatalf("same identity: %+v, want limit %s updated to 3000000", again, l.ID)
	}
	var got jsonview.Limit
	f.do("admin", "GET", "/admin/v1/limits/"+l.ID, nil).want(t, http.StatusOK, &got)
	if got.ID != l.ID || got.Limit != 3_000_000 {
		t.Fatalf("GET %+v", got)
	}
}

func TestLimitCreateErrorsNameTheField(t *testing.T) {
	f := newFixture(t, false)
	for _, c := range []struct {
		in    map[string]any
		field string
	}{
		{map[string]any{"key": "loose", "metric": "joules", "limit": 5, "window": "daily"}, "metric"},
		{map[string]any{"key": "loose", "limit": 5, "window": "fortnightly"}, "window"},
		{map[string]any{"key": "loose", "limit": "lots", "window": "daily"}, "limit"},
		{map[string]any{"key": "loose", "limit": true, "window": "daily"}, "limit"},
		{map[string]any{"team": "nope", "limit": 5, "window": "daily"}, "team"},
		{map[string]any{"key": "loose", "default": true, "limit": 5, "window": "daily"}, "key"},
	} {
		f.do("admin", "POST", "/admin/v1/limits", c.in).wantError(t, http.StatusBadRequest, "invalid", c.field)
	}
	ls, _ := f.db.Limits(t.Context(), "")
	if len(ls) != len(f.limits) {
		t.Fatalf("refused creates left %d limits, want the fixture's %d", len(ls), len(f.limits))
	}
}

func TestLimitListFilters(t *testing.T) {
	f := newFixture(t, false)
	var list struct{ Limits []jsonview.Limit }
	for _, c := range []struct {
		who, query string
		want       []string
	}{
		{"admin", "", f.ids("red-app", "blue-app", "green-app", "team:red", "team:blue", "org:acme", "org:other", "default")},
		{"admin", "?key=red-app", f.ids("red-app", "default")},
		{"admin", "?team=red", f.ids("team:red")},
		{"admin", "?org=acme", f.ids("org:acme")},
		{"red-lead", "", f.ids("red-app", "team:red")},
		{"red-lead", "?key=red-app", f.ids("red-app")},
		{"acme-ops", "", f.ids("red-app", "blue-app", "team:red", "team:blue", "org:acme")},
	} {
		f.do(c.who, "GET", "/admin/v1/limits"+c.query, nil).want(t, http.StatusOK, &list)
		if got := ids(list.Limits); !slices.Equal(got, c.want) {
			t.Errorf("%s GET /admin/v1/limits%s: %v, want %v", c.who, c.query, got, c.want)
		}
	}
	f.do("red-lead", "GET", "/admin/v1/limits?team=blue", nil).wantError(t, http.StatusForbidden, "forbidden", "")
}

func TestLimitPatchChangesOnlyTheFieldsGivenAndKeepsTheCounters(t *testing.T) {
	f := newFixture(t, false)
	id := f.limits["red-app"]
	if _, err := f.db.RecordSync(t.Context(), budget.Usage{RequestID: "r1", Key: "red-app", Provider: "openai", Model: "gpt-4o",
		Input: 300, Output: 100, At: f.now}); err != nil {
		t.Fatal(err)
	}
	var l jsonview.Limit
	f.do("red-lead", "PATCH", "/admin/v1/limits/"+id, map[string]any{"limit": 5000}).want(t, http.StatusOK, &l)
	if l.ID != id || l.Limit != 5000 || *l.Window != "daily" || l.Metric != "tokens" || *l.Key != "red-app" {
		t.Fatalf("patched %+v", l)
	}
	rep, err := f.db.Inspect(t.Context(), "red-app", f.now, 0)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(rep.Limits, func(s budget.Status) bool { return s.Limit.ID == id })
	if i < 0 || rep.Limits[i].Used != 400 || rep.Limits[i].Max != 5000 {
		t.Fatalf("after the patch: %+v, want used 400 of 5000", rep.Limits)
	}
	f.do("admin", "PATCH", "/admin/v1/limits/"+id, map[string]any{"enabled": false, "alerts": []int{80}}).want(t, http.StatusOK, &l)
	if l.Enabled || l.Limit != 5000 || !slices.Equal(l.Alerts, []int{80}) {
		t.Fatalf("second patch %+v", l)
	}
	f.do("admin", "PATCH", "/admin/v1/limits/"+id, map[string]any{"window": "soon"}).wantError(t, http.StatusBadRequest, "invalid", "window")
	// The identity sent back unchanged is no change; a new one is refused,
	// naming the field, and nothing is written.
	f.do("admin", "PATCH", "/admin/v1/limits/"+id, map[string]any{"window": "daily", "metric": "tokens", "scope": "global", "value": "", "limit": 6000}).want(t, http.StatusOK, &l)
	for field, v := range map[string]string{"metric": "requests", "window": "1h", "scope": "provider", "value": "openai"} {
		f.do("admin", "PATCH", "/admin/v1/limits/"+id, map[string]any{field: v, "limit": 7}).wantError(t, http.StatusBadRequest, "invalid", field)
	}
	f.do("admin", "GET", "/admin/v1/limits/"+id, nil).want(t, http.StatusOK, &l)
	if l.Limit != 6000 || l.Metric != "tokens" || *l.Window != "daily" {
		t.Fatalf("after refused identity changes: %+v; want the limit of 6000 tokens daily", l)
	}
	f.do("admin", "PATCH", "/admin/v1/limits/"+id, map[string]any{"key": "loose"}).wantError(t, http.StatusBadRequest, "invalid", "key")
	f.do("admin", "PATCH", "/admin/v1/limits/lim_nope", map[string]any{"limit": 5}).wantError(t, http.StatusNotFound, "not_found", "")
}

func TestLimitRaiseAndDelete(t *testing.T) {
	f := newFixture(t, false)
	id := f.limits["team:red"]
	until := f.now.Add(time.Hour).Format(time.RFC3339)
	var l jsonview.Limit
	f.do("red-lead", "POST", "/admin/v1/limits/"+id+"/raises", map[string]any{"by": 500, "until": until}).want(t, http.StatusCreated, &l)
	if l.Limit != 1500 || l.BaseLimit != 1000 || len(l.Raises) != 1 || l.Raises[0].By != 500 || *l.Raises[0].Until != until {
		t.Fatalf("raised %+v", l)
	}
	f.tick = true // the raise is recorded after the request began: the answer still shows it in force
	f.do("admin", "POST", "/admin/v1/limits/"+id+"/raises", map[string]any{"by": 250}).want(t, http.StatusCreated, &l)
	if l.Limit != 1750 || len(l.Raises) != 2 {
		t.Fatalf("raised again on a moving clock: %+v", l)
	}
	f.tick = false
	f.do("admin", "POST", "/admin/v1/limits/"+id+"/raises", map[string]any{"by": 0}).wantError(t, http.StatusBadRequest, "invalid", "by")
	f.do("admin", "POST", "/admin/v1/limits/"+id+"/raises", map[string]any{}).wantError(t, http.StatusBadRequest, "invalid", "by")
	f.do("admin", "POST", "/admin/v1/limits/"+id+"/raises", map[string]any{"by": 5, "until": "2020-01-01T00:00:00Z"}).wantError(t, http.StatusBadRequest, "invalid", "until")
	f.do("admin", "POST", "/admin/v1/limits/lim_nope/raises", map[string]any{"by": 5}).wantError(t, http.StatusNotFound, "not_found", "")

	f.do("red-lead", "DELETE", "/admin/v1/limits/"+id, nil).want(t, http.StatusNoContent, nil)
	f.do("admin", "GET", "/admin/v1/limits/"+id, nil).wantError(t, http.StatusNotFound, "not_found", "")
	f.do("admin", "DELETE", "/admin/v1/limits/"+id, nil).wantError(t, http.StatusNotFound, "not_found", "")
}
