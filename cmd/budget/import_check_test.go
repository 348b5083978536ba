package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// The first pass parses chunks of lines on every core: what it answers must
// be what one reader in file order answers (scanEvents, the second pass):
// the same count, the same earliest event (the first of equals), and the
// first bad line in file order when several chunks hold one.
func TestImportCheckAgreesWithOneReader(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	line := func(i int, at time.Time) string {
		return fmt.Sprintf(`{"request_id":"r%d","key":"k%d","provider":"p","model":"m","input":%d,"at":%q}`, i, i%7, i%100, at.Format(time.RFC3339Nano))
	}
	bad := `{"key":"k","provider":"p","model":"m","input":-1}`
	n := 3*checkChunk + 123
	build := func(badAt ...int) string {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			at := now.Add(-time.Duration(i%5000) * time.Second)
			switch {
			case i%1000 == 0:
				b.WriteString("   ") // blank: skipped
			case contains(badAt, i):
				b.WriteString(bad)
			case i == 6001 || i == 11001:
				b.WriteString(line(i, now.Add(-24*time.Hour))) // two earliest, equal, in two chunks: the first counts
			default:
				b.WriteString(line(i, at))
			}
			b.WriteByte('\n')
		}
		return b.String()
	}
	sequential := func(s string) (checked, error) {
		var c checked
		err := scanEvents(context.Background(), strings.NewReader(s), now, "salt", func(n int, u budget.Usage) error {
			c.add(n, u)
			return nil
		})
		return c, err
	}
	for _, badAt := range [][]int{nil, {9500, 5001}, {n}, {1, 12000}} {
		s := build(badAt...)
		want, werr := sequential(s)
		got, gerr := checkEvents(context.Background(), strings.NewReader(s), now, "salt")
		if fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Fatalf("bad lines %v: checkEvents error %v; one reader's %v", badAt, gerr, werr)
		}
		if werr != nil {
			continue
		}
		if got.total != want.total || got.firstLine != want.firstLine || got.first.RequestID != want.first.RequestID {
			t.Fatalf("checkEvents = %d events, earliest line %d (%s); one reader: %d, line %d (%s)",
				got.total, got.firstLine, got.first.RequestID, want.total, want.firstLine, want.first.RequestID)
		}
		if want.firstLine != 6001 || want.total != n-n/1000 {
			t.Fatalf("one reader: %d events, earliest line %d; the file has %d and its earliest is line 6001", want.total, want.firstLine, n-n/1000)
		}
	}
	if _, err := checkEvents(context.Background(), strings.NewReader(build(9500, 5001)), now, "salt"); err == nil || !strings.HasPrefix(err.Error(), "line 5001: ") {
		t.Fatalf("checkEvents with bad lines 5001 and 9500 = %v; want line 5001 named", err)
	}
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
