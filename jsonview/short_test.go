package jsonview_test

import (
	"testing"

	"github.com/tokenbudget/tokenbudget/jsonview"
)

// The CLI and the dashboard show large amounts the same way.
func TestShort(t *testing.T) {
	for _, c := range []struct {
		x    float64
		want string
	}{
		{1000, "1k"}, {1500, "1.5k"}, {12_345, "12.3k"}, {400_000, "400k"},
		{999_960, "1M"}, {2_000_000, "2M"}, {987_654_321, "987.7M"},
		{999_999_999, "1B"}, {1_250_000_000, "1.3B"}, {2e12, "2T"}, {5e15, "5000T"},
	} {
		if got := jsonview.Short(c.x); got != c.want {
			t.Errorf("Short(%v) = %q; want %q", c.x, got, c.want)
		}
	}
}
