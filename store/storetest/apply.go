package storetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

func init() {
	extra = append(extra, suiteCase{"ApplyDefinitionsReconciles", testApplyDefinitions})
}

func mustWindow(t *testing.T, s string) budget.Window {
	t.Helper()
	w, err := budget.ParseWindow(s, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// changeLines are changes as FormatChange lines, without their JSON.
func changeLines(cs []budget.Change) string {
	var out []string
	for i := range cs {
		out = append(out, string(cs[i].Action)+" "+string(cs[i].Object)+" "+cs[i].ObjectID)
	}
	return strings.Join(out, "; ")
}

// ApplyDefinitions creates what is missing, changes what differs (a limit
// matched by identity keeps its id and counter), deletes with Prune what
// the document lacks (revoking gateway keys), writes nothing on a dry run
// or on any failure, and a second apply changes and logs nothing.
func testApplyDefinitions(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	ctx := who(budget.ActorConfig, "budget.yaml")
	doc := func(max int64, id string) budget.Definitions {
		return budget.Definitions{
			Teams: []budget.Team{{Name: "eng", Org: "acme", Keys: []string{"a"}}},
			Limits: []budget.Limit{
				{ID: id, Key: "a", Scope: budget.ScopeGlobal, Metric: budget.MetricTokens, Max: max, Window: mustWindow(t, "daily"), Enabled: true},
				{ID: "l2", Team: "eng", Scope: budget.ScopeGlobal, Metric: budget.MetricRequests, Max: 50, Window: mustWindow(t, "1h"), Enabled: true},
			},
			Prices: []budget.Price{
				{Provider: "openai", Model: "gpt-4o", From: T0, Input: 2_500_000, Output: 10_000_000, CacheRead: 2_500_000, CacheWrite: 2_500_000, Reasoning: 10_000_000},
				{Provider: "openai", Model: "gpt-4o", Tier: "flex", From: T0, Input: 1, Output: 2, CacheRead: 1, CacheWrite: 1, Reasoning: 2},
			},
		}
	}
	keys := []gatekey.Key{{Name: "a", Hash: "h1", CreatedAt: T0}}
	apply := func(d budget.Definitions, ks []gatekey.Key, o budget.ApplyOptions) []budget.Change {
		t.Helper()
		o.Also = gatekey.ApplyKeys(ks)
		cs, err := tr.ApplyDefinitions(ctx, d, o)
		if err != nil {
			t.Fatalf("ApplyDefinitions: %v", err)
		}
		return cs
	}
	got := changeLines(apply(doc(100, "l1"), keys, budget.ApplyOptions{}))
	want := "create team eng; create limit l1; create limit l2; create price openai/gpt-4o/default/0/2026-03-02T09:00:00Z; " +
		"create price openai/gpt-4o/flex/0/2026-03-02T09:00:00Z; create key a"
	if got != want {
		t.Fatalf("first apply: %s\nwant: %s", got, want)
	}
	n := len(audit(t, tr, budget.AuditFilter{}))
	if n != 6 {
		t.Fatalf("%d audit entries; want one per change", n)
	}
	if cs := apply(doc(100, "l1"), keys, budget.ApplyOptions{}); len(cs) != 0 {
		t.Fatalf("second apply changed %s", changeLines(cs))
	}
	RecordSync(t, tr, ev("r1", "a", "openai", "gpt-4o", 30, 0, T0))
	// The same identity under another id: l1 keeps its id and counter.
	if got := changeLines(apply(doc(200, "renamed"), keys, budget.ApplyOptions{})); got != "update limit l1" {
		t.Fatalf("changed max: %s; want update limit l1", got)
	}
	if used, _ := Used(t, tr, budget.Request{Key: "a"}, T0, "l1"); used != 30 {
		t.Fatalf("l1 used %d after the apply; want 30 kept", used)
	}
	// Pruning a document without l2, the flex price, the team and the key.
	small := doc(200, "l1")
	small.Limits, small.Prices, small.Teams = small.Limits[:1], small.Prices[:1], nil
	want = "delete team eng; delete limit l2; delete price openai/gpt-4o/flex/0/2026-03-02T09:00:00Z; revoke key a"
	if got := changeLines(apply(small, nil, budget.ApplyOptions{Prune: true, DryRun: true})); got != want {
		t.Fatalf("dry run: %s\nwant: %s", got, want)
	}
	if cs := apply(doc(200, "l1"), keys, budget.ApplyOptions{}); len(cs) != 0 {
		t.Fatalf("the dry run wrote: %s", changeLines(cs))
	}
	boom := errors.New("boom")
	_, err := tr.ApplyDefinitions(ctx, small, budget.ApplyOptions{Prune: true,
		Also: func(context.Context, budget.Tx, bool, time.Time) ([]budget.Change, error) { return nil, boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("a failing apply: %v; want boom", err)
	}
	if cs := apply(doc(200, "l1"), keys, budget.ApplyOptions{}); len(cs) != 0 {
		t.Fatalf("the failed apply wrote: %s", changeLines(cs))
	}
	if got := changeLines(apply(small, nil, budget.ApplyOptions{Prune: true})); got != want {
		t.Fatalf("prune: %s\nwant: %s", got, want)
	}
	ps, err := tr.ListPrices(ctx)
	if err != nil || len(ps) != 1 || ps[0].Tier != "" {
		t.Fatalf("prices after prune: %+v, %v; want the standard one", ps, err)
	}
	ls, err := tr.Limits(ctx, "")
	if err != nil || len(ls) != 1 || ls[0].ID != "l1" {
		t.Fatalf("limits after prune: %+v, %v; want l1", ls, err)
	}
	if cs := apply(small, nil, budget.ApplyOptions{Prune: true}); len(cs) != 0 {
		t.Fatalf("prune again: %s", changeLines(cs))
	}
	es := audit(t, tr, budget.AuditFilter{})
	if len(es) != n+1+4 || !slices.ContainsFunc(es, func(e budget.AuditEntry) bool {
		return e.Action == budget.AuditRevoke && e.Object == budget.ObjectKey && e.Actor.String() == "config budget.yaml"
	}) {
		t.Fatalf("%d audit entries; want %d, the key's revocation by config budget.yaml among them", len(es), n+5)
	}
}
