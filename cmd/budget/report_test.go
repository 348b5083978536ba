package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

// reportHistory is a small history with partial days at both ends of the
// range reportRange asks for, two keys, a priced and an unpriced model.
const reportHistory = `{"request_id":"r1","key":"k1","provider":"openai","model":"gpt-4o","input":100,"output":10,"at":"2026-02-01T10:00:00Z"}
{"request_id":"r2","key":"k1","provider":"openai","model":"gpt-4o","input":200,"output":20,"reasoning":5,"at":"2026-02-01T23:00:00Z"}
{"request_id":"r3","key":"k2","provider":"anthropic","model":"claude","input":50,"output":5,"at":"2026-02-02T00:00:00Z"}
{"request_id":"r4","key":"k1","provider":"openai","model":"gpt-4o","input":1000,"output":100,"cache_read":400,"at":"2026-02-02T12:00:00Z"}
{"request_id":"r5","key":"k2","provider":"anthropic","model":"claude","input":70,"at":"2026-02-03T06:00:00Z"}
{"request_id":"r6","key":"k1","provider":"openai","model":"gpt-4o","input":10,"at":"2026-02-03T18:00:00Z"}
`

// newReportDB is a database holding reportHistory, gpt-4o priced at $2.50
// and $10 per million input and output tokens.
func newReportDB(t *testing.T) string {
	t.Helper()
	db := tempDB(t)
	mustRun(t, 0, "price", "set", "--db", db, "--provider", "openai", "--model", "gpt-4o", "--input", "2.5", "--output", "10",
		"--from", "2026-01-01T00:00:00Z")
	mustImport(t, db, reportHistory)
	return db
}

// mustImport imports JSON lines into db.
func mustImport(t *testing.T, db, lines string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(f, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, 0, "import", "--db", db, f)
}

func TestReportCSV(t *testing.T) {
	t.Parallel()
	db := newReportDB(t)
	// 02-01 from noon and 02-03 until noon are partial days (events), 02-02
	// a whole one (rollups). r2: 200x2.5 + 20x10 + 5x10 = 750 micro-dollars;
	// r4: 600x2.5 + 400x2.5 (cache reads at the input price) + 100x10 = 3500.
	got := mustRun(t, 0, "report", "--db", db, "--since", "2026-02-01T12:00:00Z", "--until", "2026-02-03T12:00:00Z",
		"--by", "key,day", "--format", "csv")
	want := `key,day,requests,input,output,reasoning,cache_read,cache_write,tokens,usd
k1,2026-02-01,1,200,20,5,0,0,225,0.000750
k1,2026-02-02,1,1000,100,0,400,0,1100,0.003500
k2,2026-02-02,1,50,5,0,0,0,55,
k2,2026-02-03,1,70,0,0,0,0,70,
`
	if got.stdout != want || got.stderr != "" {
		t.Errorf("report --format csv: got %v; want stdout\n%s", got, want)
	}
	// No --by: one row of totals; an unpriced event leaves usd empty.
	got = mustRun(t, 0, "report", "--db", db, "--since", "2026-02-01", "--until", "2026-02-02", "--format", "csv")
	if want := "requests,input,output,reasoning,cache_read,cache_write,tokens,usd\n2,300,30,5,0,0,335,0.001100\n"; got.stdout != want {
		t.Errorf("report of a day without --by: got\n%s\nwant\n%s", got.stdout, want)
	}
	// A range holding nothing: the header alone.
	got = mustRun(t, 0, "report", "--db", db, "--since", "2025-01-01", "--until", "2025-02-01", "--by", "model", "--format", "csv")
	if want := "model,requests,input,output,reasoning,cache_read,cache_write,tokens,usd\n"; got.stdout != want {
		t.Errorf("report of an empty range: got %q; want %q", got.stdout, want)
	}
}

