package main

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// golden compares got with the golden file name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("..", "..", "testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/budget -run Golden -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test ./cmd/budget -run Golden -update rewrites it)\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

// goldenDB builds a database whose inspect output is fully determined: ids
// given with --id, events at fixed instants, the wall clock fixed (testNow,
// the logged_at of every rollover).
func goldenDB(t *testing.T) string {
	t.Helper()
	db := tempDB(t)
	for _, a := range [][]string{
		{"--key", "demo", "--limit", "1000", "--window", "daily", "--reset-time", "09:00", "--tz", "Europe/Paris", "--id", "demo-day"},
		{"--key", "demo", "--scope", "model", "--value", "gpt-4o", "--limit", "500", "--window", "1h", "--id", "demo-gpt-hour"},
		{"--key", "demo", "--scope", "provider", "--value", "openai", "--metric", "requests", "--limit", "10", "--window", "5m", "--id", "demo-openai-req"},
		{"--key", "demo", "--metric", "concurrent", "--limit", "2", "--id", "demo-conc"},
		{"--key", "demo", "--metric", "output", "--limit", "50", "--window", "1h", "--disabled", "--id", "demo-out-off"},
		{"--key", "team", "--metric", "input", "--limit", "100", "--window", "weekly", "--id", "team-week"},
	} {
		mustRun(t, 0, append([]string{"limit", "set", "--db", db}, a...)...)
	}
	for _, e := range []struct{ key, provider, model, input, output, reasoning, id, at string }{
		{"demo", "openai", "gpt-4o", "100", "20", "0", "e1", "2026-03-02T09:10:00Z"},
		{"demo", "openai", "gpt-4o", "200", "30", "10", "e2", "2026-03-02T10:05:00Z"},
		{"demo", "anthropic", "claude", "40", "2", "0", "e3", "2026-03-02T10:20:00Z"},
		{"demo", "openai", "gpt-4o-mini", "70", "5", "0", "e4", "2026-03-02T10:36:00Z"},
		{"team", "openai", "gpt-4o", "60", "0", "0", "e5", "2026-02-27T12:00:00Z"},
		{"team", "openai", "gpt-4o", "30", "0", "0", "e6", "2026-03-02T08:00:00Z"},
	} {
		mustRun(t, 0, "record", "--db", db, "--key", e.key, "--provider", e.provider, "--model", e.model,
			"--input", e.input, "--output", e.output, "--reasoning", e.reasoning, "--request-id", e.id, "--at", e.at)
	}
	mustRun(t, 0, "provider", "park", "anthropic", "--db", db, "--kind", "overloaded", "--retry-after", "15m", "--at", "2026-03-02T10:30:00Z")
	return db
}

func TestInspectGolden(t *testing.T) {
	t.Parallel()
	db := goldenDB(t)
	at := "2026-03-02T10:40:00Z"
	// --wide is the table inspect printed before the bars: the golden file
	// predates them.
	wide := mustRun(t, 0, "inspect", "--db", db, "--at", at, "--wide").stdout
	golden(t, "inspect.txt", wide)
	for _, want := range []string{
		"ID               OWNER  SCOPE            METRIC      WINDOW                    LIMIT  USED  RESERVED  REMAINING  WINDOW START          RESET AT              ENABLED  FORECAST  RUNS OUT\n",
		"demo-day         demo   global           tokens      daily 09:00 Europe/Paris  1000   477   0         523        2026-03-02T08:00:00Z  2026-03-03T08:00:00Z  yes      11901     2026-03-02T11:38:36Z\n",
	} {
		if !strings.Contains(wide, want) {
			t.Errorf("inspect --wide: got\n%s\nwant a line %q", wide, want)
		}
	}
	golden(t, "inspect.json", mustRun(t, 0, "inspect", "--db", db, "--at", at, "--json").stdout)
	golden(t, "inspect-key.json", mustRun(t, 0, "inspect", "--db", db, "--at", at, "--key", "team", "--rollovers", "1", "--json").stdout)
}

