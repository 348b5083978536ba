package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra,
		suiteCase{"TagLimitsCountTheirTags", testTagLimits},
		suiteCase{"TagReservationsExact", testTagReserveExact},
		suiteCase{"InspectShowsEachTagValue", testInspectEachTag},
		suiteCase{"ReportByTag", testReportByTag},
	)
}

func tagged(id, key string, in int64, at time.Time, tags budget.Tags) budget.Usage {
	u := ev(id, key, "p", "m", in, 0, at)
	u.Tags = tags
	return u
}

// A limit of one tag value counts the events carrying it, a limit of each
// value a counter per value, both seeded from the history; a team's tag
// limit is shared by its keys, a default's counts per key; an untagged
// request is governed by none; a reservation's commit is charged to the
// tags it was reserved with.
func testTagLimits(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	at := T0.Add(time.Minute)
	setTeam(t, tr, "eng", "", "ka", "kb")
	RecordSync(t, tr, tagged("a0", "ka", 7, at, "project=atlas")) // before the limits: seeds their counters
	one := SetLimit(t, tr, budget.LimitSpec{Key: "ka", Scope: "tag", ScopeValue: "project=atlas", Window: "daily"}, 100)
	each := SetLimit(t, tr, budget.LimitSpec{Team: "eng", Scope: "tag", ScopeValue: "Project=*", Window: "daily"}, 1000)
	def := SetLimit(t, tr, budget.LimitSpec{Default: true, Scope: "tag", ScopeValue: "feature=*", Window: "1h"}, 500)
	if each.ScopeValue != "project=*" {
		t.Fatalf("tag limit value %q; want the name folded to project=*", each.ScopeValue)
	}
	RecordSync(t, tr,
		tagged("a1", "ka", 30, at, "project=atlas,feature=search"),
		tagged("b1", "kb", 20, at, "project=atlas"),
		tagged("b2", "kb", 5, at, "project=zeus"),
		tagged("b3", "kb", 9, at, "project=Atlas"), // values keep their case: another project
		ev("n1", "ka", "p", "m", 500, 0, at))
	check := func(key string, tags budget.Tags, id string, want int64) {
		t.Helper()
		s, ok := statusOf(t, tr, budget.Request{Key: key, Tags: tags}, at, id)
		if !ok || s.Used != want {
			t.Fatalf("limit %s for %s %q = %+v (applies %v); want used %d", id, key, tags, s, ok, want)
		}
	}
	check("ka", "project=atlas", one.ID, 37)
	check("ka", "PROJECT=atlas", one.ID, 37) // names fold
	check("ka", "project=atlas", each.ID, 57)
	check("kb", "project=atlas", each.ID, 57)
	check("kb", "project=zeus", each.ID, 5)
	check("kb", "project=Atlas", each.ID, 9)
	check("kb", "project=hera", each.ID, 0)
	check("ka", "feature=search", def.ID, 30)
	check("kb", "feature=search", def.ID, 0)
	for _, tags := range []budget.Tags{"", "feature=search", "project=zeus"} {
		if s, ok := statusOf(t, tr, budget.Request{Key: "ka", Tags: tags}, at, one.ID); ok {
			t.Fatalf("atlas's limit applies to a request tagged %q: %+v", tags, s)
		}
	}
	if s, ok := statusOf(t, tr, budget.Request{Key: "ka"}, at, each.ID); ok {
		t.Fatalf("the per-project limit applies to an untagged request: %+v", s)
	}
	var ex *budget.ExceededError
	if _, err := tr.Reserve(ctx, budget.Request{Key: "ka", Tags: "project=atlas", Estimate: tokens(64)}, time.Minute); !errors.As(err, &ex) ||
		ex.Decision.Breach.Limit.ID != one.ID {
		t.Fatalf("Reserve 64 for atlas on ka (37 of 100) = %v; want refused by atlas's limit", err)
	}
	r, err := tr.Reserve(ctx, budget.Request{Key: "kb", Tags: "feature=chat, project=zeus", Estimate: tokens(64)}, time.Hour)
	if err != nil {
		t.Fatalf("Reserve 64 for zeus = %v; want admitted", err)
	}
	if r.Tags != "feature=chat,project=zeus" {
		t.Fatalf("reservation tags %q; want them normalized", r.Tags)
	}
	if _, res := Used(t, tr, budget.Request{Key: "kb", Tags: "project=zeus"}, at, each.ID); res != 64 {
		t.Fatalf("zeus reserved %d; want 64", res)
	}
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 10}); err != nil {
		t.Fatal(err)
	}
	check("kb", "project=zeus", each.ID, 15)
	check("kb", "feature=chat", def.ID, 10)
	var got budget.Tags
	if _, err := tr.Export(ctx, T0, T0.Add(time.Hour), "kb", func(u budget.Usage) error {
		if u.RequestID == r.ID {
			got = u.Tags
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got != "feature=chat,project=zeus" {
		t.Fatalf("the commit's event has tags %q; want the reservation's", got)
	}
	res, err := tr.VerifyCounters(ctx)
	if err != nil || len(res.Drifted) != 0 {
		t.Fatalf("VerifyCounters = %+v, %v; want every tag counter equal to the history's sum", res, err)
	}
	for _, bad := range []budget.Tags{"project", "project=a,project=b", "=x", "project=", "p=a,b=c,d=e,f=g,h=i,j=k,l=m,n=o,q=r", "pro ject=a"} {
		if _, err := tr.Check(ctx, budget.Request{Key: "ka", Tags: bad}); !errors.Is(err, budget.ErrInvalid) {
			t.Errorf("Check with tags %q = %v; want ErrInvalid", bad, err)
		}
	}
	for _, bad := range []string{"project", "project=a,b", "=*", "pro ject=*"} {
		if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "ka", Scope: "tag", ScopeValue: bad, Window: "daily", Max: ptr(int64(1))}); !errors.Is(err, budget.ErrInvalid) {
			t.Errorf("SetLimit tag %q = %v; want ErrInvalid", bad, err)
		}
	}
}

