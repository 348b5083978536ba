package budget_test

import (
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
)

func TestNormalizeModel(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"gpt-4o", "gpt-4o"},
		{"GPT-4o", "gpt-4o"},
		{"gpt-4o-2024-08-06", "gpt-4o"},
		{"openai/gpt-4o", "gpt-4o"},
		{"openai/GPT-4o-2024-08-06", "gpt-4o"},
		{"gpt-4o-latest", "gpt-4o"},
		{"chatgpt-4o-latest", "chatgpt-4o"},
		{"gpt-4o-mini", "gpt-4o-mini"},
		{"gpt-4o-mini-2024-07-18", "gpt-4o-mini"},
		{"claude-3-5-sonnet-20241022", "claude-3-5-sonnet"},
		{"claude-sonnet-4-5@20250929", "claude-sonnet-4-5"},
		{"anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"},
		{"  gpt-4o  ", "gpt-4o"},
		{"o1", "o1"},
		{"text-embedding-3-small", "text-embedding-3-small"},
		{"model-12345678", "model-12345678"}, // not a date: month 56
		{"model-2024-13-01", "model-2024-13-01"},
		{"a/b/c", "b/c"}, // one leading vendor only
		{"/gpt-4o", "/gpt-4o"},
		{"", ""},
		{"gpt-4o*", "gpt-4o*"},
		{"Claude-*-4-5", "claude-*-4-5"},
	} {
		if got := budget.NormalizeModel(tc.in); got != tc.want {
			t.Errorf("NormalizeModel(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestMatchModel(t *testing.T) {
	for _, tc := range []struct {
		value, model string
		want         bool
	}{
		{"gpt-4o", "gpt-4o", true},
		{"gpt-4o", "gpt-4o-mini", false},
		{"gpt-4o*", "gpt-4o", true},
		{"gpt-4o*", "gpt-4o-mini", true},
		{"gpt-4o*", "gpt-4", false},
		{"claude-*-4-5", "claude-sonnet-4-5", true},
		{"claude-*-4-5", "claude-opus-4-5", true},
		{"claude-*-4-5", "claude-sonnet-4", false},
		{"claude-*-4-5", "claude-4-5", false}, // the dash before * and after must both be there
		{"*", "anything", true},
		{"*", "", true},
		{"o?", "o1", true},
		{"o?", "o10", false},
		{"*a*b*c", "xaybzc", true},
		{"*a*b*c", "xaybz", false},
		{"ü*", "über", true},
		{"?ber", "über", true},
	} {
		if got := budget.MatchModel(tc.value, tc.model); got != tc.want {
			t.Errorf("MatchModel(%q, %q) = %v; want %v", tc.value, tc.model, got, tc.want)
		}
	}
}
