package budget_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func TestEstimateAmount(t *testing.T) {
	tests := []struct {
		est    budget.Estimate
		metric budget.Metric
		want   int64
	}{
		{budget.Estimate{}, budget.MetricTokens, 0},
		{budget.Estimate{}, budget.MetricInput, 0},
		{budget.Estimate{}, budget.MetricOutput, 0},
		{budget.Estimate{}, budget.MetricRequests, 1},
		{budget.Estimate{}, budget.MetricConcurrent, 1},
		// --tokens N: one unsplit estimate counting fully against every
		// token metric.
		{budget.Estimate{Tokens: 100}, budget.MetricTokens, 100},
		{budget.Estimate{Tokens: 100}, budget.MetricInput, 100},
		{budget.Estimate{Tokens: 100}, budget.MetricOutput, 100},
		{budget.Estimate{Tokens: 100}, budget.MetricRequests, 1},
		{budget.Estimate{Tokens: 100}, budget.MetricConcurrent, 1},
		// A split estimate: tokens compare input + output, each part its own.
		{budget.Estimate{Input: 30, Output: 70}, budget.MetricTokens, 100},
		{budget.Estimate{Input: 30, Output: 70}, budget.MetricInput, 30},
		{budget.Estimate{Input: 30, Output: 70}, budget.MetricOutput, 70},
		{budget.Estimate{Input: 30, Output: 70}, budget.MetricRequests, 1},
		{budget.Estimate{Input: 30, Output: 70}, budget.MetricConcurrent, 1},
		{budget.Estimate{Input: 30}, budget.MetricOutput, 0},
		{budget.Estimate{Output: 70}, budget.MetricInput, 0},
		{budget.Estimate{Tokens: budget.MaxTokens}, budget.MetricTokens, budget.MaxTokens},
	}
	for _, tt := range tests {
		if got := tt.est.Amount(tt.metric); got != tt.want {
			t.Errorf("%+v.Amount(%s) = %d; want %d", tt.est, tt.metric, got, tt.want)
		}
	}
}

func TestStatusRemaining(t *testing.T) {
	tests := []struct {
		max, used, reserved int64
		want                int64
	}{
		{100, 0, 0, 100},
		{100, 60, 30, 10},
		{100, 60, 40, 0},
		{100, 100, 0, 0},
		{100, 150, 0, 0}, // clamped
		{100, 90, 30, 0}, // clamped
		{1, 0, 0, 1},
	}
	for _, tt := range tests {
		s := budget.Status{Limit: budget.Limit{Max: tt.max}, Max: tt.max, Used: tt.used, Reserved: tt.reserved}
		if got := s.Remaining(); got != tt.want {
			t.Errorf("Status{Max %d, Used %d, Reserved %d}.Remaining() = %d; want %d", tt.max, tt.used, tt.reserved, got, tt.want)
		}
	}
}

// decideNow is the instant every Decide case is evaluated at.
var decideNow = instant("2026-03-02T18:00:00Z")

// win is the status of a window limit that resets resetIn after decideNow.
func win(id string, m budget.Metric, max, used, reserved int64, resetIn time.Duration) budget.Status {
	return budget.Status{
		Limit: budget.Limit{ID: id, Key: "k", Scope: budget.ScopeGlobal, Metric: m, Max: max,
			Window: budget.Window{Kind: budget.Daily, Zone: time.UTC}, Enabled: true},
		Max:         max,
		WindowStart: instant("2026-03-02T00:00:00Z"),
		ResetAt:     decideNow.Add(resetIn),
		Used:        used,
		Reserved:    reserved,
	}
}

// conc is the status of a concurrent limit whose earliest lease expires
// expiresIn after decideNow (never, if 0).
func conc(id string, max, used int64, expiresIn time.Duration) budget.Status {
	s := budget.Status{
		Limit: budget.Limit{ID: id, Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricConcurrent, Max: max, Enabled: true},
		Max:   max,
		Used:  used,
	}
	if expiresIn != 0 {
		s.NextExpiry = decideNow.Add(expiresIn)
	}
	return s
}

