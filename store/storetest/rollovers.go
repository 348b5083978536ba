package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra, suiteCase{"RolloversOfPerUserDefaults", testRolloversOfPerUserDefaults})
}

// Rollovers(key) lists the key's own limits' rollovers and the default
// limits' counters for the key, per user too (subject key, SubjectSep,
// user), but not another key's whose name starts with key, nor a team
// limit's per-user counter whose user is named like the key.
func testRolloversOfPerUserDefaults(t *testing.T, newDB NewDB) {
	s := newDB(t)()
	day := budget.Window{Kind: budget.Daily, Zone: time.UTC}
	each := func(id, key, team string) budget.Limit {
		return budget.Limit{ID: id, Key: key, Team: team, Scope: budget.ScopeUser, ScopeValue: budget.AllUsers,
			Metric: budget.MetricTokens, Max: 100, Window: day, Enabled: true}
	}
	limits := []budget.Limit{each("lim_def", "", ""), each("lim_k", "k", ""), each("lim_team", "", "eng")}
	start := time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)
	roll := func(id, subject string) budget.Rollover {
		return budget.Rollover{LimitID: id, Subject: subject, WindowStart: start, PrevWindowStart: start.Add(-24 * time.Hour), PrevUsed: 1, LoggedAt: start}
	}
	err := s.Update(ctx, func(tx budget.Tx) error {
		if err := tx.PutTeam(ctx, budget.Team{Name: "eng"}); err != nil {
			return err
		}
		for _, l := range limits {
			if err := tx.InsertLimit(ctx, l, start); err != nil {
				return err
			}
		}
		_, _, err := tx.Apply(ctx, &budget.WriteSet{Rollovers: []budget.Rollover{
			roll("lim_def", "k"+budget.SubjectSep+"alice"), roll("lim_def", "k"), roll("lim_def", "kk"+budget.SubjectSep+"bob"),
			roll("lim_def", "k2"), roll("lim_k", "alice"), roll("lim_team", "k"),
		}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.View(ctx, func(tx budget.Tx) error {
		rs, err := historyRole(t, tx).Rollovers(ctx, "k", 100)
		if err != nil {
			return err
		}
		var got []string
		for _, r := range rs {
			got = append(got, r.LimitID+"/"+r.Subject)
		}
		slices.Sort(got)
		want := []string{"lim_def/k", "lim_def/k" + budget.SubjectSep + "alice", "lim_k/alice"}
		if !slices.Equal(got, want) {
			t.Errorf("Rollovers(k) = %q; want %q", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
