package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra,
		suiteCase{"RollupsFollowTheEvents", testRollupsFollow},
		suiteCase{"BatchOfManyRowsWritesEachOnce", testManyRowsOneBatch},
		suiteCase{"ReportMatchesTheHistory", testReportMatches},
		suiteCase{"PruneKeepsReportsAndCounters", testPrune},
		suiteCase{"PruneRefusesWhatStillNeedsEvents", testPruneRefusals},
		suiteCase{"VerifyAfterPruneChecksWhatRollupsCanSay", testVerifyAfterPrune},
		suiteCase{"DefinitionsAndHistoryMoveToAFreshDatabase", testMoveDatabase},
	)
}

// history records a varied history over the 10 days before T0: two keys
// of a team, one without, two end users, two providers, a priced and an
// unpriced model, a duplicate and a late commit's excess.
func history(t *testing.T, tr *budget.Tracker) {
	t.Helper()
	if _, err := tr.SetPrices(ctx, budget.PriceSpec{Provider: "openai", Model: "gpt-4o", Input: "2.5", Output: "10", From: T0.AddDate(0, 0, -30)}); err != nil {
		t.Fatal(err)
	}
	setTeam(t, tr, "eng", "acme", "a", "b")
	var evs []budget.Usage
	for d := range 10 {
		for h := range 6 {
			at := T0.AddDate(0, 0, -10+d).Add(time.Duration(h*4)*time.Hour + time.Duration(d)*time.Minute)
			for i, k := range []string{"a", "b", "c"} {
				u := budget.Usage{RequestID: fmt.Sprintf("r-%d-%d-%d", d, h, i), Key: k, Provider: "openai", Model: "gpt-4o",
					Input: int64(100 + d + h), Output: int64(10 * (i + 1)), Reasoning: int64(h), CacheRead: 7, At: at}
				if h%2 == 1 {
					u.Provider, u.Model = "anthropic", "claude-sonnet-4-5" // no price
				}
				if i == 1 {
					u.User = []string{"alice", "bob"}[h%2]
				}
				evs = append(evs, u)
			}
		}
	}
	late := evs[5]
	late.RequestID += budget.LateSuffix
	evs = append(evs, evs[0], late) // a duplicate, and an excess that is no request
	RecordSync(t, tr, evs...)
}