func TestDecide(t *testing.T) {
	const (
		tok  = budget.MetricTokens
		in   = budget.MetricInput
		out  = budget.MetricOutput
		reqs = budget.MetricRequests
	)
	tokens := func(n int64) budget.Estimate { return budget.Estimate{Tokens: n} }
	tests := []struct {
		name      string
		statuses  []budget.Status
		est       budget.Estimate
		allowed   bool
		breach    string // id of the reported breach; "" for none
		retry     int64  // retry_after_seconds
		retryable bool
	}{
		{"no limits", nil, tokens(1_000_000), true, "", 0, false},
		{"no limits, no estimate", nil, budget.Estimate{}, true, "", 0, false},

		// Exceeded: used + reserved + estimate > limit.
		{"fits with room", []budget.Status{win("a", tok, 100, 50, 0, time.Hour)}, tokens(10), true, "", 0, false},
		{"fits exactly", []budget.Status{win("a", tok, 100, 60, 30, time.Hour)}, tokens(10), true, "", 0, false},
		{"one over", []budget.Status{win("a", tok, 100, 60, 30, time.Hour)}, tokens(11), false, "a", 3600, true},
		{"reservations count", []budget.Status{win("a", tok, 100, 0, 100, time.Hour)}, tokens(1), false, "a", 3600, true},
		{"estimate equals the limit on an empty window", []budget.Status{win("a", tok, 100, 0, 0, time.Hour)}, tokens(100), true, "", 0, false},
		// With no estimate (or 0): used + reserved >= limit.
		{"no estimate, below", []budget.Status{win("a", tok, 100, 99, 0, time.Hour)}, budget.Estimate{}, true, "", 0, false},
		{"no estimate, at the limit", []budget.Status{win("a", tok, 100, 100, 0, time.Hour)}, budget.Estimate{}, false, "a", 3600, true},
		{"no estimate, at the limit with reservations", []budget.Status{win("a", tok, 100, 70, 30, time.Hour)}, budget.Estimate{}, false, "a", 3600, true},
		{"no estimate, over the limit", []budget.Status{win("a", tok, 100, 250, 0, time.Hour)}, budget.Estimate{}, false, "a", 3600, true},
		{"zero input estimate on an input limit", []budget.Status{win("a", in, 100, 100, 0, time.Hour)}, budget.Estimate{Output: 5}, false, "a", 3600, true},
		{"zero input estimate below an input limit", []budget.Status{win("a", in, 100, 99, 0, time.Hour)}, budget.Estimate{Output: 5}, true, "", 0, false},

		// Per-metric estimates.
		{"split estimate against tokens", []budget.Status{win("a", tok, 100, 0, 0, time.Hour)}, budget.Estimate{Input: 60, Output: 41}, false, "a", 3600, false},
		{"split estimate against input", []budget.Status{win("a", in, 100, 40, 0, time.Hour)}, budget.Estimate{Input: 60, Output: 1000}, true, "", 0, false},
		{"split estimate against output", []budget.Status{win("a", out, 100, 40, 0, time.Hour)}, budget.Estimate{Input: 1000, Output: 61}, false, "a", 3600, true},
		{"tokens estimate against input", []budget.Status{win("a", in, 100, 40, 0, time.Hour)}, tokens(61), false, "a", 3600, true},
		{"tokens estimate against output", []budget.Status{win("a", out, 100, 40, 0, time.Hour)}, tokens(61), false, "a", 3600, true},
		{"tokens estimate fits input and output", []budget.Status{win("a", in, 100, 40, 0, time.Hour), win("b", out, 100, 40, 0, time.Hour)}, tokens(60), true, "", 0, false},

		// Requests and concurrent limits count an estimate of 1.
		{"requests with room", []budget.Status{win("r", reqs, 10, 9, 0, time.Hour)}, tokens(1_000_000), true, "", 0, false},
		{"requests full", []budget.Status{win("r", reqs, 10, 9, 1, time.Hour)}, budget.Estimate{}, false, "r", 3600, true},
		{"requests full, no estimate", []budget.Status{win("r", reqs, 10, 10, 0, time.Hour)}, budget.Estimate{}, false, "r", 3600, true},
		{"requests limit 1", []budget.Status{win("r", reqs, 1, 0, 0, time.Hour)}, tokens(5), true, "", 0, false},
		{"concurrent with room", []budget.Status{conc("c", 2, 1, 30*time.Second)}, budget.Estimate{}, true, "", 0, false},
		{"concurrent full", []budget.Status{conc("c", 2, 2, 2500*time.Millisecond)}, tokens(10), false, "c", 3, true},

		// retry_after_seconds: a window limit waits for its reset, rounded up.
		{"reset in 1ns", []budget.Status{win("a", tok, 100, 100, 0, time.Nanosecond)}, tokens(1), false, "a", 1, true},
		{"reset in 1.2s", []budget.Status{win("a", tok, 100, 100, 0, 1200*time.Millisecond)}, tokens(1), false, "a", 2, true},
		{"reset in 2s", []budget.Status{win("a", tok, 100, 100, 0, 2*time.Second)}, tokens(1), false, "a", 2, true},
		{"reset in 6h", []budget.Status{win("a", tok, 1000, 1000, 0, 6*time.Hour)}, tokens(1), false, "a", 21600, true},
		{"reset in 6d23h59m59.5s", []budget.Status{win("a", tok, 1000, 1000, 0, 7*24*time.Hour-500*time.Millisecond)}, tokens(1), false, "a", 604800, true},
		// A concurrent limit waits for its earliest lease expiry, at most 5s.
		{"lease expires in 1ns", []budget.Status{conc("c", 1, 1, time.Nanosecond)}, tokens(1), false, "c", 1, true},
		{"lease expires in 4s", []budget.Status{conc("c", 1, 1, 4*time.Second)}, tokens(1), false, "c", 4, true},
		{"lease expires in 4.001s", []budget.Status{conc("c", 1, 1, 4001*time.Millisecond)}, tokens(1), false, "c", 5, true},
		{"lease expires in 5s", []budget.Status{conc("c", 1, 1, 5*time.Second)}, tokens(1), false, "c", 5, true},
		{"lease expires in 2m, capped", []budget.Status{conc("c", 1, 1, 2*time.Minute)}, tokens(1), false, "c", 5, true},
		{"no lease expiry known, capped", []budget.Status{conc("c", 1, 1, 0)}, tokens(1), false, "c", 5, true},
		{"lease already expired", []budget.Status{conc("c", 1, 1, -time.Second)}, tokens(1), false, "c", 0, true},
		// The largest wait among the breached limits, not the reported one's.
		{"longest wait of the breached", []budget.Status{
			win("day", tok, 1000, 990, 0, 6*time.Hour),
			win("min", tok, 100, 100, 0, 30*time.Second),
		}, tokens(50), false, "min", 21600, true},
		{"wait of a limit that is not breached ignored", []budget.Status{
			win("day", tok, 1000, 0, 0, 6*time.Hour),
			win("min", tok, 100, 100, 0, 30*time.Second),
		}, tokens(50), false, "min", 30, true},
		{"window and concurrent", []budget.Status{
			conc("c", 1, 1, time.Minute),
			win("min", tok, 100, 100, 0, 1500*time.Millisecond),
		}, tokens(1), false, "c", 5, true}, // both -1: the smaller limit

		// The most restrictive breach: smallest unclamped remaining after
		// the estimate...
		{"smallest remaining", []budget.Status{
			win("a", tok, 100, 95, 0, time.Hour),    // 100-95-10 = -5
			win("b", tok, 1000, 1000, 0, time.Hour), // -10
			win("c", tok, 50, 45, 0, time.Hour),     // -5
		}, tokens(10), false, "b", 3600, true},
		{"unclamped, after the estimate", []budget.Status{
			win("big", tok, 1000, 990, 0, time.Hour),  // remaining 10, after: -40
			win("small", tok, 100, 100, 0, time.Hour), // remaining 0, after: -50
		}, tokens(50), false, "small", 3600, true},
		{"over-full window ranks by its real remaining", []budget.Status{
			win("a", tok, 100, 300, 0, time.Hour), // -201
			win("b", tok, 10, 10, 100, time.Hour), // -101
		}, tokens(1), false, "a", 3600, true},
		{"not-breached limits never reported", []budget.Status{
			win("tight", tok, 10, 0, 0, time.Hour),  // -0: fits exactly
			win("over", tok, 100, 91, 0, time.Hour), // -1
		}, tokens(10), false, "over", 3600, true},
		// ...then the smaller limit...
		{"tie: smaller limit", []budget.Status{
			win("a", tok, 1000, 1000, 0, time.Hour),
			win("b", tok, 100, 100, 0, time.Hour),
			win("c", tok, 500, 500, 0, time.Hour),
		}, tokens(1), false, "b", 3600, true},
		// ...then the smaller id.
		{"tie: smaller id", []budget.Status{
			win("lim_b", tok, 100, 100, 0, time.Hour),
			win("lim_a", tok, 100, 100, 0, time.Hour),
			win("lim_c", tok, 100, 100, 0, time.Hour),
		}, tokens(1), false, "lim_a", 3600, true},
		{"tie: requests against tokens", []budget.Status{
			win("t", tok, 100, 100, 0, time.Hour), // 100-100-1 = -1
			win("r", reqs, 10, 10, 0, time.Hour),  // 10-10-1 = -1, smaller limit
		}, tokens(1), false, "r", 3600, true},
		{"requests rank with an estimate of 1", []budget.Status{
			win("r", reqs, 10, 10, 0, time.Hour), // -1
			win("t", tok, 100, 95, 0, time.Hour), // -5
		}, tokens(10), false, "t", 3600, true},
		{"concurrent ranks with an estimate of 1", []budget.Status{
			win("t", tok, 100, 100, 0, time.Hour), // -1
			conc("c", 3, 4, 2*time.Second),        // 3-4-1 = -2
		}, tokens(1), false, "c", 3600, true},
		{"ranking ignores the order given", []budget.Status{
			win("c", tok, 100, 100, 0, time.Hour),
			win("b", tok, 100, 100, 0, time.Hour),
			win("a", tok, 100, 100, 0, time.Hour),
		}, budget.Estimate{}, false, "a", 3600, true},

		// retryable is false when the estimate alone exceeds a breached limit.
		{"estimate alone exceeds", []budget.Status{win("a", tok, 100, 0, 0, time.Hour)}, tokens(101), false, "a", 3600, false},
		{"estimate equals the limit, window used", []budget.Status{win("a", tok, 100, 1, 0, time.Hour)}, tokens(100), false, "a", 3600, true},
		{"estimate alone exceeds another breached limit", []budget.Status{
			win("small", tok, 10, 0, 0, time.Hour),     // 10-0-50 = -40
			win("full", tok, 1000, 1000, 0, time.Hour), // 1000-1000-50 = -50
		}, tokens(50), false, "full", 3600, false},
		{"output part alone exceeds an output limit", []budget.Status{
			win("o", out, 100, 0, 0, time.Hour),
			win("i", in, 100, 100, 0, time.Hour),
		}, budget.Estimate{Input: 1, Output: 200}, false, "o", 3600, false},
		{"estimate exceeds no breached limit", []budget.Status{
			win("i", in, 100, 100, 0, time.Hour),
			win("t", tok, 10000, 0, 0, time.Hour),
		}, budget.Estimate{Input: 1, Output: 200}, false, "i", 3600, true},
	}
	for _, tt := range tests {
		statuses := append([]budget.Status(nil), tt.statuses...)
		d := budget.Decide(statuses, tt.est, decideNow)
		if d.Allowed != tt.allowed {
			t.Errorf("%s: Allowed = %v; want %v", tt.name, d.Allowed, tt.allowed)
		}
		if !reflect.DeepEqual(d.Limits, tt.statuses) {
			t.Errorf("%s: Limits = %+v; want the statuses given, %+v", tt.name, d.Limits, tt.statuses)
		}
		if d.Parked != nil {
			t.Errorf("%s: Parked = %+v; want nil (Decide knows no providers)", tt.name, d.Parked)
		}
		if tt.breach == "" {
			if d.Breach != nil {
				t.Errorf("%s: Breach = %s; want nil", tt.name, d.Breach.Limit.ID)
			}
			continue
		}
		if d.Breach == nil {
			t.Errorf("%s: Breach = nil; want %s", tt.name, tt.breach)
			continue
		}
		if got := d.Breach.Limit.ID; got != tt.breach {
			t.Errorf("%s: Breach = %s; want %s", tt.name, got, tt.breach)
		}
		for _, s := range tt.statuses {
			if s.Limit.ID == d.Breach.Limit.ID && !reflect.DeepEqual(d.Breach.Status, s) {
				t.Errorf("%s: Breach.Status = %+v; want the status of %s, %+v", tt.name, d.Breach.Status, s.Limit.ID, s)
			}
		}
		if got := d.Breach.RetryAfterSeconds(); got != tt.retry {
			t.Errorf("%s: RetryAfterSeconds = %d; want %d", tt.name, got, tt.retry)
		}
		if got := d.Breach.Retryable; got != tt.retryable {
			t.Errorf("%s: Retryable = %v; want %v", tt.name, got, tt.retryable)
		}
	}
}

