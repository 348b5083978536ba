package budget_test

import (
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func TestUsageAmount(t *testing.T) {
	u := budget.Usage{Key: "k", Input: 1000, Output: 200, Reasoning: 30, CacheRead: 600, CacheWrite: 100}
	tests := []struct {
		u      budget.Usage
		metric budget.Metric
		want   int64
	}{
		// Billable = input + output + reasoning; cache tokens are inside input.
		{u, budget.MetricTokens, 1230},
		{u, budget.MetricInput, 1000},
		{u, budget.MetricOutput, 230}, // output + reasoning
		{u, budget.MetricRequests, 1},
		{u, budget.MetricConcurrent, 0}, // leases, not events
		{budget.Usage{Key: "k"}, budget.MetricTokens, 0},
		{budget.Usage{Key: "k"}, budget.MetricRequests, 1},
		{budget.Usage{Key: "k", Reasoning: 7}, budget.MetricOutput, 7},
		{budget.Usage{Key: "k", Reasoning: 7}, budget.MetricInput, 0},
		{budget.Usage{Key: "k", CacheRead: 5, CacheWrite: 5, Input: 10}, budget.MetricTokens, 10},
	}
	for _, tt := range tests {
		if got := tt.u.Amount(tt.metric); got != tt.want {
			t.Errorf("%+v.Amount(%s) = %d; want %d", tt.u, tt.metric, got, tt.want)
		}
	}
	if got, want := u.Billable(), int64(1230); got != want {
		t.Errorf("Billable() = %d; want %d", got, want)
	}
}

func TestUsageNormalizeInvalid(t *testing.T) {
	const max = budget.MaxTokens
	ok := budget.Usage{RequestID: "r1", Key: "k", Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5}
	with := func(f func(*budget.Usage)) budget.Usage { u := ok; f(&u); return u }
	tests := []struct {
		name         string
		u            budget.Usage
		field, value string
	}{
		{"empty key", with(func(u *budget.Usage) { u.Key = "" }), "key", ""},
		{"blank key", with(func(u *budget.Usage) { u.Key = "  \t" }), "key", ""},
		{"negative input", with(func(u *budget.Usage) { u.Input = -1 }), "input", "-1"},
		{"negative output", with(func(u *budget.Usage) { u.Output = -1 }), "output", "-1"},
		{"negative reasoning", with(func(u *budget.Usage) { u.Reasoning = -5 }), "reasoning", "-5"},
		{"negative cache_read", with(func(u *budget.Usage) { u.CacheRead = -1 }), "cache_read", "-1"},
		{"negative cache_write", with(func(u *budget.Usage) { u.CacheWrite = -1 }), "cache_write", "-1"},
		{"most negative input", with(func(u *budget.Usage) { u.Input = math.MinInt64 }), "input", strconv.FormatInt(math.MinInt64, 10)},
		{"input past 2^53-1", with(func(u *budget.Usage) { u.Input = max + 1 }), "input", "9007199254740992"},
		{"output past 2^53-1", with(func(u *budget.Usage) { u.Output = max + 1 }), "output", "9007199254740992"},
		{"reasoning past 2^53-1", with(func(u *budget.Usage) { u.Reasoning = math.MaxInt64 }), "reasoning", strconv.FormatInt(math.MaxInt64, 10)},
		{"cache_read past 2^53-1", with(func(u *budget.Usage) { u.CacheRead = max + 1 }), "cache_read", "9007199254740992"},
		{"cache_write past 2^53-1", with(func(u *budget.Usage) { u.CacheWrite = max + 1 }), "cache_write", "9007199254740992"},
		{"cache_read above input", with(func(u *budget.Usage) { u.CacheRead = 11 }), "cache_read+cache_write", "11"},
		{"cache_write above input", with(func(u *budget.Usage) { u.CacheWrite = 11 }), "cache_read+cache_write", "11"},
		{"cache sum above input", with(func(u *budget.Usage) { u.CacheRead, u.CacheWrite = 6, 5 }), "cache_read+cache_write", "11"},
		{"cache without input", with(func(u *budget.Usage) { u.Input, u.CacheRead = 0, 1 }), "cache_read+cache_write", "1"},
		{"1-hour writes above the writes", with(func(u *budget.Usage) { u.CacheWrite, u.CacheWrite1h = 3, 4 }), "cache_write_1h", "4"},
		{"negative 1-hour writes", with(func(u *budget.Usage) { u.CacheWrite1h = -1 }), "cache_write_1h", "-1"},
		{"billable sum overflows", with(func(u *budget.Usage) { u.Input, u.Output, u.Reasoning = max, 1, 0 }), "input+output+reasoning", "9007199254740992"},
		{"billable sum overflows by reasoning", with(func(u *budget.Usage) { u.Input, u.Output, u.Reasoning = 0, max-1, 2 }), "input+output+reasoning", "9007199254740992"},
	}
	at := instant("2026-03-02T12:00:00Z")
	for _, tt := range tests {
		_, err := tt.u.Normalize(at)
		wantInvalid(t, tt.name+": Normalize", err, tt.field, tt.value)
	}
}

func TestUsageNormalize(t *testing.T) {
	const max = budget.MaxTokens
	def := instant("2026-03-02T12:00:00Z")
	given := instant("2026-03-01T08:30:00.5Z")
	tests := []struct {
		name string
		in   budget.Usage
		want budget.Usage // RequestID "" means: a generated one
	}{
		{"complete event kept",
			budget.Usage{RequestID: "r1", Key: "k", Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5, Reasoning: 2, CacheRead: 4, CacheWrite: 6, At: given},
			budget.Usage{RequestID: "r1", Key: "k", Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5, Reasoning: 2, CacheRead: 4, CacheWrite: 6, At: given}},
		{"names trimmed",
			budget.Usage{RequestID: " r1 ", Key: " k\t", Provider: " openai ", Model: "\tgpt-4o\n", At: given},
			budget.Usage{RequestID: "r1", Key: "k", Provider: "openai", Model: "gpt-4o", At: given}},
		{"zero at takes the default",
			budget.Usage{RequestID: "r1", Key: "k"},
			budget.Usage{RequestID: "r1", Key: "k", At: def}},
		{"missing request id generated",
			budget.Usage{Key: "k", At: given},
			budget.Usage{Key: "k", At: given}},
		{"blank request id generated",
			budget.Usage{RequestID: "   ", Key: "k", At: given},
			budget.Usage{Key: "k", At: given}},
		{"all zero tokens",
			budget.Usage{RequestID: "r1", Key: "k", At: given},
			budget.Usage{RequestID: "r1", Key: "k", At: given}},
		{"cache tokens fill input exactly",
			budget.Usage{RequestID: "r1", Key: "k", Input: 10, CacheRead: 7, CacheWrite: 3, At: given},
			budget.Usage{RequestID: "r1", Key: "k", Input: 10, CacheRead: 7, CacheWrite: 3, At: given}},
		{"largest input",
			budget.Usage{RequestID: "r1", Key: "k", Input: max, CacheRead: max, At: given},
			budget.Usage{RequestID: "r1", Key: "k", Input: max, CacheRead: max, At: given}},
		{"billable sum exactly 2^53-1",
			budget.Usage{RequestID: "r1", Key: "k", Input: max - 3, Output: 2, Reasoning: 1, At: given},
			budget.Usage{RequestID: "r1", Key: "k", Input: max - 3, Output: 2, Reasoning: 1, At: given}},
		{"provider and model may be empty",
			budget.Usage{RequestID: "r1", Key: "k", At: given},
			budget.Usage{RequestID: "r1", Key: "k", At: given}},
	}
	generated := regexp.MustCompile(`^req_[0-9a-f]{16}$`)
	for _, tt := range tests {
		got, err := tt.in.Normalize(def)
		if err != nil {
			t.Errorf("%s: Normalize: %v", tt.name, err)
			continue
		}
		if tt.want.RequestID == "" {
			if !generated.MatchString(got.RequestID) {
				t.Errorf("%s: RequestID = %q; want a generated req_ followed by 16 hex digits", tt.name, got.RequestID)
			}
			got.RequestID = ""
		}
		if !got.At.Equal(tt.want.At) {
			t.Errorf("%s: At = %v; want %v", tt.name, got.At, tt.want.At)
		}
		got.At, tt.want.At = time.Time{}, time.Time{}
		if got != tt.want {
			t.Errorf("%s: Normalize = %+v; want %+v", tt.name, got, tt.want)
		}
	}
}

func TestUsageNormalizeGeneratesUniqueIDs(t *testing.T) {
	seen := make(map[string]bool)
	for i := 0; i < 1000; i++ {
		u, err := budget.Usage{Key: "k"}.Normalize(instant("2026-03-02T12:00:00Z"))
		if err != nil {
			t.Fatalf("Normalize: %v", err)
		}
		if seen[u.RequestID] {
			t.Fatalf("generated request id %q twice in %d events", u.RequestID, i+1)
		}
		seen[u.RequestID] = true
	}
}

func TestCheckTokens(t *testing.T) {
	tests := []struct {
		v  int64
		ok bool
	}{
		{0, true},
		{1, true},
		{budget.MaxTokens, true},
		{budget.MaxTokens + 1, false},
		{math.MaxInt64, false},
		{-1, false},
		{math.MinInt64, false},
	}
	for _, tt := range tests {
		err := budget.CheckTokens("input", tt.v)
		if tt.ok {
			if err != nil {
				t.Errorf("CheckTokens(input, %d) = %v; want nil", tt.v, err)
			}
			continue
		}
		wantInvalid(t, "CheckTokens(input, "+strconv.FormatInt(tt.v, 10)+")", err, "input", strconv.FormatInt(tt.v, 10))
	}
}

func TestNewID(t *testing.T) {
	id := budget.NewID("res_")
	if !regexp.MustCompile(`^res_[0-9a-f]{16}$`).MatchString(id) {
		t.Errorf("NewID(res_) = %q; want res_ followed by 16 hex digits", id)
	}
	if other := budget.NewID("res_"); other == id {
		t.Errorf("NewID(res_) returned %q twice", id)
	}
}

func TestNormalizeRefusesUnstorableInstants(t *testing.T) {
	for _, at := range []time.Time{
		time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		_, err := budget.Usage{Key: "k", At: at}.Normalize(time.Time{})
		if !errors.Is(err, budget.ErrInvalid) || !strings.Contains(err.Error(), "at") {
			t.Errorf("Normalize(at %v) = %v; want ErrInvalid naming at", at, err)
		}
	}
}

// TestParseRange: a blank end takes the history's start or the given
// default, a date is its UTC midnight, and a bad or backwards range is
// refused naming the field (and since as the caller spells it).
func TestParseRange(t *testing.T) {
	def := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	s, u, err := budget.ParseRange(" ", "", def, "--since")
	if err != nil || !s.Equal(budget.HistoryStart) || !u.Equal(def) {
		t.Errorf("blank range = %v, %v, %v; want the history's start and %v", s, u, err, def)
	}
	s, u, err = budget.ParseRange("2026-03-01", "2026-03-02T09:30:00+01:00", def, "--since")
	if want := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC); err != nil || !s.Equal(want) || !u.Equal(time.Date(2026, 3, 2, 8, 30, 0, 0, time.UTC)) {
		t.Errorf("range = %v, %v, %v; want %v to 08:30Z", s, u, err, want)
	}
	for _, c := range []struct{ since, until, sinceName, want string }{
		{"2026-03-02", "2026-03-01", "--since", `until "2026-03-01T00:00:00Z": must be after --since 2026-03-02T00:00:00Z`},
		{"2026-03-02", "2026-03-02", "since", `until "2026-03-02T00:00:00Z": must be after since 2026-03-02T00:00:00Z`},
		{"yesterday", "", "since", `since "yesterday": want an RFC3339 time`},
		{"", "1500-01-01", "since", `until "1500-01-01T00:00:00Z": must be between the years 1678 and 2261`},
	} {
		_, _, err := budget.ParseRange(c.since, c.until, def, c.sinceName)
		if !errors.Is(err, budget.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseRange(%q, %q) = %v; want invalid %q", c.since, c.until, err, c.want)
		}
	}
}
