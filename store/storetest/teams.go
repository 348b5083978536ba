package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra,
		suiteCase{"TeamSharedByItsKeys", testTeamShared},
		suiteCase{"TeamReservationsExact", testTeamReserveExact},
		suiteCase{"OrgBindsEveryTeam", testOrgBinds},
		suiteCase{"ReservationCommitsToTheLevelsItHeld", testCommitHeldLevels},
		suiteCase{"EachUserHasOwnCounter", testEachUser},
		suiteCase{"RaiseEndsByItself", testRaiseEnds},
		suiteCase{"OnceNeverResets", testOnce},
		suiteCase{"InspectShowsEachUser", testInspectEachUser},
	)
}

func setTeam(t *testing.T, tr *budget.Tracker, team, org string, keys ...string) {
	t.Helper()
	if _, err := tr.SetTeam(ctx, team, org); err != nil {
		t.Fatalf("SetTeam(%s, %s): %v", team, org, err)
	}
	for _, k := range keys {
		if err := tr.SetKeyTeam(ctx, k, team); err != nil {
			t.Fatalf("SetKeyTeam(%s, %s): %v", k, team, err)
		}
	}
}

// A team limit counts every key of the team in one counter, seeded from
// the events charged to the team; a key that moves takes only its future
// spending along.
func testTeamShared(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	at := T0.Add(time.Minute)
	setTeam(t, tr, "eng", "", "a", "b")
	RecordSync(t, tr, ev("a1", "a", "p", "m", 10, 0, at)) // charged to eng before its limit exists
	team := SetLimit(t, tr, budget.LimitSpec{Team: "eng", Window: "daily"}, 100)
	if team.Level() != budget.LevelTeam || team.Owner() != "eng" {
		t.Fatalf("team limit = %+v; want level team, owner eng", team)
	}
	RecordSync(t, tr, ev("a2", "a", "p", "m", 20, 0, at), ev("b1", "b", "p", "m", 30, 0, at), ev("c1", "c", "p", "m", 1000, 0, at))
	for _, k := range []string{"a", "b"} {
		if used, _ := Used(t, tr, budget.Request{Key: k}, at, team.ID); used != 60 {
			t.Fatalf("team limit seen by %s used %d; want 60 (10 seeded + 20 + 30), c's events not counted", k, used)
		}
	}
	if _, ok := statusOf(t, tr, budget.Request{Key: "c"}, at, team.ID); ok {
		t.Fatal("the team limit applies to c, which is in no team")
	}
	// b moves to ops: what it spent stays with eng; what it spends now
	// goes to ops.
	setTeam(t, tr, "ops", "", "b")
	ops := SetLimit(t, tr, budget.LimitSpec{Team: "ops", Window: "daily"}, 100)
	RecordSync(t, tr, ev("b2", "b", "p", "m", 5, 0, at))
	if used, _ := Used(t, tr, budget.Request{Key: "a"}, at, team.ID); used != 60 {
		t.Fatalf("eng used %d after b moved; want 60 (b's past spending stays)", used)
	}
	if used, _ := Used(t, tr, budget.Request{Key: "b"}, at, ops.ID); used != 5 {
		t.Fatalf("ops used %d; want 5 (only what b spent since it moved)", used)
	}
	var ex *budget.ExceededError
	if _, err := tr.Reserve(ctx, budget.Request{Key: "a", Estimate: tokens(41)}, time.Minute); !errors.As(err, &ex) ||
		ex.Decision.Breach.Limit.ID != team.ID || ex.Decision.Breach.Limit.Level() != budget.LevelTeam {
		t.Fatalf("Reserve 41 for a (eng 60 of 100) = %v; want refused by the team limit, naming level team", err)
	}
	rep, err := tr.InspectOwned(ctx, budget.LevelTeam, "eng", at, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Limits) != 1 || rep.Limits[0].Limit.ID != team.ID || rep.Limits[0].Used != 60 {
		t.Fatalf("InspectOwned(team eng) = %+v; want eng's limit alone, used 60", rep.Limits)
	}
	if _, err := tr.InspectOwned(ctx, budget.LevelTeam, "nope", at, 10); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("InspectOwned(unknown team) = %v; want invalid input", err)
	}
	noDrift(t, tr)
}