// TestInspectGoldenReserved: reserved amounts and live leases per limit.
// The reservations have random ids, which inspect does not show. The one
// with a 30s TTL has expired by the third reserve and the inspected
// instant: it counts no more (its lease is free), though nothing recovered
// it.
func TestInspectGoldenReserved(t *testing.T) {
	t.Parallel()
	db := goldenDB(t)
	for _, r := range []struct {
		after time.Duration // on the clock, after testNow
		args  []string
	}{
		{0, []string{"--key", "demo", "--model", "gpt-4o", "--tokens", "7", "--ttl", "30s"}},
		{0, []string{"--key", "demo", "--provider", "openai", "--model", "gpt-4o", "--tokens", "50"}},
		{45 * time.Second, []string{"--key", "demo", "--provider", "openai", "--model", "gpt-4o-mini", "--tokens", "25", "--ttl", "5m"}},
		{0, []string{"--key", "team", "--provider", "openai", "--model", "gpt-4o", "--tokens", "15"}},
	} {
		mustRunAt(t, testNow.Add(r.after), 0, append([]string{"reserve", "--db", db}, r.args...)...)
	}
	at := "2026-03-02T12:01:00Z"
	golden(t, "inspect-reserved.txt", mustRun(t, 0, "inspect", "--db", db, "--at", at, "--wide").stdout)
	golden(t, "inspect-reserved.json", mustRun(t, 0, "inspect", "--db", db, "--at", at, "--json").stdout)
}

func TestInspectJSONShape(t *testing.T) {
	t.Parallel()
	db := goldenDB(t)
	v := decode(t, mustRun(t, 0, "inspect", "--db", db, "--at", "2026-03-02T10:40:00.9Z", "--json").stdout)
	wantKeys(t, "inspect --json", v, "at", "limits", "rollovers", "providers")
	if v["at"] != "2026-03-02T10:40:00Z" {
		t.Errorf("at: got %v; want whole seconds in UTC", v["at"])
	}
	for _, l := range v["limits"].([]any) {
		wantKeys(t, "inspect --json limit", l, statusFields...)
	}
	for _, r := range v["rollovers"].([]any) {
		wantKeys(t, "inspect --json rollover", r, "limit_id", "prev_window_start", "prev_used", "window_start", "logged_at")
	}
	for _, p := range v["providers"].([]any) {
		wantKeys(t, "inspect --json provider", p, "provider", "kind", "parked_at", "resume_at", "probe_failures")
	}
	// --rollovers 0 is an empty list, not null.
	out := mustRun(t, 0, "inspect", "--db", db, "--rollovers", "0", "--json").stdout
	if !strings.Contains(out, `"rollovers": []`) {
		t.Errorf("inspect --rollovers 0: got %s; want \"rollovers\": []", out)
	}
	// An empty database lists nothing, with [] everywhere.
	empty := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", empty, "--key", "k", "--limit", "1", "--window", "1h", "--id", "x")
	mustRun(t, 0, "limit", "rm", "--db", empty, "x")
	got := strings.Join(strings.Fields(mustRun(t, 0, "inspect", "--db", empty, "--json").stdout), "")
	if want := `{"at":"2026-03-02T12:00:00Z","limits":[],"rollovers":[],"providers":[]}`; got != want {
		t.Errorf("inspect of an empty database: got %s; want %s", got, want)
	}
}

func TestInspectBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args         []string
		field, value string
	}{
		{[]string{"--at", "2026-03-02T10:40"}, "at", "2026-03-02T10:40"},
		{[]string{"--rollovers", "-1"}, "rollovers", "-1"},
		{[]string{"--rollovers", "many"}, "rollovers", "many"},
	} {
		db := tempDB(t)
		r := run(t, append([]string{"inspect", "--db", db}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) || exists(db) {
			t.Errorf("inspect %q: got %v; want exit 2 naming %s and %s, no database", tc.args, r, tc.field, tc.value)
		}
	}
}

// TestInspectBars: the default output, two lines per limit with a bar, in
// 100 columns.
func TestInspectBars(t *testing.T) {
	t.Parallel()
	db := goldenDB(t)
	got := mustRun(t, 0, "inspect", "--db", db, "--at", "2026-03-02T10:40:00Z").stdout
	want := `at 2026-03-02T10:40:00Z

ID               OWNER  SCOPE            METRIC      WINDOW
  BAR                   USED/LIMIT  RESERVED  USED%  RUNS OUT  RESETS
demo-conc        demo   global           concurrent  -
  ····················  0/2         0         0%     -         -
demo-out-off     demo   global           output      1h
  ███████████████████·  47/50       0         94%    disabled  2026-03-02T11:00:00Z (in 20m)
demo-day         demo   global           tokens      daily 09:00 Europe/Paris
  ██████████··········  477/1000    0         47%    in 59m    2026-03-03T08:00:00Z (in 21h20m)
demo-openai-req  demo   provider=openai  requests    5m
  ····················  0/10        0         0%     -         2026-03-02T10:45:00Z (in 5m)
demo-gpt-hour    demo   model=gpt-4o     tokens      1h
  ██████████··········  240/500     0         48%    -         2026-03-02T11:00:00Z (in 20m)
team-week        team   global           input       weekly 00:00 UTC
  ██████··············  30/100      0         30%    in 6h14m  2026-03-09T00:00:00Z (in 6d13h)
bar: █ used, ▒ reserved, · remaining

ROLLOVER OF    PREV WINDOW START     PREV USED  WINDOW START          LOGGED AT
demo-gpt-hour  2026-03-02T09:00:00Z  120        2026-03-02T10:00:00Z  2026-03-02T12:00:00Z
demo-out-off   2026-03-02T09:00:00Z  20         2026-03-02T10:00:00Z  2026-03-02T12:00:00Z
team-week      2026-02-23T00:00:00Z  60         2026-03-02T00:00:00Z  2026-03-02T12:00:00Z

PROVIDER   KIND        RESUME AT             PROBE FAILURES  REFUSING
anthropic  overloaded  2026-03-02T10:45:00Z  0               yes
`
	if got != want {
		t.Errorf("inspect:\ngot\n%s\nwant\n%s", got, want)
	}
	wantNarrow(t, got)
}

