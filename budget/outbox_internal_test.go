package budget

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A receiver's error is stored as valid UTF-8 on one line, at most
// maxLastError bytes, never cut inside a character.
func TestClipErrorStoresOneValidLine(t *testing.T) {
	for _, in := range []string{
		"webhook answered 500 \xff\xfe broken\r\nnext line",
		strings.Repeat("é", maxLastError), // 2 bytes each: the cut falls inside one
		"short",
	} {
		got := clipError(in)
		if !utf8.ValidString(got) || strings.ContainsAny(got, "\r\n") || len(got) > maxLastError {
			t.Errorf("clipError(%.40q) = %.40q (%d bytes); want valid UTF-8, one line, at most %d bytes", in, got, len(got), maxLastError)
		}
	}
	if got := clipError("short"); got != "short" {
		t.Errorf("clipError(short) = %q", got)
	}
}

// EventID is stable and tells apart what a plain separator would not.
func TestEventIDStableAndUnambiguous(t *testing.T) {
	first, again := EventID("a", "b"), EventID("a", "b")
	if first != again || !strings.HasPrefix(first, "ev_") || len(first) != 3+32 {
		t.Fatalf("EventID(a, b) = %q, then %q; want ev_ and 32 hex digits, the same each time", first, again)
	}
	if EventID("a/b", "c") == EventID("a", "b/c") || EventID("a:b", "c") == EventID("a", "b:c") {
		t.Errorf("EventID confuses keys and request ids joined at a separator")
	}
}