// TestDecideRoundingAcrossInstants steps the clock toward a reset, as
// rate_test.go steps through instants: the wait shrinks and rounds up.
func TestDecideRoundingAcrossInstants(t *testing.T) {
	reset := instant("2026-03-03T00:00:00Z")
	full := budget.Status{
		Limit:   budget.Limit{ID: "a", Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricTokens, Max: 10},
		ResetAt: reset,
		Used:    10,
	}
	tests := []struct {
		now   string
		retry int64
	}{
		{"2026-03-02T00:00:00Z", 86400},
		{"2026-03-02T18:00:00Z", 21600},
		{"2026-03-02T23:59:00Z", 60},
		{"2026-03-02T23:59:00.000000001Z", 60},
		{"2026-03-02T23:59:58.999Z", 2},
		{"2026-03-02T23:59:59Z", 1},
		{"2026-03-02T23:59:59.999999999Z", 1},
	}
	for _, tt := range tests {
		d := budget.Decide([]budget.Status{full}, budget.Estimate{}, instant(tt.now))
		if d.Breach == nil {
			t.Errorf("at %s: Breach = nil; want a", tt.now)
			continue
		}
		if got := d.Breach.RetryAfterSeconds(); got != tt.retry {
			t.Errorf("at %s: RetryAfterSeconds = %d; want %d", tt.now, got, tt.retry)
		}
	}
}