// sumEvents is the brute-force report: every event of [since, until)
// summed by by, from Export.
func sumEvents(t *testing.T, tr *budget.Tracker, since, until time.Time, by []budget.Dim) []budget.ReportRow {
	t.Helper()
	var rs []budget.Rollup
	if _, err := tr.Export(ctx, since, until, "", func(u budget.Usage) error {
		tot := budget.Totals{Requests: u.Amount(budget.MetricRequests), Input: u.Input, Output: u.Output, Reasoning: u.Reasoning,
			CacheRead: u.CacheRead, CacheWrite: u.CacheWrite, Cost: u.Cost}
		if u.NoPrice {
			tot.NoPrice = 1
		}
		rs = append(rs, budget.Rollup{Day: budget.Day(u.At), Key: u.Key, Team: u.Team, Org: u.Org, User: u.User, Provider: u.Provider, Model: u.Model, Totals: tot})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return budget.Group(rs, by)
}

// Every inserted event lands in its day's rollup, once; duplicates and
// late excesses as the counters count them.
func testRollupsFollow(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	history(t, tr)
	drift, err := tr.VerifyRollups(ctx)
	if err != nil || len(drift) != 0 {
		t.Fatalf("VerifyRollups = %d drifted (first %+v), %v; want the rollups equal to the events", len(drift), first(drift), err)
	}
	rows, err := tr.Report(ctx, budget.ReportQuery{Since: T0.AddDate(0, 0, -30), Until: T0, By: []budget.Dim{budget.DimKey}})
	if err != nil {
		t.Fatal(err)
	}
	// 60 events a key; the late excess (key a) is no request.
	if len(rows) != 3 || rows[0].Values[0] != "a" || rows[0].Requests != 60 || rows[1].Requests != 60 || rows[2].Requests != 60 {
		t.Fatalf("report by key = %+v; want a, b, c with 60 requests each", rows)
	}
	if rows[0].NoPrice != 30 || rows[0].Cost == 0 {
		t.Fatalf("key a: %d events without a price, cost %d; want 30 unpriced and a cost for the priced ones", rows[0].NoPrice, rows[0].Cost)
	}
}

// A batch writes its rows in statements of a few dozen each: one batch of
// 150 keys' events (one to three a key), creating their counters, then
// another adding to them, each more rows than a statement holds with a
// last statement part full, leave every counter and every rollup equal to
// the events, and each key's usage its own.
func testManyRowsOneBatch(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	SetLimit(t, tr, budget.LimitSpec{ID: "per-key", Default: true, Window: "daily"}, 1<<40)
	const keys = 150
	for round := range 2 {
		var evs []budget.Usage
		for k := range keys {
			for j := range k%3 + 1 {
				evs = append(evs, budget.Usage{Key: fmt.Sprintf("key-%03d", k), RequestID: fmt.Sprintf("r%d-%d-%d", round, k, j),
					Provider: "openai", Model: "gpt-4o", Input: int64(k + 1), At: T0.Add(time.Duration(round*3+j) * time.Minute)})
			}
		}
		RecordSync(t, tr, evs...)
	}
	if drift, err := tr.Verify(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("Verify = %d drifted (first %+v), %v; want every counter equal to its events", len(drift), first(drift), err)
	}
	if drift, err := tr.VerifyRollups(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("VerifyRollups = %d drifted (first %+v), %v; want the rollups equal to the events", len(drift), first(drift), err)
	}
	for _, k := range []int{0, 63, 64, 65, 127, 128, 149} {
		d, err := tr.CheckAt(ctx, budget.Request{Key: fmt.Sprintf("key-%03d", k), Provider: "openai", Model: "gpt-4o"}, T0.Add(10*time.Minute))
		if err != nil || len(d.Limits) != 1 {
			t.Fatalf("check key %d: %+v, %v", k, d, err)
		}
		if want := int64(2 * (k%3 + 1) * (k + 1)); d.Limits[0].Used != want {
			t.Errorf("key %d used %d; want %d", k, d.Limits[0].Used, want)
		}
	}
	rows, err := tr.Report(ctx, budget.ReportQuery{Since: T0.AddDate(0, 0, -1), Until: T0.AddDate(0, 0, 1), By: []budget.Dim{budget.DimKey}})
	if err != nil || len(rows) != keys {
		t.Fatalf("report by key: %d rows, %v; want %d", len(rows), err, keys)
	}
	for k, r := range rows {
		if r.Values[0] != fmt.Sprintf("key-%03d", k) || r.Requests != int64(2*(k%3+1)) {
			t.Errorf("report row %d = %s, %d requests; want key-%03d, %d", k, r.Values[0], r.Requests, k, 2*(k%3+1))
		}
	}
}

// A report over partial days (events) and whole ones (rollups) equals the
// events summed one by one, for every grouping.
func testReportMatches(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	history(t, tr)
	since, until := T0.AddDate(0, 0, -8).Add(5*time.Hour+3*time.Minute), T0.AddDate(0, 0, -2).Add(7*time.Hour)
	for _, by := range [][]budget.Dim{
		{budget.DimKey, budget.DimDay},
		{budget.DimTeam, budget.DimOrg, budget.DimUser},
		{budget.DimProvider, budget.DimModel, budget.DimWeek},
		{budget.DimMonth},
		nil,
	} {
		got, err := tr.Report(ctx, budget.ReportQuery{Since: since, Until: until, By: by})
		if err != nil {
			t.Fatal(err)
		}
		if want := sumEvents(t, tr, since, until, by); !reflect.DeepEqual(got, want) {
			t.Fatalf("Report by %v =\n%+v\nwant (the events summed)\n%+v", by, got, want)
		}
	}
	one, err := tr.Report(ctx, budget.ReportQuery{Since: since, Until: since.Add(4 * time.Hour), Key: "b", By: []budget.Dim{budget.DimKey}})
	if err != nil || len(one) != 1 || one[0].Values[0] != "b" {
		t.Fatalf("Report of key b within one day = %+v, %v; want b alone", one, err)
	}
}

// After a prune, reports over the pruned days are unchanged, verify is
// clean, events before the horizon are refused, and a limit created
// afterwards whose window starts on a UTC day before the horizon is seeded
// from the rollups.
func testPrune(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	history(t, tr)
	hourly := SetLimit(t, tr, budget.LimitSpec{Key: "a", Window: "1h"}, 1<<40)
	cut := T0.AddDate(0, 0, -3).Add(13 * time.Hour)       // rounded down to the day
	since, until := budget.Day(T0.AddDate(0, 0, -10)), T0 // whole days before the cut
	by := []budget.Dim{budget.DimKey, budget.DimTeam, budget.DimUser, budget.DimModel, budget.DimDay}
	before, err := tr.Report(ctx, budget.ReportQuery{Since: since, Until: until, By: by})
	if err != nil {
		t.Fatal(err)
	}
	// What a 7-day limit of team eng must hold: fixed windows align to
	// the epoch, a Thursday, so the one holding T0 starts on Thursday
	// 26 February, a UTC midnight before the horizon.
	w7, err := budget.ParseWindow("168h", "", "")
	if err != nil {
		t.Fatal(err)
	}
	week, _ := w7.Bounds(T0)
	if !week.Before(budget.Day(cut)) || !week.Equal(budget.Day(week)) {
		t.Fatalf("the 7-day window starts %v; the test needs a UTC midnight before the horizon", week)
	}
	wantWeek := int64(0)
	for _, r := range sumEvents(t, tr, week, T0, []budget.Dim{budget.DimTeam}) {
		if r.Values[0] == "eng" {
			wantWeek = r.Tokens()
		}
	}
	var old int64
	if _, err := tr.Export(ctx, since.AddDate(0, 0, -1), budget.Day(cut), "", func(budget.Usage) error { old++; return nil }); err != nil {
		t.Fatal(err)
	}
	res, err := tr.Prune(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Before.Equal(budget.Day(cut)) || res.Deleted != old || old == 0 {
		t.Fatalf("Prune = %+v; want the horizon at %v and the %d events before it deleted", res, budget.Day(cut), old)
	}
	after, err := tr.Report(ctx, budget.ReportQuery{Since: since, Until: until, By: by})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("the report changed with the prune:\nbefore %+v\nafter  %+v", before, after)
	}
	noDrift(t, tr)
	if drift, err := tr.VerifyRollups(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("VerifyRollups after the prune = %d drifted (first %+v), %v", len(drift), first(drift), err)
	}
	_, err = tr.RecordSync(ctx, ev("old", "a", "openai", "gpt-4o", 1, 0, budget.Day(cut).Add(-time.Second)))
	if !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("RecordSync of an event before the horizon = %v; want invalid input", err)
	}
	if err := tr.Record(ctx, ev("old2", "a", "openai", "gpt-4o", 1, 0, budget.Day(cut).Add(-time.Second))); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("Record of an event before the horizon = %v; want invalid input", err)
	}
	if _, err := tr.Report(ctx, budget.ReportQuery{Since: budget.Day(cut).Add(-time.Hour), Until: until}); !errors.Is(err, budget.ErrInvalid) ||
		!strings.Contains(err.Error(), "since") {
		t.Fatalf("a report whose since splits a pruned day = %v; want invalid input naming since", err)
	}
	if _, err := tr.Report(ctx, budget.ReportQuery{Since: since, Until: budget.Day(cut).Add(-time.Hour)}); !errors.Is(err, budget.ErrInvalid) ||
		!strings.Contains(err.Error(), "until") {
		t.Fatalf("a report whose until splits a pruned day = %v; want invalid input naming until", err)
	}
	// A new limit whose window starts before the horizon, not at a UTC
	// midnight, could not be seeded whole: refused.
	// (A 250-hour window, aligned to the epoch: the one holding T0 began
	// 26 February at 10:00.)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "a", Window: "250h", Max: ptr(int64(1))}); !errors.Is(err, budget.ErrInvalid) ||
		!strings.Contains(err.Error(), "window") {
		t.Fatalf("SetLimit of a window starting 26 February 10:00, before the horizon = %v; want invalid input naming window", err)
	}
	weekly := SetLimit(t, tr, budget.LimitSpec{Team: "eng", Window: "168h"}, 1<<40)
	if used, _ := Used(t, tr, budget.Request{Key: "a"}, c.Now(), weekly.ID); used != wantWeek {
		t.Fatalf("a 7-day team limit created after the prune is seeded with %d; want %d (rollups before the horizon, events after)", used, wantWeek)
	}
	if used, _ := Used(t, tr, budget.Request{Key: "a"}, c.Now(), hourly.ID); used != 0 {
		t.Fatalf("hourly limit used %d; want 0", used)
	}
	noDrift(t, tr)
	// The horizon never moves back.
	if res, err := tr.Prune(ctx, budget.Day(cut).AddDate(0, 0, -2)); err != nil || !res.Before.Equal(budget.Day(cut)) || res.Deleted != 0 {
		t.Fatalf("Prune to an earlier day = %+v, %v; want a no-op at the horizon", res, err)
	}
}

