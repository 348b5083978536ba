package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeWalkthrough runs the README's "Set up a gateway" commands (all
// but the proxy, which other tests start) on a fresh database, so the first
// thing a new operator copies keeps working as the CLI changes.
func TestReadmeWalkthrough(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Set up a gateway")
	if !ok {
		t.Fatal(`README has no "## Set up a gateway" section`)
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatal("the walkthrough has no sh block")
	}
	block, _, _ = strings.Cut(block, "```")

	db := filepath.Join(t.TempDir(), "gw.db")
	ran := 0
	for line := range strings.Lines(block) {
		line, _, _ = strings.Cut(line, " #")
		args := shellWords(t, strings.TrimSpace(line))
		if len(args) == 0 || args[0] != "budget" {
			continue // the proxy line and its continuation
		}
		for i, a := range args {
			if strings.HasPrefix(a, "testdata/") {
				args[i] = filepath.Join("..", "..", a)
			}
		}
		mustRun(t, 0, append(args[1:], "--db", db)...)
		ran++
	}
	if ran != 10 {
		t.Fatalf("ran %d budget commands from the walkthrough; want 10 (the walkthrough has ten before the proxy); did the block change shape?", ran)
	}

	var ls struct {
		Limits []struct {
			Level, Owner, Metric string
			Limit                int64
		}
	}
	if err := json.Unmarshal([]byte(mustRun(t, 0, "limit", "ls", "--json", "--db", db).stdout), &ls); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, l := range ls.Limits {
		got[l.Level+" "+l.Owner+" "+l.Metric] = l.Limit
	}
	want := map[string]int64{
		"org acme usd":            500_000_000,
		"team search usd":         200_000_000,
		"team support usd":        100_000,
		"key search-batch tokens": 2_000_000,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("limit %s = %d; want %d (all: %v)", k, got[k], v, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("limits %v; want exactly %v", got, want)
	}
}

// shellWords splits a command line on spaces, keeping single-quoted words
// whole (the walkthrough quotes '*').
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inQuote, inWord := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			inQuote, inWord = !inQuote, true
		case r == ' ' && !inQuote:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inQuote {
		t.Fatalf("unbalanced quote in %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}