// TestDecideDoesNotModify checks that Decide leaves its input alone: the
// Tracker reuses the statuses it passes.
func TestDecideDoesNotModify(t *testing.T) {
	statuses := []budget.Status{
		win("a", budget.MetricTokens, 100, 100, 0, time.Hour),
		conc("c", 1, 1, time.Second),
	}
	want := append([]budget.Status(nil), statuses...)
	budget.Decide(statuses, budget.Estimate{Tokens: 5}, decideNow)
	if !reflect.DeepEqual(statuses, want) {
		t.Errorf("statuses after Decide = %+v; want unchanged %+v", statuses, want)
	}
}

// FitOutput: "reserve up to X, at least a floor" at fixed statuses.
func TestFitOutput(t *testing.T) {
	const (
		tok  = budget.MetricTokens
		in   = budget.MetricInput
		out  = budget.MetricOutput
		reqs = budget.MetricRequests
	)
	est := budget.Estimate{Input: 100, Output: 4096}
	for _, tc := range []struct {
		name     string
		statuses []budget.Status
		est      budget.Estimate
		min      int64
		ok       bool
		output   int64 // granted when ok
	}{
		{"room for all of it", []budget.Status{win("a", tok, 10000, 0, 0, time.Hour)}, est, 16, true, 4096},
		{"room left after input", []budget.Status{win("a", tok, 1000, 600, 0, time.Hour)}, est, 16, true, 300},
		{"holds count", []budget.Status{win("a", tok, 1000, 600, 200, time.Hour)}, est, 16, true, 100},
		{"exactly the floor", []budget.Status{win("a", tok, 1000, 884, 0, time.Hour)}, est, 16, true, 16},
		{"below the floor", []budget.Status{win("a", tok, 1000, 885, 0, time.Hour)}, est, 16, false, 0},
		{"tightest of several", []budget.Status{win("a", tok, 10000, 0, 0, time.Hour), win("b", out, 500, 450, 0, time.Hour)}, est, 16, true, 50},
		{"an input limit cannot be helped", []budget.Status{win("a", in, 1000, 950, 0, time.Hour), win("b", tok, 100000, 0, 0, time.Hour)}, est, 16, false, 0},
		{"a requests limit cannot be helped", []budget.Status{win("a", reqs, 10, 10, 0, time.Hour), win("b", tok, 1000, 0, 0, time.Hour)}, est, 16, false, 0},
		{"a spent concurrent limit cannot be helped", []budget.Status{conc("c", 1, 1, time.Second), win("b", tok, 1000, 900, 0, time.Hour)}, est, 16, false, 0},
		{"no floor: never shrunk", []budget.Status{win("a", tok, 1000, 600, 0, time.Hour)}, est, 0, false, 0},
		{"unsplit part counts as other", []budget.Status{win("a", out, 1000, 600, 0, time.Hour)}, budget.Estimate{Tokens: 100, Output: 4096}, 16, true, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := budget.FitOutput(tc.statuses, tc.est, tc.min, nil)
			if ok != tc.ok {
				t.Fatalf("FitOutput ok = %v; want %v (got %+v)", ok, tc.ok, got)
			}
			if !ok {
				if got != tc.est {
					t.Errorf("refused FitOutput changed the estimate: %+v; want %+v", got, tc.est)
				}
				return
			}
			if got.Output != tc.output || got.Input != tc.est.Input || got.Tokens != tc.est.Tokens {
				t.Errorf("FitOutput = %+v; want output %d, other parts unchanged", got, tc.output)
			}
			if d := budget.Decide(tc.statuses, got, decideNow); !d.Allowed {
				t.Errorf("Decide refuses the fitted estimate %+v: %+v", got, d.Breach)
			}
		})
	}
}

