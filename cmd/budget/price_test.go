package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A monthly $1.00 budget from the CLI: prices set and imported, the limit
// given in dollars, cached input priced at the cache rate, the refusal at
// the right request, tables in dollars and JSON in micro-dollars.
func TestDollarBudgetCLI(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "price", "import", "--db", db, filepath.Join("..", "..", "testdata", "prices", "example.json"))
	mustRun(t, 0, "price", "import", "--db", db, filepath.Join("..", "..", "testdata", "prices", "example.csv"))
	ls := decode(t, mustRun(t, 0, "price", "ls", "--db", db, "--json").stdout)["prices"].([]any)
	if len(ls) != 5 {
		t.Fatalf("price ls: %d prices; want 5 (the CSV's gpt-4o replaces the JSON's)", len(ls))
	}
	v := decode(t, mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--metric", "usd", "--limit", "1.00", "--window", "monthly", "--id", "usd", "--json").stdout)
	if v["limit"] != 1_000_000.0 || v["metric"] != "usd" {
		t.Fatalf("usd limit JSON: %v; want limit 1000000 micro-dollars", v)
	}
	// 100k input, 80k of it cached, 10k output on gpt-4o: $0.05 + $0.10 + $0.10.
	mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "openai", "--model", "gpt-4o-2024-08-06",
		"--input", "100000", "--cache-read", "80000", "--output", "10000")
	if s := status(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout, "usd"); s["used"] != 250_000.0 || s["remaining"] != 750_000.0 {
		t.Fatalf("usd status: %v; want used 250000, remaining 750000", s)
	}
	if out := mustRun(t, 0, "inspect", "--db", db).stdout; !strings.Contains(out, "$0.25") || !strings.Contains(out, "$1.00") {
		t.Errorf("inspect table: %q; want dollars", out)
	}
	// --tokens is priced at the larger price ($10/M): 75,000 tokens = $0.75 fits exactly, 75,001 does not.
	mustRun(t, 0, "check", "--db", db, "--key", "k", "--provider", "openai", "--model", "gpt-4o", "--tokens", "75000")
	r := mustRun(t, 3, "check", "--db", db, "--key", "k", "--provider", "openai", "--model", "gpt-4o", "--tokens", "75001", "--json")
	if b := decode(t, r.stdout)["breach"].(map[string]any); b["id"] != "usd" {
		t.Errorf("check over the dollars: %s; want breach usd", r.stdout)
	}
	r = mustRun(t, 3, "check", "--db", db, "--key", "k", "--provider", "openai", "--model", "o9-mystery", "--tokens", "1", "--json")
	if u, _ := decode(t, r.stdout)["unpriced"].(map[string]any); u["model"] != "o9-mystery" {
		t.Errorf("check of an unpriced model: %s; want it named as unpriced", r.stdout)
	}
	r = mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "openai", "--model", "o9-mystery", "--input", "5")
	if !strings.Contains(r.stderr, "warning") || !strings.Contains(r.stderr, "o9-mystery") {
		t.Errorf("record of an unpriced model: stderr %q; want a warning naming it", r.stderr)
	}
	if v := decode(t, mustRun(t, 0, "verify", "--db", db, "--json").stdout); v["unpriced"] != 1.0 {
		t.Errorf("verify --json: %v; want unpriced 1", v)
	}
}