func TestReportJSONAndTable(t *testing.T) {
	t.Parallel()
	db := newReportDB(t)
	r := mustRun(t, 0, "report", "--db", db, "--since", "2026-02-01", "--until", "2026-02-04", "--by", "provider,month", "--format", "json")
	var v struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("report --format json: %v\n%s", err, r.stdout)
	}
	if len(v.Rows) != 2 {
		t.Fatalf("report --format json: got %d rows; want 2\n%s", len(v.Rows), r.stdout)
	}
	wantKeys(t, "report row", v.Rows[0], "provider", "month", "requests", "input", "output", "reasoning", "cache_read",
		"cache_write", "tokens", "usd")
	if a := v.Rows[0]; a["provider"] != "anthropic" || a["month"] != "2026-02" || a["requests"] != 2.0 || a["tokens"] != 125.0 || a["usd"] != nil {
		t.Errorf("anthropic row: got %v; want 2 requests, 125 tokens, usd null (unpriced)", a)
	}
	// usd is a number with exactly 6 decimals: 350 + 750 + 3500 + 25.
	if !strings.Contains(r.stdout, `"usd": 0.004625}`) {
		t.Errorf("openai row: want usd 0.004625 written with 6 decimals; got\n%s", r.stdout)
	}
	// Columns in CSV order.
	if i, j := strings.Index(r.stdout, `"provider"`), strings.Index(r.stdout, `"requests"`); i < 0 || j < i {
		t.Errorf("report --format json: dimensions before counts; got\n%s", r.stdout)
	}
	empty := mustRun(t, 0, "report", "--db", db, "--since", "2025-01-01", "--until", "2025-02-01", "--by", "key", "--format", "json").stdout
	if got := strings.Join(strings.Fields(empty), ""); got != `{"rows":[]}` {
		t.Errorf("report --by key --format json of an empty range: got %s; want {\"rows\": []}", empty)
	}
	// Without --by: the one row of totals, zero.
	zero := mustRun(t, 0, "report", "--db", db, "--since", "2025-01-01", "--until", "2025-02-01", "--format", "csv").stdout
	if want := "requests,input,output,reasoning,cache_read,cache_write,tokens,usd\n0,0,0,0,0,0,0,0.000000\n"; zero != want {
		t.Errorf("report --format csv of an empty range: got %q; want %q", zero, want)
	}

	table := mustRun(t, 0, "report", "--db", db, "--since", "2026-02-01", "--until", "2026-02-04", "--by", "key").stdout
	for _, want := range []string{"KEY", "REQUESTS", "CACHE READ", "USD", "k1", "0.004625", "k2"} {
		if !strings.Contains(table, want) {
			t.Errorf("report table: want %q in\n%s", want, table)
		}
	}
	if lines := strings.Split(strings.TrimSpace(table), "\n"); len(lines) != 3 || !strings.HasSuffix(lines[2], "-") {
		t.Errorf("report table: want a header and 2 rows, k2's usd -; got\n%s", table)
	}
	// Defaults: the whole history until now.
	if all := mustRun(t, 0, "report", "--db", db, "--format", "csv").stdout; !strings.HasSuffix(all, "\n6,1430,135,5,400,0,1570,\n") {
		t.Errorf("report of the whole history: got\n%s", all)
	}
}

func TestReportBadInput(t *testing.T) {
	t.Parallel()
	missing := tempDB(t)
	for _, tc := range []struct {
		args         []string
		field, value string
	}{
		{[]string{"--by", "key,colour"}, "by", "colour"},
		{[]string{"--by", "key,key"}, "by", "key"},
		{[]string{"--format", "xml"}, "format", "xml"},
		{[]string{"--since", "yesterday"}, "since", "yesterday"},
		{[]string{"--until", "2026-02-30"}, "until", "2026-02-30"},
		{[]string{"--since", "2026-02-02", "--until", "2026-02-01"}, "until", "2026-02-01"},
	} {
		r := run(t, append([]string{"report", "--db", missing}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) || r.stdout != "" {
			t.Errorf("report %q: got %v; want exit 2 naming %s and %s", tc.args, r, tc.field, tc.value)
		}
	}
	if r := run(t, "report", "--db", missing); r.code != 1 || !strings.Contains(r.stderr, missing) || exists(missing) {
		t.Errorf("report on a missing database: got %v; want exit 1 naming it, no file created", r)
	}
}

// TestReportMatchesHistory sums a random history by hand (from its
// export: the events as stored) and compares every report with it, for
// ranges that start and end mid-day and at midnights.
func TestReportMatchesHistory(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "price", "set", "--db", db, "--provider", "openai", "--model", "gpt-*", "--input", "1.25", "--output", "5",
		"--from", "2026-01-01T00:00:00Z")
	mustRun(t, 0, "team", "set", "--db", db, "eng", "--org", "acme")
	mustRun(t, 0, "key", "set-team", "--db", db, "k0", "eng")
	mustImport(t, db, randomHistory(rand.New(rand.NewPCG(1, 2)), 400, time.Date(2026, 1, 28, 0, 0, 0, 0, time.UTC), 20))
	events := exportedEvents(t, db, "--since", "2026-01-01")
	if len(events) != 400 {
		t.Fatalf("export: got %d events; want the 400 imported", len(events))
	}

	for _, tc := range []struct {
		since, until, by string
	}{
		{"2026-01-28T07:13:00Z", "2026-02-14T19:00:00Z", "key,day"},
		{"2026-01-30", "2026-02-10", "team,org,user"},
		{"2026-01-29T23:59:59Z", "2026-01-30T00:00:01Z", "model,provider"},
		{"2026-02-01T05:00:00Z", "2026-02-01T06:00:00Z", "key"},
		{"2026-01-01", "2026-03-01", "week,key"},
		{"2026-01-01", "2026-03-01", "month"},
		{"2026-01-28T12:00:00Z", "2026-02-17T00:00:00Z", ""},
	} {
		got := mustRun(t, 0, "report", "--db", db, "--since", tc.since, "--until", tc.until, "--by", tc.by, "--format", "csv").stdout
		if want := sumEvents(t, events, tc.since, tc.until, tc.by); got != want {
			t.Errorf("report --since %s --until %s --by %q:\ngot\n%s\nwant (summed from the events)\n%s", tc.since, tc.until, tc.by, got, want)
		}
	}
}