// Two processes reserve for two keys of one team: the team limit admits
// exactly floor(limit/estimate), and each key's own limit holds too.
func testTeamReserveExact(t *testing.T, newDB NewDB) {
	a, b, _ := twoHandles(t, newDB)
	setTeam(t, a, "eng", "", "ka", "kb")
	team := SetLimit(t, a, budget.LimitSpec{Team: "eng", Window: "1h"}, 1000)
	own := SetLimit(t, a, budget.LimitSpec{Key: "ka", Window: "1h"}, 300)
	got := reserveAll(t, a, b, 80, func(i int) (budget.Request, budget.ReserveOptions) {
		k := "ka"
		if i%4 >= 2 {
			k = "kb"
		}
		return budget.Request{Key: k, Estimate: tokens(100)}, budget.ReserveOptions{TTL: time.Minute}
	})
	var total, ka int
	for _, r := range got {
		if r == nil {
			continue
		}
		total++
		if r.Key == "ka" {
			ka++
		}
		if r.Team != "eng" {
			t.Fatalf("reservation %s charged to team %q; want eng", r.ID, r.Team)
		}
	}
	if total != 10 || ka > 3 {
		t.Fatalf("admitted %d (%d for ka); want exactly 10, at most 3 for ka", total, ka)
	}
	if _, res := Used(t, a, budget.Request{Key: "kb"}, a.Now(), team.ID); res != 1000 {
		t.Fatalf("team reserved %d; want 1000", res)
	}
	if _, res := Used(t, a, budget.Request{Key: "ka"}, a.Now(), own.ID); res != int64(ka)*100 {
		t.Fatalf("ka's own limit reserved %d; want %d", res, ka*100)
	}
	for _, r := range got {
		if r != nil {
			if _, err := b.Commit(ctx, r.ID, budget.Usage{Input: 60, Output: 40}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if used, res := Used(t, b, budget.Request{Key: "ka"}, b.Now(), team.ID); used != 1000 || res != 0 {
		t.Fatalf("team after the commits used/reserved %d/%d; want 1000/0", used, res)
	}
	noDrift(t, a)
}

// An org limit binds the keys of all its teams; the refusal names it.
func testOrgBinds(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	at := T0.Add(time.Minute)
	setTeam(t, tr, "eng", "acme", "a")
	setTeam(t, tr, "ops", "acme", "b")
	setTeam(t, tr, "lab", "other", "c")
	org := SetLimit(t, tr, budget.LimitSpec{Org: "acme", Window: "daily"}, 100)
	RecordSync(t, tr, ev("a1", "a", "p", "m", 40, 0, at), ev("b1", "b", "p", "m", 50, 0, at), ev("c1", "c", "p", "m", 500, 0, at))
	var ex *budget.ExceededError
	_, err := tr.Reserve(ctx, budget.Request{Key: "b", Estimate: tokens(11)}, time.Minute)
	if !errors.As(err, &ex) || ex.Decision.Breach.Limit.ID != org.ID || ex.Decision.Breach.Limit.Level() != budget.LevelOrg ||
		ex.Decision.Breach.Limit.Owner() != "acme" || ex.Decision.Breach.Used != 90 {
		t.Fatalf("Reserve 11 for b (acme 90 of 100) = %v; want refused by org acme's limit", err)
	}
	if _, err := tr.Reserve(ctx, budget.Request{Key: "c", Estimate: tokens(11)}, time.Minute); err != nil {
		t.Fatalf("Reserve for c (org other) = %v; want admitted: acme's limit does not bind it", err)
	}
	if teams, err := tr.Teams(ctx); err != nil || len(teams) != 3 || teams[0].Name != "eng" || teams[0].Org != "acme" || len(teams[0].Keys) != 1 || teams[0].Keys[0] != "a" {
		t.Fatalf("Teams = %+v, %v; want eng (acme, [a]), lab, ops", teams, err)
	}
	// A team and an org may not share a name.
	if _, err := tr.SetTeam(ctx, "acme", ""); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("SetTeam(acme) = %v; want invalid: acme is an org", err)
	}
	if _, err := tr.SetTeam(ctx, "same", "same"); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("SetTeam(same, org same) = %v; want invalid: a team and an org may not share a name", err)
	}
	if _, err := tr.SetTeam(ctx, "x", "eng"); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("SetTeam(x, org eng) = %v; want invalid: eng is a team", err)
	}
	if err := tr.SetKeyTeam(ctx, "d", "nope"); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("SetKeyTeam(d, unknown team) = %v; want invalid", err)
	}
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Org: "nope", Window: "daily", Max: ptr(int64(1))}); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("SetLimit(org nope) = %v; want invalid: unknown org", err)
	}
	if err := tr.DeleteTeam(ctx, "eng"); err != nil {
		t.Fatalf("DeleteTeam(eng, no limits) = %v", err)
	}
	if _, ok := statusOf(t, tr, budget.Request{Key: "a"}, at, org.ID); ok {
		t.Fatal("org acme's limit still applies to a after its team was removed")
	}
	noDrift(t, tr)
}