// Breaches of different metrics rank by room left as a fraction of the
// limit (the least first); within one metric the contract's rule stands.
func TestDecideAcrossMetrics(t *testing.T) {
	usd := win("d", budget.MetricUSD, 1_000_000, 990_000, 0, time.Hour)
	tok := win("t", budget.MetricTokens, 1000, 500, 0, time.Hour)
	for _, tc := range []struct {
		est  budget.Estimate
		want string
	}{
		{budget.Estimate{Tokens: 600, USD: 20_000}, "t"},  // tokens -100 (-10%), usd -$0.01 (-1%)
		{budget.Estimate{Tokens: 501, USD: 100_000}, "d"}, // tokens -1 (-0.1%), usd -$0.09 (-9%)
	} {
		d := budget.Decide([]budget.Status{tok, usd}, tc.est, decideNow)
		if d.Allowed || d.Breach == nil || d.Breach.Limit.ID != tc.want {
			t.Errorf("estimate %+v: breach %+v; want %s", tc.est, d.Breach, tc.want)
		}
	}
}

// Decision.Until is the breach whose reset the request waits for (the
// latest), while Breach keeps the contract's ranking; a breach that has
// room does not count, and a limit that never resets is not waited for.
func TestDecideUntil(t *testing.T) {
	hourly := win("h", budget.MetricTokens, 100, 90, 0, time.Hour)
	daily := win("d", budget.MetricTokens, 10000, 9980, 0, 6*time.Hour)
	roomy := win("r", budget.MetricTokens, 1000000, 0, 0, 24*time.Hour)
	d := budget.Decide([]budget.Status{hourly, daily, roomy}, budget.Estimate{Input: 56}, decideNow)
	if d.Breach == nil || d.Breach.Limit.ID != "h" || d.Breach.RetryAfterSeconds() != 6*3600 {
		t.Fatalf("Breach = %+v; want h (less room), waiting 6h", d.Breach)
	}
	if d.Until == nil || d.Until.Limit.ID != "d" || d.Until.RetryAfterSeconds() != 6*3600 || d.Until.Used != 9980 {
		t.Fatalf("Until = %+v; want d, the later reset, with its own status", d.Until)
	}
	if d := budget.Decide([]budget.Status{roomy}, budget.Estimate{Input: 56}, decideNow); d.Until != nil {
		t.Fatalf("Until of an allowed decision = %+v; want nil", d.Until)
	}
}