// Bad prices and dollar limits exit 2 naming the field, writing nothing.
func TestPriceBadInput(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"price", "set", "--provider", "p", "--model", "m", "--input", "-1", "--output", "1"}, "input"},
		{[]string{"price", "set", "--provider", "p", "--model", "m", "--input", "1", "--output", "1.1234567"}, "output"},
		{[]string{"price", "set", "--model", "m", "--input", "1", "--output", "1"}, "provider"},
		{[]string{"price", "set", "--provider", "p", "--model", "m", "--input", "1", "--output", "1", "--from", "yesterday"}, "from"},
		{[]string{"limit", "set", "--key", "k", "--metric", "usd", "--limit", "1.0000001", "--window", "daily"}, "limit"},
		{[]string{"limit", "set", "--key", "k", "--limit", "1.5", "--window", "daily"}, "limit"},
	} {
		r := run(t, append(tc.args, "--db", db)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) {
			t.Errorf("budget %s: got %v; want exit 2 naming %s", strings.Join(tc.args, " "), r, tc.field)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"prices":[{"provider":"p","model":"m","input":1,"output":1},{"provider":"p","model":"n","input":1,"output":1,"currency":"eur"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "price", "import", "--db", db, bad); r.code != 2 || !strings.Contains(r.stderr, "currency") {
		t.Errorf("price import with an unknown field: got %v; want exit 2 naming it", r)
	}
	if exists(db) {
		t.Error("bad input created the database")
	}
}

// TestPriceFileErrors: a bad price file's error names the entry (the CSV
// line, the JSON index), the field and the value; a .json file holding a
// bare array is read as JSON; nothing is written.
func TestPriceFileErrors(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body string
		want       []string // all in stderr
	}{
		{"from.csv", "provider,model,input,output,from\np,m,1,1,\np,n,1,1,yesterday\n", []string{"line 3", "from", `"yesterday"`}},
		{"input.csv", "provider,model,input,output\np,m,1,1\np,n,1,1\np,o,-1,1\n", []string{"line 4", "input", "-1"}},
		{"from.json", `{"prices":[{"provider":"p","model":"m","input":1,"output":1},{"provider":"p","model":"n","input":1,"output":1,"from":"soon"}]}`,
			[]string{"prices[1]", "from", `"soon"`}},
		{"type.json", `{"prices":[{"provider":"p","model":"m","input":1,"output":1},{"provider":"p","model":"n","input":true,"output":1}]}`,
			[]string{"prices[1]", "input"}},
		{"unknown.json", `{"prices":[{"provider":"p","model":"m","input":1,"output":1,"currency":"eur"}]}`, []string{"prices[0]", "currency"}},
		{"array.json", `[{"provider":"p","model":"m","input":1,"output":1},{"provider":"","model":"n","input":1,"output":1}]`,
			[]string{"prices[1]", "provider"}},
	} {
		file := filepath.Join(dir, tc.name)
		if err := os.WriteFile(file, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		r := run(t, "price", "import", "--db", db, file)
		ok := r.code == 2
		for _, w := range tc.want {
			ok = ok && strings.Contains(r.stderr, w)
		}
		if !ok {
			t.Errorf("price import %s: got %v; want exit 2 naming %q", tc.name, r, tc.want)
		}
	}
	if exists(db) {
		t.Error("bad price files created the database")
	}
	arr := filepath.Join(dir, "prices.json")
	if err := os.WriteFile(arr, []byte(`[{"provider":"openai","model":"gpt-4o","input":2.5,"output":10}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := mustRun(t, 0, "price", "import", "--db", db, arr); r.stdout != "stored 1 prices\n" {
		t.Errorf("price import of a JSON array: got %v", r)
	}
}

// TestPriceTiers: price set --tier and --above-input add rows of their own
// beside the standard one (same provider, model and from); ls --json lists
// them with tier and above_input; import reads both from JSON and CSV (the
// example table of every provider kind, testdata/prices/providers.json);
// a bad tier or threshold is exit 2 naming it, with nothing written.
func TestPriceTiers(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	from := "2026-01-01T00:00:00Z"
	mustRun(t, 0, "price", "set", "--db", db, "--provider", "openai", "--model", "o3", "--input", "2", "--output", "8", "--from", from)
	out := mustRun(t, 0, "price", "set", "--db", db, "--provider", "openai", "--model", "o3", "--tier", "Flex", "--input", "1", "--output", "4", "--from", from).stdout
	if out != "openai o3 tier flex from "+from+"\n" {
		t.Errorf("price set --tier printed %q", out)
	}
	mustRun(t, 0, "price", "set", "--db", db, "--provider", "openai", "--model", "o3", "--above-input", "200000", "--input", "4", "--output", "16", "--from", from)
	rows := decode(t, mustRun(t, 0, "price", "ls", "--db", db, "--json").stdout)["prices"].([]any)
	var got []string
	for _, r := range rows {
		p := r.(map[string]any)
		got = append(got, fmt.Sprintf("%s/%v/%s", p["tier"], p["above_input"], p["input"]))
	}
	if strings.Join(got, " ") != "/0/2.00 /200000/4.00 flex/0/1.00" {
		t.Errorf("price ls --json rows %v", got)
	}
	for _, bad := range [][]string{{"--tier", "fl*x"}, {"--above-input", "-5"}} {
		mustRun(t, 2, append([]string{"price", "set", "--db", db, "--provider", "openai", "--model", "o3", "--input", "1", "--output", "1"}, bad...)...)
	}
	if n := len(decode(t, mustRun(t, 0, "price", "ls", "--db", db, "--json").stdout)["prices"].([]any)); n != 3 {
		t.Errorf("%d prices after refused sets; want 3", n)
	}
	db2 := tempDB(t)
	out = mustRun(t, 0, "price", "import", "--db", db2, filepath.Join("..", "..", "testdata", "prices", "providers.json")).stdout
	if out != "stored 15 prices\n" {
		t.Errorf("import of the providers' table: %q", out)
	}
	csvFile := filepath.Join(t.TempDir(), "p.csv")
	os.WriteFile(csvFile, []byte("provider,model,tier,above_input,input,output\ngemini,gemini-2.5-pro,,200000,2.50,15\nopenai,o3,batch,,1,4\n"), 0o644)
	mustRun(t, 0, "price", "import", "--db", db, csvFile)
	if n := len(decode(t, mustRun(t, 0, "price", "ls", "--db", db, "--json").stdout)["prices"].([]any)); n != 5 {
		t.Errorf("%d prices after the CSV; want 5", n)
	}
	os.WriteFile(csvFile, []byte("provider,model,above_input,input,output\ngemini,gemini-2.5-pro,lots,2.50,15\n"), 0o644)
	if r := mustRun(t, 2, "price", "import", "--db", db, csvFile); !strings.Contains(r.stderr, "above_input") {
		t.Errorf("bad above_input: %q", r.stderr)
	}
}