// A reservation commits to the levels it held, wherever its key is by then.
func testCommitHeldLevels(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	at := T0.Add(time.Minute)
	setTeam(t, tr, "eng", "", "a")
	setTeam(t, tr, "ops", "")
	eng := SetLimit(t, tr, budget.LimitSpec{Team: "eng", Window: "daily"}, 1000)
	ops := SetLimit(t, tr, budget.LimitSpec{Team: "ops", Window: "daily"}, 1000)
	r, err := tr.Reserve(ctx, budget.Request{Key: "a", User: "u1", Estimate: tokens(100)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	setTeam(t, tr, "ops", "", "a")
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 70}); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetKeyTeam(ctx, "a", "eng"); err != nil {
		t.Fatal(err)
	}
	if used, res := Used(t, tr, budget.Request{Key: "a"}, at, eng.ID); used != 70 || res != 0 {
		t.Fatalf("eng used/reserved %d/%d; want 70/0: the commit goes where the reservation held", used, res)
	}
	if err := tr.SetKeyTeam(ctx, "a", "ops"); err != nil {
		t.Fatal(err)
	}
	if used, _ := Used(t, tr, budget.Request{Key: "a"}, at, ops.ID); used != 0 {
		t.Fatalf("ops used %d; want 0", used)
	}
	noDrift(t, tr)
}