// FitOutput fits a usd limit at the price given: the dollars left after
// the input's cost buy the output, rounded as EstimateCost rounds, and the
// fit holds its repriced dollars.
func TestFitOutputDollars(t *testing.T) {
	p, err := budget.PriceSpec{Provider: "openai", Model: "gpt-4o", Input: "2.5", Output: "10"}.Parse(decideNow)
	if err != nil {
		t.Fatal(err)
	}
	est := budget.Estimate{Input: 100, Output: 4096}
	est.USD = p.EstimateCost(est) // 41210
	for _, tc := range []struct {
		name    string
		used    int64
		ok      bool
		out, us int64
	}{
		{"room for all of it", 0, true, 4096, 41_210},
		{"room after the input", 82_420, true, 1733, 17_580},
		{"a micro-dollar short of the next token", 82_429, true, 1732, 17_570},
		{"exactly the floor", 100_000 - 410, true, 16, 410},
		{"below the floor", 100_000 - 409, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := []budget.Status{win("u", budget.MetricUSD, 100_000, tc.used, 0, time.Hour), win("t", budget.MetricTokens, 1_000_000, 0, 0, time.Hour)}
			got, ok := budget.FitOutput(st, est, 16, &p)
			if ok != tc.ok || ok && (got.Output != tc.out || got.USD != tc.us || got.Input != 100) {
				t.Fatalf("FitOutput = %+v, %v; want output %d, %d micro-dollars, ok %v", got, ok, tc.out, tc.us, tc.ok)
			}
			if !ok && got != est {
				t.Errorf("refused FitOutput changed the estimate: %+v", got)
			}
		})
	}
	if _, ok := budget.FitOutput([]budget.Status{win("u", budget.MetricUSD, 100_000, 90_000, 0, time.Hour)}, est, 16, nil); ok {
		t.Error("FitOutput of a usd limit without a price fitted; want refused (the request is unpriced)")
	}
}
