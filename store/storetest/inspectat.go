package storetest

import (
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra, suiteCase{"InspectBeforeCountsUpToAt", testInspectBefore})
}

// testInspectBefore: an inspect of a past instant counts the window's
// usage up to that instant (an event at it included), not the counter's
// whole window; the live Inspect keeps the counter's; a team's own limit
// is counted the same way.
func testInspectBefore(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	if _, err := tr.SetTeam(ctx, "eng", ""); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetKeyTeam(ctx, "k", "eng"); err != nil {
		t.Fatal(err)
	}
	SetLimit(t, tr, budget.LimitSpec{ID: "day", Key: "k", Window: "daily"}, 1000)
	SetLimit(t, tr, budget.LimitSpec{ID: "team", Team: "eng", Window: "daily"}, 1000)
	RecordSync(t, tr, ev("1", "k", "p", "m", 10, 0, T0.Add(time.Hour)), ev("2", "k", "p", "m", 20, 0, T0.Add(2*time.Hour)),
		ev("3", "k", "p", "m", 40, 0, T0.Add(5*time.Hour)))
	used := func(r budget.Report, id string) int64 {
		t.Helper()
		for _, st := range r.Limits {
			if st.Limit.ID == id {
				return st.Used
			}
		}
		t.Fatalf("no limit %s in %+v", id, r.Limits)
		return 0
	}
	at := T0.Add(2 * time.Hour)
	r, err := tr.InspectBefore(ctx, budget.LevelKey, "k", at, 0)
	if err != nil {
		t.Fatal(err)
	}
	if u := used(r, "day"); u != 30 {
		t.Errorf("InspectBefore(%v) used %d; want 30 (the events at 1h and 2h, not the one at 5h)", at, u)
	}
	if r, err = tr.InspectBefore(ctx, budget.LevelTeam, "eng", at.Add(-time.Nanosecond), 0); err != nil {
		t.Fatal(err)
	}
	if u := used(r, "team"); u != 10 {
		t.Errorf("InspectBefore(team eng, just before 2h) used %d; want 10", u)
	}
	if r, err = tr.Inspect(ctx, "k", at, 0); err != nil {
		t.Fatal(err)
	}
	if u := used(r, "day"); u != 70 {
		t.Errorf("Inspect(%v) used %d; want the counter's 70", at, u)
	}
}
