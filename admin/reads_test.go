package admin_test

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/alert"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

// traffic records 100+10 tokens for each of red-app, blue-app, green-app
// and loose, an hour apart.
func (f *fixture) traffic() {
	f.t.Helper()
	var us []budget.Usage
	for i, k := range []string{"red-app", "blue-app", "green-app", "loose"} {
		us = append(us, budget.Usage{RequestID: "r-" + k, Key: k, Provider: "openai", Model: "gpt-4o", Input: 100, Output: 10,
			At: t0.Add(time.Duration(i) * time.Hour)})
	}
	if _, err := f.db.RecordSync(f.t.Context(), us...); err != nil {
		f.t.Fatal(err)
	}
	f.now = t0.Add(6 * time.Hour)
}

func TestReportJSONAndCSVCutToTheScope(t *testing.T) {
	f := newFixture(t, false)
	f.traffic()
	var rep struct {
		Rows []map[string]any `json:"rows"`
	}
	f.do("admin", "GET", "/admin/v1/report?by=team", nil).want(t, http.StatusOK, &rep)
	var teams []any
	for _, r := range rep.Rows {
		teams = append(teams, r["team"])
	}
	if !slices.Equal(teams, []any{nil, "blue", "green", "red"}) || rep.Rows[0]["tokens"] != 110.0 {
		t.Fatalf("global report by team: %v", rep.Rows)
	}
	f.do("acme-ops", "GET", "/admin/v1/report", nil).want(t, http.StatusOK, &rep)
	if len(rep.Rows) != 1 || rep.Rows[0]["requests"] != 2.0 || rep.Rows[0]["tokens"] != 220.0 {
		t.Fatalf("acme-ops's totals: %v, want red's and blue's 2 requests", rep.Rows)
	}
	f.do("red-lead", "GET", "/admin/v1/report?by=key,day", nil).want(t, http.StatusOK, &rep)
	if len(rep.Rows) != 1 || rep.Rows[0]["key"] != "red-app" || rep.Rows[0]["day"] != "2026-03-02" {
		t.Fatalf("red-lead's report: %v", rep.Rows)
	}
	a := f.do("acme-ops", "GET", "/admin/v1/report?by=key&format=csv", nil).want(t, http.StatusOK, nil)
	recs, err := csv.NewReader(bytes.NewReader(a.body)).ReadAll()
	if err != nil || a.header.Get("Content-Type") != "text/csv; charset=utf-8" {
		t.Fatalf("csv %q (%v), %s", a.body, err, a.header.Get("Content-Type"))
	}
	if len(recs) != 3 || recs[0][0] != "key" || recs[1][0] != "blue-app" || recs[2][0] != "red-app" {
		t.Fatalf("acme-ops's csv: %v", recs)
	}
	f.do("admin", "GET", "/admin/v1/report?by=colour", nil).wantError(t, http.StatusBadRequest, "invalid", "by")
	f.do("admin", "GET", "/admin/v1/report?since=yesterday", nil).wantError(t, http.StatusBadRequest, "invalid", "since")
	f.do("admin", "GET", "/admin/v1/report?since=2026-03-03&until=2026-03-02", nil).wantError(t, http.StatusBadRequest, "invalid", "until")
	f.do("admin", "GET", "/admin/v1/report?format=xml", nil).wantError(t, http.StatusBadRequest, "invalid", "format")
	f.do("red-lead", "GET", "/admin/v1/report?key=blue-app", nil).wantError(t, http.StatusForbidden, "forbidden", "")
}

// lines decodes JSON lines.
func lines(t *testing.T, b []byte) []jsonview.Event {
	t.Helper()
	var out []jsonview.Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var e jsonview.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

func TestUsageStreamsExportLinesCutToTheScope(t *testing.T) {
	f := newFixture(t, false)
	f.traffic()
	a := f.do("admin", "GET", "/admin/v1/usage", nil).want(t, http.StatusOK, nil)
	if ct := a.header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("Content-Type %q", ct)
	}
	all := lines(t, a.body)
	if len(all) != 4 || all[0].Key != "red-app" || all[0].Team != "red" || all[0].Org != "acme" || all[0].At != "2026-03-02T09:00:00Z" {
		t.Fatalf("all events: %+v", all)
	}
	for who, want := range map[string][]string{"red-lead": {"red-app"}, "acme-ops": {"red-app", "blue-app"}} {
		var keys []string
		for _, e := range lines(t, f.do(who, "GET", "/admin/v1/usage", nil).want(t, http.StatusOK, nil).body) {
			keys = append(keys, e.Key)
		}
		if !slices.Equal(keys, want) {
			t.Errorf("%s's events: %v, want %v", who, keys, want)
		}
	}
	got := lines(t, f.do("admin", "GET", "/admin/v1/usage?since=2026-03-02T10:00:00Z&until=2026-03-02T12:00:00Z", nil).want(t, http.StatusOK, nil).body)
	if len(got) != 2 || got[0].Key != "blue-app" || got[1].Key != "green-app" {
		t.Fatalf("since..until: %+v", got)
	}
	got = lines(t, f.do("admin", "GET", "/admin/v1/usage?key=loose", nil).want(t, http.StatusOK, nil).body)
	if len(got) != 1 || got[0].Key != "loose" {
		t.Fatalf("key=loose: %+v", got)
	}
	f.do("admin", "GET", "/admin/v1/usage?until=never", nil).wantError(t, http.StatusBadRequest, "invalid", "until")
	f.do("red-lead", "GET", "/admin/v1/usage?key=loose", nil).wantError(t, http.StatusForbidden, "forbidden", "")
}

func TestAlertsCutToTheScope(t *testing.T) {
	f := newFixture(t, false)
	for _, name := range []string{"red-app", "blue-app", "green-app"} {
		f.do("admin", "PATCH", "/admin/v1/limits/"+f.limits[name], map[string]any{"alerts": []int{5}}).want(t, http.StatusOK, nil)
	}
	f.traffic()
	var list struct{ Alerts []alert.Object }
	f.do("admin", "GET", "/admin/v1/alerts", nil).want(t, http.StatusOK, &list)
	if len(list.Alerts) != 3 {
		t.Fatalf("alerts %+v, want one per key limit", list.Alerts)
	}
	f.do("admin", "GET", "/admin/v1/alerts?limit=1", nil).want(t, http.StatusOK, &list)
	if len(list.Alerts) != 1 {
		t.Fatalf("limit=1: %d alerts", len(list.Alerts))
	}
	f.do("acme-ops", "GET", "/admin/v1/alerts", nil).want(t, http.StatusOK, &list)
	var owners []string
	for _, a := range list.Alerts {
		owners = append(owners, *a.Owner)
	}
	slices.Sort(owners)
	if !slices.Equal(owners, []string{"blue-app", "red-app"}) {
		t.Fatalf("acme-ops's alerts are of %v", owners)
	}
	f.do("admin", "GET", "/admin/v1/alerts?limit=0", nil).wantError(t, http.StatusBadRequest, "invalid", "limit")
}

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
