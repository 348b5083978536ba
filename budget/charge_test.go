package budget

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// lateUsage: what a commit records after recovery charged the estimate.
func TestLateUsage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		actual Usage
		est    Estimate
		want   Usage // RequestID checked separately
	}{
		{"all within the estimate", Usage{Input: 90, Output: 40}, Estimate{Input: 100, Output: 50}, Usage{}},
		{"input over", Usage{Input: 130, Output: 40}, Estimate{Input: 100, Output: 50}, Usage{Input: 30}},
		{"output over", Usage{Input: 10, Output: 70}, Estimate{Input: 100, Output: 50}, Usage{Output: 20}},
		{"reasoning uses what output left", Usage{Output: 20, Reasoning: 45}, Estimate{Output: 50}, Usage{Reasoning: 15}},
		{"reasoning with output over", Usage{Output: 60, Reasoning: 5}, Estimate{Output: 50}, Usage{Output: 10, Reasoning: 5}},
		{"cache counts dropped", Usage{Input: 130, CacheRead: 120, CacheWrite: 5}, Estimate{Input: 100}, Usage{Input: 30}},
		{"unsplit covers input first", Usage{Input: 80, Output: 30}, Estimate{Tokens: 100}, Usage{Output: 10}},
		{"unsplit after the split parts", Usage{Input: 120, Output: 70, Reasoning: 10}, Estimate{Input: 100, Output: 50, Tokens: 30}, Usage{Output: 10, Reasoning: 10}},
		{"nothing estimated", Usage{Input: 1, Output: 2, Reasoning: 3}, Estimate{}, Usage{Input: 1, Output: 2, Reasoning: 3}},
		// The whole usage's cost (budget.Tracker.PriceUsage) is not the excess's.
		{"a priced cost dropped", Usage{Input: 130, Cost: 999, CostKnown: true}, Estimate{Input: 100}, Usage{Input: 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.actual
			a.RequestID, a.Key = "rsv_1", "k"
			got := lateUsage(a, tc.est)
			if got.RequestID != "rsv_1:late" || got.Key != "k" {
				t.Errorf("request id, key = %q, %q; want rsv_1:late, k", got.RequestID, got.Key)
			}
			if got.Input != tc.want.Input || got.Output != tc.want.Output || got.Reasoning != tc.want.Reasoning ||
				got.CacheRead != 0 || got.CacheWrite != 0 {
				t.Errorf("lateUsage(%+v, %+v) = in %d out %d reasoning %d cache %d/%d; want %d/%d/%d, no cache",
					tc.actual, tc.est, got.Input, got.Output, got.Reasoning, got.CacheRead, got.CacheWrite,
					tc.want.Input, tc.want.Output, tc.want.Reasoning)
			}
			if got.Cost != 0 || got.CostKnown || got.NoPrice {
				t.Errorf("late cost %d known %v no price %v; want it priced again when written", got.Cost, got.CostKnown, got.NoPrice)
			}
			if _, err := got.Normalize(t0); err != nil {
				t.Errorf("late event invalid: %v", err)
			}
		})
	}
}

func TestChargedUsage(t *testing.T) {
	r := ReservationRow{ID: "rsv_1", Key: "k", Provider: "p", Model: "m", At: t0,
		Estimate: Estimate{Tokens: 5, Input: 100, Output: 50}}
	u := chargedUsage(r)
	if u.RequestID != "rsv_1" || u.Key != "k" || u.Provider != "p" || u.Model != "m" || !u.At.Equal(t0) ||
		u.Input != 105 || u.Output != 50 || u.Reasoning != 0 {
		t.Fatalf("chargedUsage = %+v; want the reservation's identity, input 100+5 unsplit, output 50", u)
	}
}

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want string // "" = valid
	}{
		{"gpt-4o", ""},
		{"claude-*-4-5", ""},
		{"openai/gpt-4o@2024", ""},
		{"ünïcödé", ""},
		{strings.Repeat("a", MaxNameLen), ""},
		{strings.Repeat("a", MaxNameLen+1), "257 bytes"},
		{strings.Repeat("a", 4<<20), "4194304 bytes"},
		{"a\nb", "control characters"},
		{"a\tb", "control characters"},
		{"a\x00b", "control characters"},
		{"a\u0085b", "control characters"},
		{"\xff\xfe", "UTF-8"},
	} {
		err := CheckName("model", tc.v)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckName(%.20q) = %v; want nil", tc.v, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "model")):
			t.Errorf("CheckName(%.20q) = %v; want an error naming model and saying %q", tc.v, err, tc.want)
		case err != nil && len(err.Error()) > 300:
			t.Errorf("CheckName error is %d bytes long; a huge value must be clipped", len(err.Error()))
		}
	}
}

// TestCheckLabel: names people read refuse format characters (a
// right-to-left override makes "ops\u202egnp.exe" display as
// "opsexe.png"), quoting the name with them escaped; names clients
// choose pass CheckName and show escaped through Visible.
func TestCheckLabel(t *testing.T) {
	for _, tc := range []struct {
		v, visible string
		refused    bool
	}{
		{"ops-team", "ops-team", false},
		{"ünïcödé ☃", "ünïcödé ☃", false},
		{"ops\u202egnp.exe", `ops\u202Egnp.exe`, true},
		{"ali\u200bce", `ali\u200Bce`, true},
		{"\ufeffbom", `\uFEFFbom`, true},
		{"x\u2066y\u2069", `x\u2066y\u2069`, true},
		{"soft\u00adhyphen", `soft\u00ADhyphen`, true},
		{"tag\U000E0041", `tag\U000E0041`, true},
	} {
		if err := CheckName("model", tc.v); err != nil {
			t.Errorf("CheckName(%q) = %v; a client's name with a format character is accepted", tc.v, err)
		}
		err := CheckLabel("team", tc.v)
		switch {
		case !tc.refused && err != nil:
			t.Errorf("CheckLabel(%q) = %v; want nil", tc.v, err)
		case tc.refused && (err == nil || !strings.Contains(err.Error(), "team") || !strings.Contains(err.Error(), strconv.Quote(tc.v))):
			t.Errorf("CheckLabel(%q) = %v; want an error naming team and quoting the name escaped", tc.v, err)
		}
		if got := Visible(tc.v); got != tc.visible {
			t.Errorf("Visible(%q) = %q; want %q", tc.v, got, tc.visible)
		}
	}
	if err := CheckLabel("team", "a\nb"); err == nil || !strings.Contains(err.Error(), "control") {
		t.Errorf("CheckLabel keeps CheckName's rules: %v", err)
	}
}