// wantNarrow fails for a line of out wider than 100 runes.
func wantNarrow(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > 100 {
			t.Errorf("a line of %d runes; want at most 100:\n%s", n, line)
		}
	}
}

// TestInspectBarsLargeAmounts: 9-digit limits beside a dollar limit still
// fit 100 columns: the amounts are shown short.
func TestInspectBarsLargeAmounts(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "a-key-of-twenty-char", "--limit", "999999999", "--window", "monthly", "--id", "tokens")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "a-key-of-twenty-char", "--metric", "usd", "--limit", "123456.78", "--window", "monthly", "--id", "dollars")
	mustRun(t, 0, "price", "set", "--db", db, "--provider", "openai", "--model", "gpt-4o", "--input", "2.5", "--output", "10", "--from", "2026-01-01T00:00:00Z")
	mustRun(t, 0, "record", "--db", db, "--key", "a-key-of-twenty-char", "--provider", "openai", "--model", "gpt-4o", "--input", "987654321", "--at", "2026-03-02T12:00:00Z")
	mustRun(t, 0, "reserve", "--db", db, "--key", "a-key-of-twenty-char", "--provider", "openai", "--model", "gpt-4o", "--tokens", "12345")
	out := mustRun(t, 0, "inspect", "--db", db, "--at", "2026-03-02T12:00:00Z").stdout
	wantNarrow(t, out)
	if !strings.Contains(out, "987.7M/1B") {
		t.Errorf("inspect of a 999,999,999 limit: got\n%s\nwant the amounts short (987.7M/...)", out)
	}
}

// TestInspectBarsCells: a limit at 50% fills half the bar; reserved amounts
// take their own cells.
func TestInspectBarsCells(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "100", "--window", "1h", "--id", "half")
	mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "openai", "--model", "gpt-4o", "--input", "50", "--at", "2026-03-02T12:00:00Z")
	at := "2026-03-02T12:01:00Z"
	out := mustRun(t, 0, "inspect", "--db", db, "--at", at).stdout
	if want := "\n  ██████████··········  50/100      0         50%    in 1m     2026-03-02T13:00:00Z (in 59m)\n"; !strings.Contains(out, want) {
		t.Errorf("a limit at 50%%: got\n%s\nwant a line %q", out, want)
	}
	mustRunAt(t, testNow, 0, "reserve", "--db", db, "--key", "k", "--tokens", "25")
	out = mustRun(t, 0, "inspect", "--db", db, "--at", at).stdout
	if want := "\n  ██████████▒▒▒▒▒·····  50/100      25        50%    in 1m     2026-03-02T13:00:00Z (in 59m)\n"; !strings.Contains(out, want) {
		t.Errorf("50 used and 25 reserved of 100: got\n%s\nwant a line %q", out, want)
	}
}

