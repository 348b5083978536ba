package budget_test

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func fixed(d time.Duration) budget.Window { return budget.Window{Kind: budget.Fixed, Length: d} }

func TestParseScope(t *testing.T) {
	tests := []struct {
		in   string
		want budget.Scope
	}{
		{"", budget.ScopeGlobal},
		{"global", budget.ScopeGlobal},
		{" global ", budget.ScopeGlobal},
		{"provider", budget.ScopeProvider},
		{"model", budget.ScopeModel},
	}
	for _, tt := range tests {
		if got, err := budget.ParseScope(tt.in); err != nil || got != tt.want {
			t.Errorf("ParseScope(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"org", "Global", "models", "provider=openai"} {
		_, err := budget.ParseScope(in)
		wantInvalid(t, "ParseScope("+in+")", err, "scope", in)
	}
}

func TestParseMetric(t *testing.T) {
	tests := []struct {
		in   string
		want budget.Metric
	}{
		{"", budget.MetricTokens},
		{"tokens", budget.MetricTokens},
		{" tokens", budget.MetricTokens},
		{"input", budget.MetricInput},
		{"output", budget.MetricOutput},
		{"requests", budget.MetricRequests},
		{"concurrent", budget.MetricConcurrent},
	}
	for _, tt := range tests {
		if got, err := budget.ParseMetric(tt.in); err != nil || got != tt.want {
			t.Errorf("ParseMetric(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"cost", "token", "Tokens", "reasoning", "cache_read"} {
		_, err := budget.ParseMetric(in)
		wantInvalid(t, "ParseMetric("+in+")", err, "metric", in)
	}
}

func TestLimitValidate(t *testing.T) {
	daily := budget.Window{Kind: budget.Daily, Zone: time.UTC}
	berlin, err := budget.LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   budget.Limit
		want budget.Limit
	}{
		{"global tokens",
			budget.Limit{ID: "l1", Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricTokens, Max: 1000, Window: fixed(time.Hour), Enabled: true},
			budget.Limit{ID: "l1", Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricTokens, Max: 1000, Window: fixed(time.Hour), Enabled: true}},
		{"defaults: scope global, metric tokens",
			budget.Limit{Key: "k", Max: 1, Window: daily},
			budget.Limit{Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricTokens, Max: 1, Window: daily}},
		{"names trimmed",
			budget.Limit{ID: " l1 ", Key: "\tk ", Scope: " provider ", ScopeValue: " openai ", Metric: " input ", Max: 5, Window: daily},
			budget.Limit{ID: "l1", Key: "k", Scope: budget.ScopeProvider, ScopeValue: "openai", Metric: budget.MetricInput, Max: 5, Window: daily}},
		{"model scope",
			budget.Limit{Key: "k", Scope: budget.ScopeModel, ScopeValue: "gpt-4o", Metric: budget.MetricOutput, Max: 5, Window: fixed(5 * time.Hour)},
			budget.Limit{Key: "k", Scope: budget.ScopeModel, ScopeValue: "gpt-4o", Metric: budget.MetricOutput, Max: 5, Window: fixed(5 * time.Hour)}},
		{"requests",
			budget.Limit{Key: "k", Metric: budget.MetricRequests, Max: 60, Window: fixed(time.Minute)},
			budget.Limit{Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricRequests, Max: 60, Window: fixed(time.Minute)}},
		{"concurrent takes no window",
			budget.Limit{Key: "k", Metric: budget.MetricConcurrent, Max: 4},
			budget.Limit{Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricConcurrent, Max: 4}},
		{"calendar window without a zone gets UTC",
			budget.Limit{Key: "k", Max: 5, Window: budget.Window{Kind: budget.Weekly, ResetTime: 570}},
			budget.Limit{Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricTokens, Max: 5, Window: budget.Window{Kind: budget.Weekly, ResetTime: 570, Zone: time.UTC}}},
		{"calendar window keeps its zone",
			budget.Limit{Key: "k", Max: 5, Window: budget.Window{Kind: budget.Monthly, Zone: berlin}},
			budget.Limit{Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricTokens, Max: 5, Window: budget.Window{Kind: budget.Monthly, Zone: berlin}}},
		{"largest limit",
			budget.Limit{Key: "k", Max: budget.MaxTokens, Window: daily},
			budget.Limit{Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricTokens, Max: budget.MaxTokens, Window: daily}},
		{"disabled limits validate too",
			budget.Limit{Key: "k", Max: 1, Window: fixed(time.Second), Enabled: false},
			budget.Limit{Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricTokens, Max: 1, Window: fixed(time.Second)}},
	}
	for _, tt := range tests {
		got, err := tt.in.Validate()
		if err != nil {
			t.Errorf("%s: Validate: %v", tt.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Validate = %+v; want %+v", tt.name, got, tt.want)
		}
	}
}

func TestLimitValidateInvalid(t *testing.T) {
	ok := budget.Limit{ID: "l1", Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricTokens, Max: 100, Window: fixed(time.Hour), Enabled: true}
	with := func(f func(*budget.Limit)) budget.Limit { l := ok; f(&l); return l }
	tests := []struct {
		name         string
		in           budget.Limit
		field, value string
	}{
		{"long key", with(func(l *budget.Limit) { l.Key = strings.Repeat("k", 257) }), "key", strings.Repeat("k", 64) + "..."},
		{"unknown scope", with(func(l *budget.Limit) { l.Scope = "org" }), "scope", "org"},
		{"scope value with global", with(func(l *budget.Limit) { l.ScopeValue = "openai" }), "value", "openai"},
		{"scope value with default scope", with(func(l *budget.Limit) { l.Scope, l.ScopeValue = "", "openai" }), "value", "openai"},
		{"provider without a value", with(func(l *budget.Limit) { l.Scope = budget.ScopeProvider }), "value", ""},
		{"model without a value", with(func(l *budget.Limit) { l.Scope = budget.ScopeModel }), "value", ""},
		{"model with a blank value", with(func(l *budget.Limit) { l.Scope, l.ScopeValue = budget.ScopeModel, "   " }), "value", ""},
		{"unknown metric", with(func(l *budget.Limit) { l.Metric = "cost" }), "metric", "cost"},
		{"limit 0", with(func(l *budget.Limit) { l.Max = 0 }), "limit", "0"},
		{"negative limit", with(func(l *budget.Limit) { l.Max = -1 }), "limit", "-1"},
		{"limit past 2^53-1", with(func(l *budget.Limit) { l.Max = budget.MaxTokens + 1 }), "limit", "9007199254740992"},
		{"concurrent with a fixed window", with(func(l *budget.Limit) { l.Metric = budget.MetricConcurrent }), "window", "1h"},
		{"concurrent with a calendar window", with(func(l *budget.Limit) {
			l.Metric, l.Window = budget.MetricConcurrent, budget.Window{Kind: budget.Daily, Zone: time.UTC}
		}), "window", "daily"},
		{"tokens without a window", with(func(l *budget.Limit) { l.Window = budget.Window{} }), "window", ""},
		{"requests without a window", with(func(l *budget.Limit) { l.Metric, l.Window = budget.MetricRequests, budget.Window{} }), "window", ""},
		{"input without a window", with(func(l *budget.Limit) { l.Metric, l.Window = budget.MetricInput, budget.Window{} }), "window", ""},
		{"fixed window of 1.5s", with(func(l *budget.Limit) { l.Window = fixed(1500 * time.Millisecond) }), "window", "1.5s"},
		{"fixed window of 0", with(func(l *budget.Limit) { l.Window = fixed(0) }), "window", "0s"},
		{"negative fixed window", with(func(l *budget.Limit) { l.Window = fixed(-time.Hour) }), "window", "-1h0m0s"},
	}
	for _, tt := range tests {
		_, err := tt.in.Validate()
		wantInvalid(t, tt.name+": Validate", err, tt.field, tt.value)
	}
}

func TestLimitApplies(t *testing.T) {
	global := budget.Limit{Key: "team-a", Scope: budget.ScopeGlobal}
	prov := budget.Limit{Key: "team-a", Scope: budget.ScopeProvider, ScopeValue: "openai"}
	model := budget.Limit{Key: "team-a", Scope: budget.ScopeModel, ScopeValue: "gpt-4o"}
	disabled := budget.Limit{Key: "team-a", Scope: budget.ScopeGlobal, Enabled: false}
	team := budget.Limit{Team: "eng", Scope: budget.ScopeGlobal}
	org := budget.Limit{Org: "acme", Scope: budget.ScopeGlobal}
	def := budget.Limit{Scope: budget.ScopeGlobal, Subject: "k1"} // as Effective applies it to k1
	alice := budget.Limit{Key: "team-a", Scope: budget.ScopeUser, ScopeValue: "alice"}
	each := budget.Limit{Key: "team-a", Scope: budget.ScopeUser, ScopeValue: budget.AllUsers}
	tests := []struct {
		name            string
		l               budget.Limit
		who             budget.Who
		provider, model string
		want            bool
	}{
		{"global, same key", global, budget.Who{Key: "team-a"}, "openai", "gpt-4o", true},
		{"global, any provider", global, budget.Who{Key: "team-a"}, "anthropic", "claude", true},
		{"global, no provider or model", global, budget.Who{Key: "team-a"}, "", "", true},
		{"global, other key", global, budget.Who{Key: "team-b"}, "openai", "gpt-4o", false},
		{"global, key is case-sensitive", global, budget.Who{Key: "Team-A"}, "openai", "gpt-4o", false},
		{"provider matches", prov, budget.Who{Key: "team-a"}, "openai", "gpt-4o", true},
		{"provider matches any model", prov, budget.Who{Key: "team-a"}, "openai", "o3", true},
		{"other provider", prov, budget.Who{Key: "team-a"}, "anthropic", "gpt-4o", false},
		{"provider name in the model", prov, budget.Who{Key: "team-a"}, "azure", "openai", false},
		{"provider of another key", prov, budget.Who{Key: "team-b"}, "openai", "gpt-4o", false},
		{"provider is case-sensitive", prov, budget.Who{Key: "team-a"}, "OpenAI", "gpt-4o", false},
		{"model matches", model, budget.Who{Key: "team-a"}, "openai", "gpt-4o", true},
		{"model matches any provider", model, budget.Who{Key: "team-a"}, "azure", "gpt-4o", true},
		{"other model", model, budget.Who{Key: "team-a"}, "openai", "gpt-4o-mini", false},
		{"model name in the provider", model, budget.Who{Key: "team-a"}, "gpt-4o", "o3", false},
		{"model of another key", model, budget.Who{Key: "team-b"}, "openai", "gpt-4o", false},
		{"Applies ignores Enabled", disabled, budget.Who{Key: "team-a"}, "openai", "gpt-4o", true},
		{"team limit, key of the team", team, budget.Who{Key: "k1", Team: "eng", Org: "acme"}, "openai", "gpt-4o", true},
		{"team limit, key of another team", team, budget.Who{Key: "k1", Team: "ops", Org: "acme"}, "openai", "gpt-4o", false},
		{"team limit, key in no team", team, budget.Who{Key: "eng"}, "openai", "gpt-4o", false},
		{"org limit, key of a team in it", org, budget.Who{Key: "k1", Team: "ops", Org: "acme"}, "openai", "gpt-4o", true},
		{"org limit, key of another org", org, budget.Who{Key: "k1", Team: "ops", Org: "other"}, "openai", "gpt-4o", false},
		{"default applied to the key", def, budget.Who{Key: "k1"}, "openai", "gpt-4o", true},
		{"default applied to another key", def, budget.Who{Key: "k2"}, "openai", "gpt-4o", false},
		{"one user, that user", alice, budget.Who{Key: "team-a", User: "alice"}, "openai", "gpt-4o", true},
		{"one user, another user", alice, budget.Who{Key: "team-a", User: "bob"}, "openai", "gpt-4o", false},
		{"one user, no user", alice, budget.Who{Key: "team-a"}, "openai", "gpt-4o", false},
		{"each user, any user", each, budget.Who{Key: "team-a", User: "bob"}, "openai", "gpt-4o", true},
		{"each user, no user", each, budget.Who{Key: "team-a"}, "openai", "gpt-4o", false},
	}
	for _, tt := range tests {
		if got := tt.l.Applies(&tt.who, tt.provider, tt.model); got != tt.want {
			t.Errorf("%s: %s Applies(%+v, %q, %q) = %v; want %v", tt.name, tt.l.ScopeString(), tt.who, tt.provider, tt.model, got, tt.want)
		}
	}
}

func TestLimitScopeString(t *testing.T) {
	tests := []struct {
		l    budget.Limit
		want string
	}{
		{budget.Limit{Scope: budget.ScopeGlobal}, "global"},
		{budget.Limit{Scope: budget.ScopeProvider, ScopeValue: "openai"}, "provider=openai"},
		{budget.Limit{Scope: budget.ScopeModel, ScopeValue: "gpt-4o"}, "model=gpt-4o"},
	}
	for _, tt := range tests {
		if got := tt.l.ScopeString(); got != tt.want {
			t.Errorf("%+v.ScopeString() = %q; want %q", tt.l, got, tt.want)
		}
	}
}

func TestLimitSameIdentity(t *testing.T) {
	hour := func(s string) budget.Window { return mustWindow(t, s, "", "") }
	base := budget.Limit{ID: "a", Key: "k", Scope: budget.ScopeProvider, ScopeValue: "openai", Metric: budget.MetricTokens, Max: 100, Window: hour("1h"), Enabled: true}
	with := func(f func(*budget.Limit)) budget.Limit { l := base; f(&l); return l }
	tests := []struct {
		name string
		o    budget.Limit
		want bool
	}{
		{"itself", base, true},
		{"60m is 1h", with(func(l *budget.Limit) { l.Window = hour("60m") }), true},
		{"other id, limit and enabled", with(func(l *budget.Limit) { l.ID, l.Max, l.Enabled = "b", 5, false }), true},
		{"other key", with(func(l *budget.Limit) { l.Key = "k2" }), false},
		{"other scope", with(func(l *budget.Limit) { l.Scope = budget.ScopeModel }), false},
		{"other scope value", with(func(l *budget.Limit) { l.ScopeValue = "azure" }), false},
		{"other metric", with(func(l *budget.Limit) { l.Metric = budget.MetricInput }), false},
		{"other window", with(func(l *budget.Limit) { l.Window = hour("2h") }), false},
		{"calendar window", with(func(l *budget.Limit) { l.Window = budget.Window{Kind: budget.Daily, Zone: time.UTC} }), false},
	}
	for _, tt := range tests {
		if got := base.SameIdentity(&tt.o); got != tt.want {
			t.Errorf("%s: SameIdentity = %v; want %v", tt.name, got, tt.want)
		}
		if got := tt.o.SameIdentity(&base); got != tt.want {
			t.Errorf("%s: SameIdentity reversed = %v; want %v", tt.name, got, tt.want)
		}
	}
}

// TestLimitLess lists limits in the contract's order (key, then scope
// global/provider/model, scope value, metric, window length, id) and checks
// Less agrees on every pair and sorts any permutation back.
func TestLimitLess(t *testing.T) {
	daily := budget.Window{Kind: budget.Daily, Zone: time.UTC}
	weekly := budget.Window{Kind: budget.Weekly, Zone: time.UTC}
	monthly := budget.Window{Kind: budget.Monthly, Zone: time.UTC}
	l := func(id, key string, sc budget.Scope, val string, m budget.Metric, w budget.Window) budget.Limit {
		return budget.Limit{ID: id, Key: key, Scope: sc, ScopeValue: val, Metric: m, Max: 1, Window: w}
	}
	const (
		g, p, mo = budget.ScopeGlobal, budget.ScopeProvider, budget.ScopeModel
		tok, in  = budget.MetricTokens, budget.MetricInput
		out, req = budget.MetricOutput, budget.MetricRequests
		con      = budget.MetricConcurrent
	)
	ordered := []budget.Limit{
		// key "alpha" before "beta"; "Beta" sorts before both (byte order).
		l("k0", "Beta", g, "", tok, daily),
		l("k1", "alpha", g, "", con, budget.Window{}),
		l("k2", "alpha", g, "", in, fixed(time.Minute)),
		l("k3", "alpha", g, "", out, fixed(time.Minute)),
		l("k4", "alpha", g, "", req, fixed(time.Minute)),
		// tokens: by window length, then id.
		l("k5", "alpha", g, "", tok, fixed(time.Second)),
		l("k6", "alpha", g, "", tok, fixed(time.Minute)),
		l("k7", "alpha", g, "", tok, fixed(90*time.Minute)),
		l("k8", "alpha", g, "", tok, fixed(5*time.Hour)),
		l("a", "alpha", g, "", tok, daily),
		l("b", "alpha", g, "", tok, fixed(24*time.Hour)), // same length as daily: id decides
		l("k9", "alpha", g, "", tok, fixed(48*time.Hour)),
		l("k10", "alpha", g, "", tok, weekly),
		l("k11", "alpha", g, "", tok, fixed(8*24*time.Hour)),
		l("k12", "alpha", g, "", tok, monthly),
		// provider after every global limit, even a "smaller" metric.
		l("p1", "alpha", p, "anthropic", tok, daily),
		l("p2", "alpha", p, "openai", con, budget.Window{}),
		l("p3", "alpha", p, "openai", tok, fixed(time.Hour)),
		// model after every provider limit.
		l("m1", "alpha", mo, "claude", req, fixed(time.Minute)),
		l("m2", "alpha", mo, "gpt-4o", in, daily),
		l("m3", "alpha", mo, "gpt-4o-mini", in, daily),
		l("z1", "beta", g, "", tok, monthly),
		l("z0", "beta", mo, "a", tok, fixed(time.Second)),
	}
	for i := range ordered {
		for j := range ordered {
			a, b := &ordered[i], &ordered[j]
			if got, want := a.Less(b), i < j; got != want {
				t.Errorf("%s.Less(%s) = %v; want %v", a.ID, b.ID, got, want)
			}
		}
	}
	// Reversed and rotated inputs sort back into the listing order.
	perms := [][]budget.Limit{reversed(ordered)}
	for k := 1; k < len(ordered); k += 5 {
		perms = append(perms, append(append([]budget.Limit(nil), ordered[k:]...), ordered[:k]...))
	}
	for _, ls := range perms {
		sort.SliceStable(ls, func(i, j int) bool { return ls[i].Less(&ls[j]) })
		if got, want := ids(ls), ids(ordered); got != want {
			t.Errorf("sorted = %s; want %s", got, want)
		}
	}
}

func reversed(ls []budget.Limit) []budget.Limit {
	out := make([]budget.Limit, len(ls))
	for i, l := range ls {
		out[len(ls)-1-i] = l
	}
	return out
}

func ids(ls []budget.Limit) string {
	s := ""
	for i, l := range ls {
		if i > 0 {
			s += " "
		}
		s += l.ID
	}
	return s
}

// A limit needs a key, or is a default limit; never both.
func TestLimitSpecKeyOrDefault(t *testing.T) {
	max := int64(10)
	for _, tc := range []struct {
		name string
		spec budget.LimitSpec
		ok   bool
	}{
		{"key", budget.LimitSpec{Key: "k", Window: "1h", Max: &max}, true},
		{"default", budget.LimitSpec{Default: true, Window: "1h", Max: &max}, true},
		{"neither", budget.LimitSpec{Window: "1h", Max: &max}, false},
		{"blank key", budget.LimitSpec{Key: "  ", Window: "1h", Max: &max}, false},
		{"both", budget.LimitSpec{Key: "k", Default: true, Window: "1h", Max: &max}, false},
	} {
		err := tc.spec.Validate()
		if tc.ok != (err == nil) || err != nil && (!errors.Is(err, budget.ErrInvalid) || !strings.Contains(err.Error(), "key")) {
			t.Errorf("%s: Validate = %v; want ok %v (errors naming key)", tc.name, err, tc.ok)
		}
	}
}

// The subject of a counter names the key of a default limit and the end
// user of a per-user one; the helpers read each part, and nothing else.
func TestSubjectParts(t *testing.T) {
	sep := budget.SubjectSep
	tests := []struct {
		name      string
		l         budget.Limit
		key, user string
	}{
		{"key limit", budget.Limit{Key: "k"}, "", ""},
		{"default for k", budget.Limit{Subject: "k"}, "k", ""},
		{"default, not applied", budget.Limit{}, "", ""},
		{"each user of key k", budget.Limit{Key: "k", Scope: budget.ScopeUser, ScopeValue: "*", Subject: "bob"}, "", "bob"},
		{"each user, default for k", budget.Limit{Scope: budget.ScopeUser, ScopeValue: "*", Subject: "k" + sep + "bob"}, "k", "bob"},
		{"each user, default, no user yet", budget.Limit{Scope: budget.ScopeUser, ScopeValue: "*", Subject: "k"}, "k", ""},
		{"team limit", budget.Limit{Team: "eng"}, "", ""},
	}
	for _, tt := range tests {
		if got := tt.l.SubjectKey(); got != tt.key {
			t.Errorf("%s: SubjectKey = %q; want %q", tt.name, got, tt.key)
		}
		if got := tt.l.SubjectUser(); got != tt.user {
			t.Errorf("%s: SubjectUser = %q; want %q", tt.name, got, tt.user)
		}
	}
	if got := budget.DefaultSubjectKey("k" + sep + "bob"); got != "k" {
		t.Errorf("DefaultSubjectKey = %q; want k", got)
	}
	for subject, want := range map[string]string{"k" + sep + "bob": "k/bob", "k": "k", "bob": "bob", "": ""} {
		if got := budget.SubjectText(subject); got != want {
			t.Errorf("SubjectText(%q) = %q; want %q", subject, got, want)
		}
	}
}
