package budget_test

import (
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// A once window is one window from its anchor on; instants before it fall
// in a window the limit does not cover.
func TestOnceBounds(t *testing.T) {
	anchor := instant("2026-03-02T10:30:00Z")
	w := budget.Window{Kind: budget.Once, Anchor: anchor}
	l := budget.Limit{Window: w}
	for _, tt := range []struct {
		at     string
		start  time.Time
		end    time.Time
		covers bool
	}{
		{"2026-03-02T10:30:00Z", anchor, budget.Forever, true},
		{"2030-01-01T00:00:00Z", anchor, budget.Forever, true},
		{"2026-03-02T10:29:59Z", time.Time{}, anchor, false}, // start: the earliest instant (not checked)
	} {
		at := instant(tt.at)
		s, e := w.Bounds(at)
		if !e.Equal(tt.end) || !tt.start.IsZero() && !s.Equal(tt.start) || l.Covers(at) != tt.covers || !s.Before(e) {
			t.Errorf("once window at %s = [%v, %v), covers %v; want [%v, %v), covers %v", tt.at, s, e, l.Covers(at), tt.start, tt.end, tt.covers)
		}
	}
	if w.String() != "once" || w.Resets() || w.Calendar() {
		t.Errorf("once window: String %q, Resets %v, Calendar %v; want once, false, false", w.String(), w.Resets(), w.Calendar())
	}
}

// A raise counts from when it was added until its end, not at the end.
func TestMaxAtRaises(t *testing.T) {
	added := instant("2026-03-02T09:00:00Z")
	until := instant("2026-03-02T18:00:00Z")
	l := budget.Limit{Max: 100, Raises: []budget.Raise{
		{ID: "r1", Amount: 50, At: added, Until: until},
		{ID: "r2", Amount: 5, At: added}, // stays
	}}
	for _, tt := range []struct {
		at   string
		want int64
	}{
		{"2026-03-02T08:59:59Z", 100}, // before either was added
		{"2026-03-02T09:00:00Z", 155},
		{"2026-03-02T17:59:59.999999999Z", 155},
		{"2026-03-02T18:00:00Z", 105}, // the end: gone
		{"2027-01-01T00:00:00Z", 105},
	} {
		if got := l.MaxAt(instant(tt.at)); got != tt.want {
			t.Errorf("MaxAt(%s) = %d; want %d", tt.at, got, tt.want)
		}
	}
	big := budget.Limit{Max: budget.MaxTokens - 1, Raises: []budget.Raise{{Amount: 10, At: added}}}
	if got := big.MaxAt(added); got != budget.MaxTokens {
		t.Errorf("MaxAt near the top = %d; want it saturated at 2^53-1", got)
	}
}

// A breached once window refuses for good: waiting cannot help, and it
// adds nothing to the wait the other breaches ask for.
func TestDecideOnce(t *testing.T) {
	once := budget.Status{Limit: budget.Limit{ID: "bal", Key: "k", Metric: budget.MetricTokens, Max: 100,
		Window: budget.Window{Kind: budget.Once, Anchor: instant("2026-03-01T00:00:00Z")}},
		Max: 100, Used: 95, WindowStart: instant("2026-03-01T00:00:00Z"), ResetAt: budget.Forever}
	hourly := win("h", budget.MetricTokens, 1000, 995, 0, 30*time.Minute)
	d := budget.Decide([]budget.Status{once, hourly}, budget.Estimate{Tokens: 10}, decideNow)
	if d.Allowed || d.Breach == nil || d.Breach.Retryable || d.Breach.RetryAfterSeconds() != 1800 {
		t.Fatalf("Decide = %+v; want refused, not retryable, the hourly window's 1800 s as the only wait", d.Breach)
	}
	d = budget.Decide([]budget.Status{once}, budget.Estimate{Tokens: 10}, decideNow)
	if d.Allowed || d.Breach.Retryable || d.Breach.RetryAfterSeconds() != 0 {
		t.Fatalf("Decide once alone = %+v; want refused, not retryable, no wait", d.Breach)
	}
}

// History says which events each kind of limit counts.
func TestLimitHistory(t *testing.T) {
	for _, tt := range []struct {
		name string
		l    budget.Limit
		want budget.History
	}{
		{"key", budget.Limit{Key: "k", Scope: budget.ScopeModel, ScopeValue: "gpt-4o*"}, budget.History{Key: "k", Model: "gpt-4o*"}},
		{"team", budget.Limit{Team: "eng", Scope: budget.ScopeProvider, ScopeValue: "openai"}, budget.History{Team: "eng", Provider: "openai"}},
		{"org", budget.Limit{Org: "acme"}, budget.History{Org: "acme"}},
		{"default for k", budget.Limit{Subject: "k"}, budget.History{Key: "k"}},
		{"one user of a key", budget.Limit{Key: "k", Scope: budget.ScopeUser, ScopeValue: "alice"}, budget.History{Key: "k", User: "alice"}},
		{"each user of a team, bob's counter", budget.Limit{Team: "eng", Scope: budget.ScopeUser, ScopeValue: "*", Subject: "bob"}, budget.History{Team: "eng", User: "bob"}},
		{"each user, default for k, bob's counter", budget.Limit{Scope: budget.ScopeUser, ScopeValue: "*", Subject: "k" + budget.SubjectSep + "bob"}, budget.History{Key: "k", User: "bob"}},
	} {
		if got := tt.l.History(); got != tt.want {
			t.Errorf("%s: History = %+v; want %+v", tt.name, got, tt.want)
		}
	}
}
