package main

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCSVFormulaCells: a model or end user a client chose that a
// spreadsheet would run as a formula (=, +, -, @, or a leading tab or CR)
// is written with a leading ' in both CSV outputs, while the JSON-lines
// export, which import reads, keeps it exact.
func TestCSVFormulaCells(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	hostile := []struct{ model, user string }{
		{`=HYPERLINK("http://evil.example","x")`, "+1+1"},
		{"-2+3", "@SUM(A1)"},
		{"@x", "=1"},
		{"gpt-4o", "a=b"}, // = only counts at the start
	}
	for i, h := range hostile {
		mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "openai", "--model", h.model, "--user", h.user,
			"--input", "10", "--output", "1", "--request-id", "r"+itoa(int64(i)), "--at", "2026-03-02T10:00:00Z")
	}
	escaped := func(s string) string {
		if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
			return "'" + s
		}
		return s
	}
	readCSV := func(what, s string) [][]string {
		t.Helper()
		recs, err := csv.NewReader(strings.NewReader(s)).ReadAll()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, s)
		}
		return recs
	}

	rep := readCSV("report", mustRun(t, 0, "report", "--db", db, "--since", "2026-03-01", "--until", "2026-03-03",
		"--by", "model,user", "--format", "csv").stdout)
	exp := readCSV("export", mustRun(t, 0, "export", "--db", db, "--format", "csv").stdout)
	for _, h := range hostile {
		m, u := escaped(h.model), escaped(h.user)
		if !slices.ContainsFunc(rep[1:], func(r []string) bool { return r[0] == m && r[1] == u }) {
			t.Errorf("report --format csv: no row %q,%q in %q", m, u, rep)
		}
		if !slices.ContainsFunc(exp[1:], func(r []string) bool { return r[3] == m && r[4] == u }) {
			t.Errorf("export --format csv: no row %q,%q in %q", m, u, exp)
		}
	}

	jsonl := mustRun(t, 0, "export", "--db", db).stdout
	for _, h := range hostile[:2] {
		if !strings.Contains(jsonl, `"user":"`+h.user+`"`) {
			t.Errorf("export jsonl: user %q not kept exact in\n%s", h.user, jsonl)
		}
	}
	file := filepath.Join(t.TempDir(), "usage.jsonl")
	if err := os.WriteFile(file, []byte(jsonl), 0o600); err != nil {
		t.Fatal(err)
	}
	copyDB := tempDB(t)
	mustRun(t, 0, "import", "--db", copyDB, file)
	if again := mustRun(t, 0, "export", "--db", copyDB).stdout; again != jsonl {
		t.Errorf("export jsonl -> import -> export jsonl changed it:\nbefore %s\nafter  %s", jsonl, again)
	}
}