// '*' gives each end user a counter of their own, seeded from that user's
// history; a named user's limit counts that user only; requests with no
// user are not bound by either.
func testEachUser(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	at := T0.Add(time.Minute)
	alice := func(id string, in int64) budget.Usage {
		u := ev(id, "k", "p", "m", in, 0, at)
		u.User = "alice"
		return u
	}
	RecordSync(t, tr, alice("a0", 7)) // before the limit exists: seeds alice's counter
	each := SetLimit(t, tr, budget.LimitSpec{Key: "k", Scope: "user", ScopeValue: "*", Window: "daily"}, 100)
	named := SetLimit(t, tr, budget.LimitSpec{Key: "k", Scope: "user", ScopeValue: "bob", Window: "daily"}, 50)
	// (Another window than k's own: a key's own limit of the same shape
	// would replace the default.)
	def := SetLimit(t, tr, budget.LimitSpec{Default: true, Scope: "user", ScopeValue: "*", Window: "1h"}, 1000)
	bob := alice("b1", 20)
	bob.User = "bob"
	RecordSync(t, tr, alice("a1", 30), bob, ev("n1", "k", "p", "m", 500, 0, at))
	check := func(user, id string, want int64) {
		t.Helper()
		s, ok := statusOf(t, tr, budget.Request{Key: "k", User: user}, at, id)
		if !ok || s.Used != want {
			t.Fatalf("limit %s for user %q = %+v (applies %v); want used %d", id, user, s, ok, want)
		}
	}
	check("alice", each.ID, 37)
	check("bob", each.ID, 20)
	check("carol", each.ID, 0)
	check("bob", named.ID, 20)
	check("alice", def.ID, 37)
	if _, ok := statusOf(t, tr, budget.Request{Key: "k"}, at, each.ID); ok {
		t.Fatal("the per-user limit applies to a request with no user")
	}
	if _, ok := statusOf(t, tr, budget.Request{Key: "k", User: "alice"}, at, named.ID); ok {
		t.Fatal("bob's limit applies to alice")
	}
	var ex *budget.ExceededError
	if _, err := tr.Reserve(ctx, budget.Request{Key: "k", User: "alice", Estimate: tokens(64)}, time.Minute); !errors.As(err, &ex) ||
		ex.Decision.Breach.Limit.ID != each.ID || ex.Decision.Breach.Limit.Subject != "alice" {
		t.Fatalf("Reserve 64 for alice (37 of 100) = %v; want refused by her own counter", err)
	}
	r, err := tr.Reserve(ctx, budget.Request{Key: "k", User: "carol", Estimate: tokens(64)}, time.Minute)
	if err != nil {
		t.Fatalf("Reserve 64 for carol = %v; want admitted (her counter is empty)", err)
	}
	if r.User != "carol" {
		t.Fatalf("reservation user %q; want carol", r.User)
	}
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 64}); err != nil {
		t.Fatal(err)
	}
	check("carol", each.ID, 64)
	check("alice", each.ID, 37)
	rep, err := tr.Inspect(ctx, "k", at, 0)
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]int64{}
	for _, s := range rep.Limits {
		if s.Limit.ID == each.ID {
			users[s.Limit.Subject] = s.Used
		}
	}
	if len(users) != 3 || users["alice"] != 37 || users["bob"] != 20 || users["carol"] != 64 {
		t.Fatalf("Inspect shows the per-user limit as %v; want alice 37, bob 20, carol 64", users)
	}
	noDrift(t, tr)
}

// A raise with an end stops counting at that instant in every process; one
// without stays.
func testRaiseEnds(t *testing.T, newDB NewDB) {
	a, b, c := twoHandles(t, newDB)
	l := SetLimit(t, a, budget.LimitSpec{Key: "k", Window: "daily"}, 100)
	RecordSync(t, a, ev("e1", "k", "p", "m", 90, 0, T0))
	until := T0.Add(time.Hour)
	got, r, err := a.RaiseLimit(ctx, l.ID, 50, until)
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxAt(T0) != 150 || got.Max != 100 || !r.Until.Equal(until) {
		t.Fatalf("RaiseLimit = %+v, %+v; want effective 150, base 100, until %v", got, r, until)
	}
	c.Advance(2 * time.Second) // past b's refresh interval
	s, _ := statusOf(t, b, budget.Request{Key: "k"}, c.Now(), l.ID)
	if s.Max != 150 || s.Limit.Max != 100 {
		t.Fatalf("the other process sees limit %d (base %d); want 150 (100)", s.Max, s.Limit.Max)
	}
	if _, err := b.Reserve(ctx, budget.Request{Key: "k", Estimate: tokens(60)}, 3*time.Hour); err != nil {
		t.Fatalf("Reserve 60 (90 of 150 used) = %v; want admitted under the raise", err)
	}
	c.Set(until)
	var ex *budget.ExceededError
	if _, err := b.Reserve(ctx, budget.Request{Key: "k", Estimate: tokens(5)}, time.Minute); !errors.As(err, &ex) || ex.Decision.Breach.Max != 100 {
		t.Fatalf("Reserve 5 at the raise's end = %v; want refused by the limit of 100 again", err)
	}
	if _, _, err := a.RaiseLimit(ctx, l.ID, 1000, time.Time{}); err != nil {
		t.Fatal(err)
	}
	c.Advance(24 * time.Hour)
	if s, _ := statusOf(t, a, budget.Request{Key: "k"}, c.Now(), l.ID); s.Max != 1100 {
		t.Fatalf("a day later the limit is %d; want 1100: a raise without an end stays", s.Max)
	}
	if _, _, err := a.RaiseLimit(ctx, "lim_nope", 1, time.Time{}); !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("RaiseLimit(unknown) = %v; want not found", err)
	}
	if _, _, err := a.RaiseLimit(ctx, l.ID, 1, T0); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("RaiseLimit(until in the past) = %v; want invalid", err)
	}
}

