package storetest

import (
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra, suiteCase{"ModelNamesNormalisedAndPatterns", testModelNames})
}

// Every spelling of a model counts against its limit, a pattern limit
// shares one counter among the models it matches (seeded from the history
// like any other), and gpt-4o-mini is not gpt-4o.
func testModelNames(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	exact := SetLimit(t, tr, budget.LimitSpec{Key: "k", Scope: "model", ScopeValue: "GPT-4o-2024-08-06", Window: "daily"}, 1<<40)
	if exact.ScopeValue != "gpt-4o" {
		t.Fatalf("stored model value %q; want the normalised gpt-4o", exact.ScopeValue)
	}
	at := T0.Add(time.Minute)
	for i, m := range []string{"gpt-4o", "gpt-4o-2024-08-06", "GPT-4o", "openai/gpt-4o", "gpt-4o-latest", "gpt-4o-mini", "gpt-4"} {
		RecordSync(t, tr, ev(string(rune('a'+i)), "k", "openai", m, 10, 0, at))
	}
	if u, _ := Used(t, tr, budget.Request{Key: "k", Model: "OpenAI/GPT-4o"}, at, exact.ID); u != 50 {
		t.Fatalf("gpt-4o used %d; want 50 (five spellings of gpt-4o, not mini, not gpt-4)", u)
	}
	d, err := tr.CheckAt(ctx, budget.Request{Key: "k", Model: "gpt-4o-mini"}, at)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Limits) != 0 {
		t.Fatalf("gpt-4o-mini matched %v; want no limit", d.Limits)
	}
	// A pattern created afterwards is seeded from the history it matches.
	pat := SetLimit(t, tr, budget.LimitSpec{Key: "k", Scope: "model", ScopeValue: "gpt-4o*", Window: "daily"}, 1<<40)
	if u, _ := Used(t, tr, budget.Request{Key: "k", Model: "gpt-4o-mini"}, at, pat.ID); u != 60 {
		t.Fatalf("gpt-4o* seeded %d; want 60 (gpt-4o five times and gpt-4o-mini)", u)
	}
	RecordSync(t, tr, ev("h", "k", "openai", "gpt-4o-mini-2024-07-18", 5, 0, at), ev("i", "k", "openai", "gpt-4o", 1, 0, at))
	for _, m := range []string{"gpt-4o", "gpt-4o-mini"} {
		if u, _ := Used(t, tr, budget.Request{Key: "k", Model: m}, at, pat.ID); u != 66 {
			t.Fatalf("gpt-4o* seen from %s: used %d; want 66, one counter for both", m, u)
		}
	}
	cl := SetLimit(t, tr, budget.LimitSpec{Key: "k", Scope: "model", ScopeValue: "claude-*-4-5", Window: "daily"}, 1<<40)
	RecordSync(t, tr, ev("j", "k", "anthropic", "claude-sonnet-4-5-20250929", 3, 0, at),
		ev("l", "k", "anthropic", "claude-opus-4-5", 4, 0, at), ev("m", "k", "anthropic", "claude-sonnet-4", 100, 0, at))
	if u, _ := Used(t, tr, budget.Request{Key: "k", Model: "claude-opus-4-5"}, at, cl.ID); u != 7 {
		t.Fatalf("claude-*-4-5 used %d; want 7", u)
	}
	noDrift(t, tr)
}