// Reservations of four tag values race, from two handles, for a limit
// that counts each value: every value admits exactly what its own counter
// holds, whatever the others do; and a one-value limit beside it holds
// its value to less.
func testTagReserveExact(t *testing.T, newDB NewDB) {
	a, b, _ := twoHandles(t, newDB)
	each := SetLimit(t, a, budget.LimitSpec{Key: "k", Scope: "tag", ScopeValue: "project=*", Window: "1h"}, 1000)
	SetLimit(t, a, budget.LimitSpec{Key: "k", Scope: "tag", ScopeValue: "project=p3", Window: "1h"}, 500)
	got := reserveAll(t, a, b, 64, func(i int) (budget.Request, budget.ReserveOptions) {
		tags := budget.Tags(fmt.Sprintf("project=p%d,run=r%d", i%4, i))
		return budget.Request{Key: "k", Tags: tags, Estimate: tokens(100)}, budget.ReserveOptions{TTL: time.Minute}
	})
	per := map[string]int{}
	for _, r := range got {
		if r != nil {
			v, _ := r.Tags.Value("project")
			per[v]++
		}
	}
	want := map[string]int{"p0": 10, "p1": 10, "p2": 10, "p3": 5}
	for v, n := range want {
		if per[v] != n {
			t.Errorf("admitted %v by project; want exactly %v", per, want)
			break
		}
	}
	for v, n := range want {
		if _, res := Used(t, a, budget.Request{Key: "k", Tags: budget.Tags("project=" + v)}, a.Now(), each.ID); res != int64(n)*100 {
			t.Errorf("project %s reserved %d on the per-project limit; want %d", v, res, n*100)
		}
	}
}

// Inspect shows a per-value tag limit once per value with a counter or a
// hold in its window, and once with no value before any request used it.
func testInspectEachTag(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	each := SetLimit(t, tr, budget.LimitSpec{Key: "k", Scope: "tag", ScopeValue: "project=*", Window: "daily"}, 100)
	values := func() map[string][2]int64 {
		t.Helper()
		rep, err := tr.Inspect(ctx, "k", c.Now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][2]int64{}
		for _, s := range rep.Limits {
			if s.Limit.ID == each.ID {
				out[s.Limit.SubjectTag()] = [2]int64{s.Used, s.Reserved}
			}
		}
		return out
	}
	if got := values(); len(got) != 1 || got[""] != [2]int64{0, 0} {
		t.Fatalf("Inspect before any tag = %v; want the limit once, unused", got)
	}
	RecordSync(t, tr, tagged("x", "k", 30, c.Now(), "project=atlas"), ev("u", "k", "p", "m", 500, 0, c.Now()))
	if _, err := tr.Reserve(ctx, budget.Request{Key: "k", Tags: "project=zeus", Estimate: tokens(40)}, time.Hour); err != nil {
		t.Fatal(err)
	}
	got := values()
	if len(got) != 2 || got["project=atlas"] != [2]int64{30, 0} || got["project=zeus"] != [2]int64{0, 40} {
		t.Fatalf("Inspect = %v; want atlas's 30 used and zeus's 40 held", got)
	}
}

// A report by a tag groups the events by its value ("" for those without
// it), from the events for part of a day and from the daily rollups for
// whole days, alike.
func testReportByTag(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	at := T0.Add(time.Minute)
	RecordSync(t, tr,
		tagged("a", "k", 10, at, "project=atlas,feature=search"),
		tagged("b", "k", 20, at, "project=atlas"),
		tagged("c", "k2", 40, at, "project=zeus,feature=search"),
		ev("d", "k", "p", "m", 80, 0, at))
	day := budget.Day(T0)
	for _, q := range []budget.ReportQuery{
		{Since: T0, Until: T0.Add(time.Hour)},                        // part of a day: the events
		{Since: day, Until: day.Add(24 * time.Hour)},                 // a whole day: its rollups
		{Since: day.Add(-time.Hour), Until: day.Add(48 * time.Hour)}, // both
	} {
		q.By = []budget.Dim{budget.TagDim("project"), budget.DimKey}
		rows, err := tr.Report(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, r := range rows {
			got[r.Values[0]+"/"+r.Values[1]] = r.Input
		}
		want := map[string]int64{"/k": 80, "atlas/k": 30, "zeus/k2": 40}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("report %s..%s by tag:project,key = %v; want %v", q.Since, q.Until, got, want)
		}
		q.By = []budget.Dim{budget.TagDim("feature"), budget.TagDim("project")}
		if rows, err = tr.Report(ctx, q); err != nil {
			t.Fatal(err)
		}
		got = map[string]int64{}
		for _, r := range rows {
			got[r.Values[0]+"/"+r.Values[1]] = r.Input
		}
		want = map[string]int64{"/": 80, "/atlas": 20, "search/atlas": 10, "search/zeus": 40}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("report %s..%s by tag:feature,tag:project = %v; want %v", q.Since, q.Until, got, want)
		}
	}
}
