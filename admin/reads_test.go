package admin_test

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"slices"
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