// A once window never resets: a prepaid balance, topped up by raises.
func testOnce(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	RecordSync(t, tr, ev("old", "k", "p", "m", 500, 0, T0.Add(-time.Hour))) // before the balance
	c.Advance(time.Minute)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "once"}, 100)
	if l.Window.Kind != budget.Once || !l.Window.Anchor.Equal(c.Now()) {
		t.Fatalf("once limit = %+v; want a once window anchored at its creation %v", l.Window, c.Now())
	}
	RecordSync(t, tr, ev("e1", "k", "p", "m", 60, 0, c.Now()))
	// An event dated before the balance existed (a late import) is not
	// the balance's to count.
	RecordSync(t, tr, ev("e0", "k", "p", "m", 1000, 0, T0))
	c.Advance(40 * 24 * time.Hour)
	RecordSync(t, tr, ev("e2", "k", "p", "m", 30, 0, c.Now()))
	s, ok := statusOf(t, tr, budget.Request{Key: "k"}, c.Now(), l.ID)
	if !ok || s.Used != 90 || !s.ResetAt.Equal(budget.Forever) || !s.WindowStart.Equal(l.Window.Anchor) {
		t.Fatalf("once status 40 days on = %+v; want used 90 since its creation, never resetting", s)
	}
	var ex *budget.ExceededError
	if _, err := tr.Reserve(ctx, budget.Request{Key: "k", Estimate: tokens(20)}, time.Minute); !errors.As(err, &ex) || ex.Decision.Breach.Retryable {
		t.Fatalf("Reserve 20 (90 of 100) = %v; want refused, not retryable", err)
	}
	if _, _, err := tr.RaiseLimit(ctx, l.ID, 100, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Reserve(ctx, budget.Request{Key: "k", Estimate: tokens(20)}, time.Minute); err != nil {
		t.Fatalf("Reserve 20 after a top-up of 100 = %v; want admitted", err)
	}
	noDrift(t, tr)
}

// Inspect shows a per-user limit once per user with a counter or a hold
// in its window, and once with no user (unused) before anyone used it.
func testInspectEachUser(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	RecordSync(t, tr, ev("x", "k", "p", "m", 500, 0, c.Now())) // no user: not the per-user limit's
	each := SetLimit(t, tr, budget.LimitSpec{Key: "k", Scope: "user", ScopeValue: "*", Window: "daily"}, 100)
	leases := SetLimit(t, tr, budget.LimitSpec{Key: "k", Scope: "user", ScopeValue: "*", Metric: "concurrent"}, 5)
	users := func() map[string][2]int64 {
		t.Helper()
		rep, err := tr.Inspect(ctx, "k", c.Now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][2]int64{}
		for i, s := range rep.Limits {
			if s.Limit.ID == each.ID || s.Limit.ID == leases.ID {
				out[s.Limit.ID+"/"+s.Limit.Subject] = [2]int64{s.Used, s.Reserved}
				if s.Limit.Subject == "" && rep.Forecasts[i] != nil {
					t.Errorf("the unused per-user limit has a forecast %+v", rep.Forecasts[i])
				}
			}
		}
		return out
	}
	if got := users(); len(got) != 2 || got[each.ID+"/"] != [2]int64{0, 0} || got[leases.ID+"/"] != [2]int64{0, 0} {
		t.Fatalf("Inspect before any user = %v; want each limit once, unused", got)
	}
	if _, err := tr.Reserve(ctx, budget.Request{Key: "k", User: "carol", Estimate: tokens(40)}, time.Hour); err != nil {
		t.Fatal(err)
	}
	got := users()
	if len(got) != 2 || got[each.ID+"/carol"] != [2]int64{0, 40} || got[leases.ID+"/carol"] != [2]int64{1, 0} {
		t.Fatalf("Inspect after carol's reservation = %v; want carol's hold and lease", got)
	}
}
