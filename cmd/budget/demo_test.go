package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemo: the README's first command runs offline, refuses the last
// requests with 429, prints the inspect table and exits 0, leaving no
// database behind unless asked.
func TestDemo(t *testing.T) {
	t.Parallel()
	var out, errb strings.Builder
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx, []string{"demo"}); err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	s := out.String()
	for _, want := range []string{"401", "200", "429", "x-should-retry: false", "token_budget_exceeded",
		"usage chunk added upstream, stripped for the client", "budget inspect:", "REMAINING"} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q:\n%s", want, s)
		}
	}
	lines := strings.Split(s, "\n")
	var rows []string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 2 && len(f[0]) <= 2 && strings.Trim(f[0], "0123456789") == "" {
			rows = append(rows, l)
		}
	}
	if len(rows) < 8 {
		t.Fatalf("demo printed %d request rows; want at least 8:\n%s", len(rows), s)
	}
	for _, kind := range []string{"gemini gemini-2.5-flash ", "bedrock converse "} {
		served := false
		for _, r := range rows {
			served = served || strings.Contains(r, kind) && strings.Contains(r, " 200 ")
		}
		if !served {
			t.Errorf("the demo's %srequest was not served:\n%s", kind, s)
		}
	}
	if last := rows[len(rows)-1]; !strings.Contains(last, " 429 ") {
		t.Errorf("the last request was not refused: %q", last)
	}
	if prev := rows[len(rows)-2]; !strings.Contains(prev, " 429 ") {
		t.Errorf("the request before the last was not refused: %q", prev)
	}
	if errb.Len() != 0 {
		t.Errorf("demo wrote to stderr: %s", errb.String())
	}
}

// TestDemoDB: --db keeps the database, and must name a new file.
func TestDemoDB(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "demo.db")
	mustRun(t, 0, "demo", "--db", path)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("demo --db did not keep the database: %v", err)
	}
	r := mustRun(t, 2, "demo", "--db", path)
	if !strings.Contains(r.stderr, path) {
		t.Errorf("demo --db on an existing file: stderr does not name it: %s", r.stderr)
	}
	v := decode(t, mustRun(t, 0, "key", "ls", "--db", path, "--json").stdout)
	if ks, _ := v["keys"].([]any); len(ks) != 1 {
		t.Errorf("demo database keys: got %v; want the demo key", v)
	}
}
