package budget_test

import (
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
)

// One rule for what an admin scope reaches: a team scope its team's keys
// and limits (not its org's, not the team itself to change), an org scope
// its teams' and its own, a global one everything; read-only changes
// nothing; prices are seen by all and changed by global scopes; admin
// tokens are global only.
func TestAdminScopeReaches(t *testing.T) {
	t.Parallel()
	eng, ops, org, none := budget.Placed{Team: "eng", Org: "acme"}, budget.Placed{Team: "ops", Org: "acme"}, budget.Placed{Org: "acme"}, budget.Placed{}
	team, orgScope, global, ro := budget.AdminScope{Team: "eng"}, budget.AdminScope{Org: "acme"}, budget.AdminScope{}, budget.AdminScope{Team: "eng", ReadOnly: true}
	for _, c := range []struct {
		name        string
		s           budget.AdminScope
		kind        budget.ObjectKind
		p           budget.Placed
		see, change bool
	}{
		{"team: its key", team, budget.ObjectKey, eng, true, true},
		{"team: its limit", team, budget.ObjectLimit, eng, true, true},
		{"team: another team's key", team, budget.ObjectKey, ops, false, false},
		{"team: its org's limit", team, budget.ObjectLimit, org, false, false},
		{"team: a default limit", team, budget.ObjectLimit, none, false, false},
		{"team: itself", team, budget.ObjectTeam, eng, true, false},
		{"team: prices", team, budget.ObjectPrice, none, true, false},
		{"team: admin tokens", team, budget.ObjectAdminToken, none, false, false},
		{"org: a team's key", orgScope, budget.ObjectKey, ops, true, true},
		{"org: its limit", orgScope, budget.ObjectLimit, org, true, true},
		{"org: a team", orgScope, budget.ObjectTeam, eng, true, true},
		{"org: another org's", orgScope, budget.ObjectKey, budget.Placed{Team: "x", Org: "other"}, false, false},
		{"org: a key in no team", orgScope, budget.ObjectKey, none, false, false},
		{"global: a default limit", global, budget.ObjectLimit, none, true, true},
		{"global: admin tokens", global, budget.ObjectAdminToken, none, true, true},
		{"global: prices", global, budget.ObjectPrice, none, true, true},
		{"read-only: its key", ro, budget.ObjectKey, eng, true, false},
	} {
		if got := c.s.MaySee(c.kind, c.p); got != c.see {
			t.Errorf("%s: MaySee = %v; want %v", c.name, got, c.see)
		}
		if got := c.s.MayChange(c.kind, c.p); got != c.change {
			t.Errorf("%s: MayChange = %v; want %v", c.name, got, c.change)
		}
	}
	if err := (budget.AdminScope{Team: "eng", Org: "acme"}).Validate(); err == nil {
		t.Error("a scope of a team and an org validated")
	}
	if got := ro.String(); got != "team eng (read-only)" {
		t.Errorf("String = %q", got)
	}
}

func TestActorString(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a    budget.Actor
		want string
	}{
		{budget.Actor{Kind: budget.ActorToken, Name: "eng-lead"}, "eng-lead"},
		{budget.Actor{Kind: budget.ActorAdmin}, "admin"},
		{budget.Actor{Kind: budget.ActorCLI, Name: "alice"}, "cli:alice"},
		{budget.Actor{Kind: budget.ActorConfig, Name: "budget.yaml"}, "config budget.yaml"},
		{budget.ActorFrom(t.Context()), "library"},
		{budget.ActorFrom(budget.WithActor(t.Context(), budget.Actor{Kind: budget.ActorCLI, Name: "bob"})), "cli:bob"},
	} {
		if got := c.a.String(); got != c.want {
			t.Errorf("%+v: %q; want %q", c.a, got, c.want)
		}
	}
}
