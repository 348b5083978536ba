package admin_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/jsonview"
)

// TestAuditRecordsEachChangeWithItsActorCutToTheScope: every change made
// over the API is in the audit log under the token's name ("admin" for
// the global one), and a scoped token reads only its scope's entries.
func TestAuditRecordsEachChangeWithItsActorCutToTheScope(t *testing.T) {
	f := newFixture(t, false)
	f.now = f.now.Add(time.Hour) // after the fixture's own changes
	since := jsonview.Time(f.now)
	f.do("red-lead", "POST", "/admin/v1/keys", map[string]any{"name": "red-2"}).want(t, http.StatusCreated, nil)
	f.do("red-lead", "PATCH", "/admin/v1/limits/"+f.limits["team:red"], map[string]any{"limit": 2000}).want(t, http.StatusOK, nil)
	f.do("acme-ops", "POST", "/admin/v1/limits/"+f.limits["blue-app"]+"/raises", map[string]any{"by": 5}).want(t, http.StatusCreated, nil)
	f.do("admin", "PUT", "/admin/v1/teams/violet", nil).want(t, http.StatusCreated, nil)
	f.do("admin", "POST", "/admin/v1/prices", map[string]any{"provider": "openai", "model": "gpt-4o", "input": 1, "output": 2}).want(t, http.StatusCreated, nil)
	f.do("admin", "DELETE", "/admin/v1/keys/green-app", nil).want(t, http.StatusOK, nil)

	var list struct{ Entries []jsonview.AuditEntry }
	f.do("admin", "GET", "/admin/v1/audit?since="+since, nil).want(t, http.StatusOK, &list)
	var got []string
	for _, e := range list.Entries {
		got = append(got, e.Actor+" "+e.Action+" "+e.Object+" "+e.ObjectID)
		if strings.Contains(string(e.After), "tbk_") || strings.Contains(string(e.After), "hash") {
			t.Errorf("entry %s shows a secret or a hash: %s", e.ID, e.After)
		}
	}
	want := []string{
		"red-lead create key red-2",
		"red-lead update limit " + f.limits["team:red"],
		"acme-ops raise limit " + f.limits["blue-app"],
		"admin create team violet",
		"admin create price openai/gpt-4o/default/0/" + f.now.Format(time.RFC3339Nano),
		"admin revoke key green-app",
	}
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	if i != len(want) {
		t.Fatalf("the audit log since %s:\n%q\nwant, in order, among them:\n%q", since, got, want)
	}

	f.do("red-lead", "GET", "/admin/v1/audit?since="+since, nil).want(t, http.StatusOK, &list)
	for _, e := range list.Entries {
		if (e.Team == nil || *e.Team != "red") && e.Object != "price" { // prices are every scope's to read
			t.Errorf("red-lead reads an entry of %v/%v: %s %s %s", e.Team, e.Org, e.Action, e.Object, e.ObjectID)
		}
	}
	if len(list.Entries) < 2 {
		t.Errorf("red-lead reads %d entries, want its key and its team's limit", len(list.Entries))
	}
	f.do("admin", "GET", "/admin/v1/audit?limit=1", nil).want(t, http.StatusOK, &list)
	if len(list.Entries) != 1 || list.Entries[0].ObjectID != "green-app" {
		t.Fatalf("limit=1: %+v, want the newest entry only", list.Entries)
	}
	f.do("admin", "GET", "/admin/v1/audit?since=last-week", nil).wantError(t, http.StatusBadRequest, "invalid", "since")
	f.do("admin", "GET", "/admin/v1/audit?limit=-1", nil).wantError(t, http.StatusBadRequest, "invalid", "limit")
	f.do("", "GET", "/admin/v1/audit", nil).wantError(t, http.StatusUnauthorized, "unauthorized", "")
}

func TestTooLargeBodyIs413(t *testing.T) {
	f := newFixture(t, false)
	body := `{"name": "` + strings.Repeat("x", 70<<10) + `"}`
	f.do("admin", "POST", "/admin/v1/keys", body).wantError(t, http.StatusRequestEntityTooLarge, "too_large", "body")
	if keys, _ := f.db.KeyStore().ListKeys(t.Context()); len(keys) != 4 {
		t.Fatalf("%d keys after a refused create, want the fixture's 4", len(keys))
	}
}