// randomHistory is n JSON lines of events over days days from start: 3
// keys, some with an end user or an explicit team and org, priced (gpt-*)
// and unpriced models.
func randomHistory(rng *rand.Rand, n int, start time.Time, days int) string {
	var b strings.Builder
	models := []struct{ provider, model string }{{"openai", "gpt-4o"}, {"openai", "gpt-4o-mini"}, {"anthropic", "claude"}}
	for i := range n {
		m := models[rng.IntN(len(models))]
		at := start.Add(time.Duration(rng.Int64N(int64(days) * int64(24*time.Hour))))
		in := rng.Int64N(5000)
		cr := rng.Int64N(in/2 + 1)
		line := fmt.Sprintf(`{"request_id":"e%d","key":"k%d","provider":%q,"model":%q,"input":%d,"output":%d,"reasoning":%d,"cache_read":%d,"cache_write":%d,"at":%q`,
			i, rng.IntN(3), m.provider, m.model, in, rng.Int64N(900), rng.Int64N(50), cr, rng.Int64N(in-cr+1)/3, at.Format(time.RFC3339Nano))
		if rng.IntN(3) == 0 {
			line += fmt.Sprintf(`,"user":"u%d"`, rng.IntN(4))
		}
		if rng.IntN(5) == 0 {
			line += `,"team":"ops","org":"acme"`
		}
		b.WriteString(line + "}\n")
	}
	return b.String()
}

// exportedEvents is db's history as export --format jsonl writes it.
func exportedEvents(t *testing.T, db string, args ...string) []jsonview.Event {
	t.Helper()
	out := mustRun(t, 0, append([]string{"export", "--db", db}, args...)...).stdout
	var evs []jsonview.Event
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var e jsonview.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("export line %q: %v", l, err)
		}
		evs = append(evs, e)
	}
	return evs
}

// sumEvents is the report CSV of events in [since, until) by by, summed
// here one event at a time.
func sumEvents(t *testing.T, events []jsonview.Event, since, until, by string) string {
	t.Helper()
	from, _ := budget.ParseInstant("since", since)
	to, _ := budget.ParseInstant("until", until)
	var dims []string
	if by != "" {
		dims = strings.Split(by, ",")
	}
	type sums struct {
		n       [7]int64
		cost    int64
		unknown bool
	}
	groups := map[string]*sums{}
	var keys [][]string
	for _, e := range events {
		at, err := time.Parse(time.RFC3339Nano, e.At)
		if err != nil {
			t.Fatal(err)
		}
		if at.Before(from) || !at.Before(to) {
			continue
		}
		vals := make([]string, len(dims))
		for i, d := range dims {
			day := at.UTC().Truncate(24 * time.Hour)
			vals[i] = map[string]string{"key": e.Key, "team": e.Team, "org": e.Org, "user": e.User, "provider": e.Provider,
				"model": e.Model, "day": day.Format(time.DateOnly), "month": day.Format("2006-01"),
				"week": day.AddDate(0, 0, -(int(day.Weekday())+6)%7).Format(time.DateOnly)}[d]
		}
		k := strings.Join(vals, "\x00")
		g := groups[k]
		if g == nil {
			g = &sums{}
			groups[k] = g
			keys = append(keys, vals)
		}
		reqs := int64(1)
		if strings.HasSuffix(e.RequestID, ":late") {
			reqs = 0
		}
		for i, v := range []int64{reqs, e.Input, e.Output, e.Reasoning, e.CacheRead, e.CacheWrite, e.Input + e.Output + e.Reasoning} {
			g.n[i] += v
		}
		if e.Cost == nil {
			g.unknown = true
		} else {
			g.cost += *e.Cost
		}
	}
	slices.SortFunc(keys, slices.Compare)
	var b strings.Builder
	w := csv.NewWriter(&b)
	w.Write(append(slices.Clone(dims), jsonview.ReportColumns...))
	for _, vals := range keys {
		g := groups[strings.Join(vals, "\x00")]
		rec := slices.Clone(vals)
		for _, n := range g.n {
			rec = append(rec, strconv.FormatInt(n, 10))
		}
		usd := fmt.Sprintf("%d.%06d", g.cost/1e6, g.cost%1e6)
		if g.unknown {
			usd = ""
		}
		w.Write(append(rec, usd))
	}
	w.Flush()
	return b.String()
}