func testPruneRefusals(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	history(t, tr)
	now := T0.AddDate(0, 0, 5) // Saturday; this month began 6 days ago
	c.Set(now)
	cut := T0.AddDate(0, 0, 2)
	if _, err := tr.Prune(ctx, now); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("Prune before today = %v; want invalid (today is being written)", err)
	}
	daily := SetLimit(t, tr, budget.LimitSpec{Key: "a", Window: "daily"}, 1<<40)
	monthly := SetLimit(t, tr, budget.LimitSpec{Key: "zz", Window: "monthly"}, 1<<40)
	_, err := tr.Prune(ctx, cut)
	if !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("Prune into a live monthly window = %v; want invalid", err)
	}
	if err := tr.DeleteLimit(ctx, monthly.ID); err != nil {
		t.Fatal(err)
	}
	// The daily window started today: a cut before it is fine, but a
	// reservation of four days ago may still settle.
	c.Set(now.AddDate(0, 0, -4))
	r, err := tr.Reserve(ctx, budget.Request{Key: "c", Estimate: tokens(1)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c.Set(now)
	if _, err := tr.Prune(ctx, cut); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("Prune past an unsettled reservation %s = %v; want invalid", r.ID, err)
	}
	if err := tr.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
	if _, err := tr.Prune(ctx, cut); err != nil {
		t.Fatalf("Prune with the daily window (%s) after the cut and no open reservation = %v; want it done", daily.ID, err)
	}
}