// TestInspectBarsLongNames: ids, keys and scope values of 20 runes fit in
// 100 columns; longer ones are cut to 17 and "...".
func TestInspectBarsLongNames(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	name20 := "abcdefghijklmnopqrst"
	name25 := "abcdefghijklmnopqrstuvwxy"
	for _, a := range [][]string{
		{"--key", name25, "--scope", "model", "--value", name25, "--limit", "100", "--window", "daily", "--tz", "America/Argentina/Buenos_Aires", "--id", name25},
		{"--key", name20, "--scope", "provider", "--value", name20, "--metric", "concurrent", "--limit", "3", "--id", name20},
		{"--key", name20, "--scope", "model", "--value", "ünïcödé-módel-ñame-2", "--metric", "usd", "--limit", "1.00", "--window", "monthly", "--id", "ü" + name20[1:]},
	} {
		mustRun(t, 0, append([]string{"limit", "set", "--db", db}, a...)...)
	}
	mustRun(t, 0, "record", "--db", db, "--key", name25, "--provider", "openai", "--model", name25, "--input", "30", "--at", "2026-03-02T12:00:00Z")
	out := mustRun(t, 0, "inspect", "--db", db, "--at", "2026-03-02T12:30:00Z").stdout
	wantNarrow(t, out)
	cut := "abcdefghijklmnopq..."
	if want := cut + "  " + cut + "  model=" + cut + "     tokens      daily 00:00\n"; !strings.Contains(out, want) {
		t.Errorf("25-rune id, key and model: got\n%s\nwant a line %q", out, want)
	}
	if want := name20 + "  " + name20 + "  provider=" + name20 + "  concurrent  -\n"; !strings.Contains(out, want) {
		t.Errorf("20-rune id, key and provider: got\n%s\nwant a line %q", out, want)
	}
	if strings.Contains(out, name25) || !strings.Contains(out, "model=ünïcödé-módel-ñame-2 ") {
		t.Errorf("names of 25 runes are cut, of 20 kept: got\n%s", out)
	}
}

func TestBarCells(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		used, reserved, max int64
		u, r                int
	}{
		{0, 0, 100, 0, 0},
		{50, 0, 100, 10, 0},
		{50, 25, 100, 10, 5},
		{1, 0, 1000, 1, 0},                    // a non-zero amount shows
		{0, 1, 1000, 0, 1},                    // reserved too
		{500, 1, 1000, 10, 1},                 // reserved that rounds to nothing takes a cell
		{999, 0, 1000, 19, 0},                 // not full keeps a remaining cell
		{980, 1, 1000, 18, 1},                 // ...and so does reserved, taken from used
		{100, 0, 100, 20, 0},                  // full fills the bar
		{60, 60, 100, 12, 8},                  // reserved past the limit is clamped
		{150, 10, 100, 20, 0},                 // used past the limit fills it
		{2, 0, 2, 20, 0},                      // a concurrent limit with all leases taken
		{1 << 52, 1 << 52, 1<<53 - 1, 10, 10}, // no overflow
	} {
		if u, r := barCells(tc.used, tc.reserved, tc.max, 20); u != tc.u || r != tc.r {
			t.Errorf("barCells(%d, %d, %d): got %d used, %d reserved; want %d, %d", tc.used, tc.reserved, tc.max, u, r, tc.u, tc.r)
		}
	}
}

// TestInspectDollarPrecision: a small nonzero dollar amount reads the same
// in every inspect view, never $0.00, even where the bars' second line is
// too wide and amounts are shortened.
func TestInspectDollarPrecision(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "price", "set", "--db", db, "--provider", "openai", "--model", "gpt-4o", "--input", "2.5", "--output", "10")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--metric", "usd", "--limit", "0.10", "--window", "daily", "--id", "usd")
	// A huge token limit makes the bars' amounts too wide: they are shortened.
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "900000000000000", "--window", "monthly", "--id", "tokens")
	mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "openai", "--model", "gpt-4o", "--input", "49", "--at", testNow.Format(time.RFC3339))
	for _, view := range [][]string{{}, {"--wide"}} {
		out := mustRun(t, 0, append([]string{"inspect", "--db", db, "--key", "k"}, view...)...).stdout
		if !strings.Contains(out, "$0.000123") || strings.Contains(out, "$0.00/") {
			t.Errorf("inspect %q: got\n%s\nwant the $0.000123 used (49 tokens at $2.50/M), never $0.00", view, out)
		}
	}
}

// TestInspectAtCountsUpToAt: inspect --at T shows the window's usage up
// to T, not usage recorded later in the same window.
func TestInspectAtCountsUpToAt(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "1000", "--window", "daily", "--id", "day")
	for i, at := range []string{"2026-03-02T09:00:00Z", "2026-03-02T10:00:00Z", "2026-03-02T15:00:00Z"} {
		mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "openai", "--model", "m", "--input", strconv.Itoa(10*(i+1)),
			"--request-id", "r"+strconv.Itoa(i), "--at", at)
	}
	for at, want := range map[string]float64{"2026-03-02T10:00:00Z": 30, "2026-03-02T12:00:00Z": 30, "2026-03-02T16:00:00Z": 60, "2026-03-02T08:00:00Z": 0} {
		v := decode(t, mustRun(t, 0, "inspect", "--db", db, "--key", "k", "--at", at, "--json").stdout)
		ls := v["limits"].([]any)
		if len(ls) != 1 || ls[0].(map[string]any)["used"] != want {
			t.Errorf("inspect --at %s: limits %v; want used %v", at, ls, want)
		}
	}
}