// Definitions exported from one database and loaded into a fresh one,
// then the history exported and imported, reproduce every counter.
func testMoveDatabase(t *testing.T, newDB NewDB) {
	src, c, _ := setup(t, newDB)
	history(t, src)
	var limits []budget.Limit
	for _, s := range []budget.LimitSpec{
		{Key: "a", Window: "daily"},
		{Team: "eng", Window: "weekly", Metric: "usd"},
		{Org: "acme", Scope: "user", ScopeValue: "*", Window: "1h"},
		{Default: true, Scope: "provider", ScopeValue: "openai", Window: "monthly", Metric: "requests"},
		{Key: "c", Window: "once"},
	} {
		limits = append(limits, SetLimit(t, src, s, 1<<40))
	}
	if _, _, err := src.RaiseLimit(ctx, limits[0].ID, 5, c.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Minute)
	RecordSync(t, src, ev("after", "c", "openai", "gpt-4o", 40, 2, c.Now()))
	// Charged to no team when written, then its key joins one: the event
	// stays with no team in the new database too.
	RecordSync(t, src, ev("d-early", "d", "openai", "gpt-4o", 50, 0, c.Now()))
	setTeam(t, src, "eng", "acme", "d")
	// No price matched when written; a price covering it came later: the
	// event stays unpriced.
	RecordSync(t, src, ev("odd", "d", "openai", "odd-model", 10, 0, c.Now()))
	if _, err := src.SetPrices(ctx, budget.PriceSpec{Provider: "openai", Model: "odd-model", Input: "1", Output: "1", From: T0.AddDate(-1, 0, 0)}); err != nil {
		t.Fatal(err)
	}
	defs, err := src.Definitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dst := NewTracker(t, newDB(t)(), c, time.Second)
	if err := dst.LoadDefinitions(ctx, defs); err != nil {
		t.Fatal(err)
	}
	var evs []budget.Usage
	if _, err := src.Export(ctx, T0.AddDate(-1, 0, 0), c.Now().Add(time.Hour), "", func(u budget.Usage) error {
		evs = append(evs, u)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	RecordSync(t, dst, evs...)
	got, err := dst.Definitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, defs) {
		t.Fatalf("definitions after the move:\n%+v\nwant\n%+v", got, defs)
	}
	all := budget.ReportQuery{Since: T0.AddDate(-1, 0, 0), Until: c.Now().Add(time.Hour), By: []budget.Dim{budget.DimKey, budget.DimTeam, budget.DimModel, budget.DimDay}}
	want, err := src.Report(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	if have, err := dst.Report(ctx, all); err != nil || !reflect.DeepEqual(have, want) {
		t.Fatalf("report after the move (%v):\n%+v\nwant\n%+v", err, have, want)
	}
	for _, who := range []budget.Request{{Key: "a"}, {Key: "b", User: "alice"}, {Key: "c"}, {Key: "d"}, {Key: "x"}} {
		want, err := src.CheckAt(ctx, who, c.Now())
		if err != nil {
			t.Fatal(err)
		}
		have, err := dst.CheckAt(ctx, who, c.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(want.Limits, have.Limits, func(a, b budget.Status) bool {
			return a.Limit.ID == b.Limit.ID && a.Used == b.Used && a.Max == b.Max && a.WindowStart.Equal(b.WindowStart)
		}) {
			t.Fatalf("%+v: statuses after the move\n%+v\nwant\n%+v", who, have.Limits, want.Limits)
		}
	}
	noDrift(t, dst)
	if drift, err := dst.VerifyRollups(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("VerifyRollups after the move = %d drifted (first %+v), %v", len(drift), first(drift), err)
	}
}

func first[T any](s []T) any {
	if len(s) == 0 {
		return nil
	}
	return s[0]
}

// After a prune, a counter of a window wholly before the horizon is
// checked against the rollups when the window is whole UTC days, and
// otherwise counted not checkable, never drifted.
func testVerifyAfterPrune(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	// Its two pruned windows are whole UTC days: the rollups check them.
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1000)
	d1, d2 := budget.Day(T0).AddDate(0, 0, -9), budget.Day(T0).AddDate(0, 0, -8)
	RecordSync(t, tr, ev("e1", "k", "p", "m", 15, 0, d1.Add(90*time.Minute)), ev("e2", "k", "p", "m", 7, 0, d2.Add(2*time.Hour)))
	RecordSync(t, tr, ev("e3", "k", "p", "m", 5, 0, T0)) // the current windows keep their events
	if _, err := tr.Prune(ctx, budget.Day(T0).AddDate(0, 0, -2)); err != nil {
		t.Fatal(err)
	}
	noDrift(t, tr)
	res, err := tr.VerifyCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Drifted) != 0 || res.NotCheckable != 2 {
		t.Fatalf("VerifyCounters after the prune = %+v; want no drift and the 2 pruned hourly windows not checkable", res)
	}
}
