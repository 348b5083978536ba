package dashboard_test

import (
	"context"
	"errors"
	"html"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/dashboard"
)

// shownBar is one limit's bar as the overview drew it.
type shownBar struct {
	id                           string
	red                          bool // the row is marked as running out
	used, reserved, max          int64
	usedW, reservedX, reservedW  float64
	remainingX, remainingW       float64
	marker                       float64 // -1: none
	markerRed                    bool
	usedText, leftText, limitTxt string
}

var (
	rowRE  = regexp.MustCompile(`(?s)<li class="limit([^"]*)" data-id="([^"]*)">(.*?)</li>`)
	dataRE = regexp.MustCompile(`data-used="(\d+)" data-reserved="(\d+)" data-max="(\d+)"`)
	usedRE = regexp.MustCompile(`<rect class="used[^"]*" x="0" y="0" width="([\d.]+)"`)
	resRE  = regexp.MustCompile(`<rect class="reserved" x="([\d.]+)" y="0" width="([\d.]+)"`)
	remRE  = regexp.MustCompile(`<rect class="remaining" x="([\d.]+)" y="0" width="([\d.]+)"`)
	markRE = regexp.MustCompile(`<line class="marker( red)?" x1="([\d.]+)"`)
	numsRE = regexp.MustCompile(`used <b>([^<]*)</b>.*?left <b>([^<]*)</b>.*?of <b>([^<]*)</b>`)
)

// bars parses the limit rows of a page, in order.
func bars(t *testing.T, body string) []shownBar {
	t.Helper()
	var out []shownBar
	f := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("bad number %q", s)
		}
		return v
	}
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		b := shownBar{id: html.UnescapeString(m[2]), red: strings.Contains(m[1], "red"), marker: -1}
		row := m[3]
		d, u, r, rm, nums := dataRE.FindStringSubmatch(row), usedRE.FindStringSubmatch(row), resRE.FindStringSubmatch(row),
			remRE.FindStringSubmatch(row), numsRE.FindStringSubmatch(row)
		if d == nil || u == nil || r == nil || rm == nil || nums == nil {
			t.Fatalf("row %s lacks its bar or numbers:\n%s", b.id, row)
		}
		b.used, _ = strconv.ParseInt(d[1], 10, 64)
		b.reserved, _ = strconv.ParseInt(d[2], 10, 64)
		b.max, _ = strconv.ParseInt(d[3], 10, 64)
		b.usedW, b.reservedX, b.reservedW, b.remainingX, b.remainingW = f(u[1]), f(r[1]), f(r[2]), f(rm[1]), f(rm[2])
		if mk := markRE.FindStringSubmatch(row); mk != nil {
			b.marker, b.markerRed = f(mk[2]), mk[1] != ""
		}
		b.usedText, b.leftText, b.limitTxt = nums[1], nums[2], nums[3]
		out = append(out, b)
	}
	return out
}

func ids(bs []shownBar) string {
	var s []string
	for _, b := range bs {
		s = append(s, b.id)
	}
	return strings.Join(s, " ")
}

func near(a, b float64) bool { return math.Abs(a-b) < 0.011 }

// TestOverviewBars: each bar's parts are its numbers in thousandths of
// the limit, side by side; the forecast marker sits where the window ends
// at the current pace (at the end when past the limit), red when it runs
// out before the reset; the numbers are shown as text too.
func TestOverviewBars(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	// 100 tokens held on alice's limit: 500 used + 100 reserved of 1,000.
	if _, err := f.db.Reserve(ctx, budget.Request{Key: "alice", Provider: "openai", Model: "gpt-4o-mini",
		Estimate: budget.Estimate{Tokens: 100}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, f.handler(t, dashboard.Config{}), "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: status %d; want 200\n%s", code, body)
	}
	want := []struct {
		id                  string
		used, reserved, max int64
		usedW, reservedW    float64
		marker              float64
		red                 bool
		usedText, left, lim string
	}{
		// held 600; 200 in the last 7.5 min: 1,400 by the reset, out at 18:45.
		{"lim_alice", 500, 100, 1000, 500, 100, 1000, true, "500", "400", "1,000"},
		// no usage lately: the forecast is what it holds.
		{"lim_bob", 1000, 0, 10_000, 100, 0, 100, false, "1,000", "9,000", "10,000"},
		// $0.001 of $5 (bob's 1,000 gpt-4o-mini tokens at $1/M).
		{"lim_eng", 1000, 0, 5_000_000, 0.2, 0, 0.2, false, "$0.001", "$5.00", "$5.00"},
		// full: out now.
		{"lim_hostile", 100, 0, 100, 1000, 0, 1000, true, "100", "0", "100"},
	}
	got := bars(t, body)
	if len(got) != len(want) {
		t.Fatalf("rows: got %s; want %d", ids(got), len(want))
	}
	byID := map[string]shownBar{}
	for _, b := range got {
		byID[b.id] = b
	}
	for _, w := range want {
		b, ok := byID[w.id]
		if !ok {
			t.Errorf("no row for %s", w.id)
			continue
		}
		if b.used != w.used || b.reserved != w.reserved || b.max != w.max {
			t.Errorf("%s numbers: got used %d reserved %d max %d; want %d %d %d", w.id, b.used, b.reserved, b.max, w.used, w.reserved, w.max)
		}
		// The widths follow from the row's own numbers...
		wantU := float64(b.used) / float64(b.max) * dashboard.BarUnits
		wantR := float64(b.reserved) / float64(b.max) * dashboard.BarUnits
		if !near(b.usedW, wantU) || !near(b.reservedW, wantR) || !near(b.reservedX, b.usedW) ||
			!near(b.remainingX, b.usedW+b.reservedW) || !near(b.remainingW, dashboard.BarUnits-b.usedW-b.reservedW) {
			t.Errorf("%s bar: used %g, reserved at %g width %g, remaining at %g width %g; want used %g, reserved %g, the rest remaining",
				w.id, b.usedW, b.reservedX, b.reservedW, b.remainingX, b.remainingW, wantU, wantR)
		}
		// ...and from the fixture's.
		if !near(b.usedW, w.usedW) || !near(b.reservedW, w.reservedW) {
			t.Errorf("%s bar: used %g reserved %g; want %g %g", w.id, b.usedW, b.reservedW, w.usedW, w.reservedW)
		}
		if !near(b.marker, w.marker) || b.markerRed != w.red || b.red != w.red {
			t.Errorf("%s forecast marker at %g (red %v, row red %v); want %g (red %v)", w.id, b.marker, b.markerRed, b.red, w.marker, w.red)
		}
		if b.usedText != w.usedText || b.leftText != w.left || b.limitTxt != w.lim {
			t.Errorf("%s text: used %q left %q of %q; want %q %q %q", w.id, b.usedText, b.leftText, b.limitTxt, w.usedText, w.left, w.lim)
		}
	}
	for _, s := range []string{
		"out at 18:45 UTC (in 15m), before the reset", // alice: 400 left at 200 per 7.5 min
		"at this pace 1,400 (140%) by the reset",
		"resets 2026-03-03 00:00 UTC (in 5h30m)", "resets 19:00 UTC (in 30m)",
		"out: nothing left until the reset",
	} {
		if !strings.Contains(body, s) {
			t.Errorf("the overview does not say %q", s)
		}
	}
}

// TestOverviewSort: fullest first by default ((used + reserved) / limit),
// listing order (level, then owner) with sort=name.
func TestOverviewSort(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.limit(t, budget.LimitSpec{ID: "lim_zoe", Key: "zoe", Window: "1h"}, 200)
	f.record(t, budget.Usage{Key: "zoe", Input: 180, At: now.Add(-time.Minute)})
	h := f.handler(t, dashboard.Config{})
	for _, c := range []struct{ query, want string }{
		{"/", "lim_hostile lim_zoe lim_alice lim_bob lim_eng"},
		{"/?sort=util", "lim_hostile lim_zoe lim_alice lim_bob lim_eng"},
		{"/?sort=name", "lim_hostile lim_alice lim_bob lim_zoe lim_eng"},
	} {
		_, body := get(t, h, c.query)
		if got := ids(bars(t, body)); got != c.want {
			t.Errorf("GET %s: rows %s; want %s", c.query, got, c.want)
		}
	}
	_, body := get(t, h, "/?sort=name")
	if !strings.Contains(body, `<option value="name" selected>`) {
		t.Errorf("sort=name: the form does not keep the choice")
	}
}

// TestOverviewFilters: key, team and org narrow the limits to those that
// apply to their requests, the form keeps the choice, and an unknown name
// shows none.
func TestOverviewFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	refusals := []dashboard.Refusal{
		{At: now.Add(-time.Minute), Key: "bob", LimitID: "lim_bob"},
		{At: now.Add(-2 * time.Minute), Key: "alice", LimitID: "lim_alice"},
	}
	h := f.handler(t, dashboard.Config{Refusals: func() []dashboard.Refusal { return refusals }})
	for _, c := range []struct{ query, rows, refusedKeys, selected string }{
		{"/?sort=name", "lim_hostile lim_alice lim_bob lim_eng", "bob alice", ""},
		{"/?key=alice&sort=name", "lim_alice", "alice", `name="key" value="alice"`},
		{"/?key=bob&sort=name", "lim_bob lim_eng", "bob", `name="key" value="bob"`},
		{"/?team=eng&sort=name", "lim_bob lim_eng", "bob", `<option selected>eng</option>`},
		{"/?org=acme&sort=name", "lim_bob lim_eng", "bob", `<option selected>acme</option>`},
		{"/?key=alice&team=eng", "", "", `name="key" value="alice"`},
		{"/?team=nope", "", "", `<option selected>nope</option>`},
	} {
		code, body := get(t, h, c.query)
		if code != http.StatusOK {
			t.Fatalf("GET %s: status %d", c.query, code)
		}
		if got := ids(bars(t, body)); got != c.rows {
			t.Errorf("GET %s: rows %q; want %q", c.query, got, c.rows)
		}
		if c.selected != "" && !strings.Contains(body, c.selected) {
			t.Errorf("GET %s: the form does not keep the filter (%s)", c.query, c.selected)
		}
		if c.rows == "" && !strings.Contains(body, "No limit matches") {
			t.Errorf("GET %s: no rows and no word about it", c.query)
		}
		var keys []string
		for _, m := range regexp.MustCompile(`<td><a href="/key\?name=([^"]*)">`).FindAllStringSubmatch(section(body, "refusals"), -1) {
			keys = append(keys, m[1])
		}
		if got := strings.Join(keys, " "); got != c.refusedKeys {
			t.Errorf("GET %s: refusals of %q; want %q", c.query, got, c.refusedKeys)
		}
	}
}

// section is the HTML of the page's section with id id.
func section(body, id string) string {
	i := strings.Index(body, `<section id="`+id+`">`)
	if i < 0 {
		return ""
	}
	j := strings.Index(body[i:], "</section>")
	return body[i : i+j]
}

// TestOverviewDefaults: a default limit shows one row per key that has a
// counter of it in its window, filtered by the key's team; its page needs
// the key.
func TestOverviewDefaults(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.limit(t, budget.LimitSpec{ID: "lim_default", Default: true, Window: "1h"}, 2000)
	f.record(t, budget.Usage{Key: "carol", Input: 100, At: now.Add(-time.Minute)},
		budget.Usage{Key: "bob", Input: 50, At: now.Add(-time.Minute)})
	h := f.handler(t, dashboard.Config{})
	_, body := get(t, h, "/?sort=name")
	if !strings.Contains(body, "default for key carol") || !strings.Contains(body, "default for key bob") {
		t.Errorf("the overview does not show the default limit for carol and bob:\n%s", section(body, "limits"))
	}
	_, body = get(t, h, "/?team=eng&sort=name")
	if strings.Contains(body, "default for key carol") || !strings.Contains(body, "default for key bob") {
		t.Errorf("team eng: got %s; want bob's default and not carol's", ids(bars(t, body)))
	}
	code, body := get(t, h, "/limit?id=lim_default&subject=carol")
	if code != http.StatusOK || !strings.Contains(body, "default for key carol") || !strings.Contains(body, "<td>100</td>") {
		t.Errorf("the default limit's page for carol: status %d\n%s", code, body)
	}
	if code, _ := get(t, h, "/limit?id=lim_default"); code != http.StatusNotFound {
		t.Errorf("the default limit's page without a key: status %d; want 404", code)
	}
}

// TestNoJavaScript: every page is whole without a script: numbers and
// bars are in the HTML, the filter is a plain GET form, and the one
// script (auto-refresh) is a file of this origin, as the
// Content-Security-Policy demands.
func TestNoJavaScript(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := f.handler(t, dashboard.Config{})
	for _, p := range []string{"/", "/limit?id=lim_alice", "/key?name=bob"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		body := rec.Body.String()
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", p, csp)
		}
		if n := strings.Count(body, "<script"); n != 1 || !strings.Contains(body, `<script src="/static/refresh.js" defer></script>`) {
			t.Errorf("GET %s: %d scripts; want only /static/refresh.js", p, n)
		}
		if regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).MatchString(body) {
			t.Errorf("GET %s links another origin", p)
		}
		if !strings.Contains(body, "<svg") {
			t.Errorf("GET %s has no server-drawn chart or bar", p)
		}
	}
	_, body := get(t, h, "/")
	if !strings.Contains(body, `<form class="filter" method="get" action="/">`) {
		t.Errorf("the filter is not a plain GET form")
	}
	for _, asset := range []string{"/static/style.css", "/static/refresh.js", "/static/icon.svg"} {
		if code, _ := get(t, h, asset); code != http.StatusOK {
			t.Errorf("GET %s: status %d", asset, code)
		}
	}
}

// TestEscaping: a key named with markup is shown as text and linked with
// its name escaped, on every page.
func TestEscaping(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	refusals := []dashboard.Refusal{{At: now, Key: hostile, LimitID: "lim_hostile"}}
	h := f.handler(t, dashboard.Config{Refusals: func() []dashboard.Refusal { return refusals }})
	esc := `&lt;img src=x onerror=alert(1)&gt;&#34;&amp;&#39;`
	link := `/key?name=%3cimg%20src%3dx%20onerror%3dalert%281%29%3e%22%26%27`
	for _, p := range []string{"/", "/key?name=" + link[len("/key?name="):], "/limit?id=lim_hostile", "/?key=" + link[len("/key?name="):]} {
		code, body := get(t, h, p)
		if code != http.StatusOK {
			t.Fatalf("GET %s: status %d", p, code)
		}
		if strings.Contains(body, "<img") {
			t.Errorf("GET %s: the key's markup is in the page as markup", p)
		}
		if !strings.Contains(body, esc) {
			t.Errorf("GET %s: the key's name is not shown escaped", p)
		}
	}
	_, body := get(t, h, "/")
	if !strings.Contains(body, `href="`+link+`"`) {
		t.Errorf("the overview does not link the key's page with its name query-escaped")
	}
}

// TestLimitPage: the burn-down lists the window's usage per bucket with
// the running total, draws the limit and a red forecast, and says it all
// in words; a missing or unknown id is 400 or 404.
func TestLimitPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := f.handler(t, dashboard.Config{})
	code, body := get(t, h, "/limit?id=lim_alice")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	for _, s := range []string{
		"<tr><td>18:05 UTC</td><td>18:06 UTC</td><td>300</td><td>300</td></tr>",
		"<tr><td>18:25 UTC</td><td>18:26 UTC</td><td>200</td><td>500</td></tr>",
		`<line class="forecast red"`,
		`<text class="limitlabel"`, ">limit 1,000</text>",
		`<desc id="burn-desc">Usage of tokens per 1h from 18:00 UTC to 18:30 UTC: 500 used of a limit of 1,000 (50%).`,
		"18:00 UTC to 19:00 UTC",
	} {
		if !strings.Contains(body, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
	// The usage line ends at now (18:30, half-way along the time axis)
	// at 500 of a 1,300 forecast's scale.
	m := regexp.MustCompile(`<polyline class="usage" points="([^"]*)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no usage line")
	}
	pts := strings.Fields(m[1])
	if len(pts) != 31 { // the start and 30 one-minute buckets
		t.Errorf("usage line has %d points; want 31", len(pts))
	}
	if code, _ := get(t, h, "/limit"); code != http.StatusBadRequest {
		t.Errorf("GET /limit: status %d; want 400", code)
	}
	if code, _ := get(t, h, "/limit?id=lim_nope"); code != http.StatusNotFound {
		t.Errorf("GET /limit?id=lim_nope: status %d; want 404", code)
	}
}

// TestKeyPage: a key's spend over the last 30 days by model, as stacked
// bars whose heights are the amounts, with the numbers in a table and a
// note on what had no price.
func TestKeyPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := f.handler(t, dashboard.Config{})
	code, body := get(t, h, "/key?name=bob")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	for _, s := range []string{
		"gpt-4o-mini: 1,000 tokens, $0.001", "gpt-4o: 400 tokens, $0.00",
		"<td>2026-02-28</td><td><span class=\"sw m1\"></span>gpt-4o</td><td>400</td><td>$0.00</td><td>1</td>",
		"<td>2026-03-02</td><td><span class=\"sw m0\"></span>gpt-4o-mini</td><td>1,000</td><td>$0.001</td><td>1</td>",
		"1 request(s) matched no price",
		"In team <a href=\"/?team=eng\">eng</a> of org <a href=\"/?org=acme\">acme</a>",
		"Spend, 2026-02-01 to 2026-03-02",
	} {
		if !strings.Contains(body, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
	// In the tokens chart, Mar 2's bar is 1,000/400 times Feb 28's.
	tokens := body[strings.Index(body, `<svg class="stack"`):]
	tokens = tokens[:strings.Index(tokens, "</svg>")]
	hs := map[string]float64{}
	for _, m := range regexp.MustCompile(`<rect class="m\d" x="[\d.]+" y="[\d.]+" width="[\d.]+" height="([\d.]+)"><title>([^ ]+) `).FindAllStringSubmatch(tokens, -1) {
		hs[m[2]], _ = strconv.ParseFloat(m[1], 64)
	}
	if len(hs) != 2 || math.Abs(hs["2026-03-02"]/hs["2026-02-28"]-2.5) > 0.01 {
		t.Errorf("bar heights %v; want Mar 2's 2.5 times Feb 28's", hs)
	}
	_, body = get(t, h, "/key?name=nobody")
	if !strings.Contains(body, "No usage in these 30 days.") || !strings.Contains(body, "No limit applies to this key.") {
		t.Errorf("an unknown key's page does not say it has nothing")
	}
}

// TestAlertsAndProviders: the overview lists the tracker's alerts (or
// those Config.Alerts gives, or its error) and the parked providers with
// their resume-at.
func TestAlertsAndProviders(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := f.db.ParkAt(context.Background(), "anthropic", budget.RateLimited, 10*time.Minute, nil, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, body := get(t, f.handler(t, dashboard.Config{}), "/")
	for _, s := range []string{
		// alice's 50 % alert, logged by the write that crossed it.
		`<a href="/limit?id=lim_alice">lim_alice</a> key alice</td><td>50%: 500 of 1,000 <span class="sub">not delivered yet</span>`,
		`<td>anthropic</td><td>rate_limited since 18:29 UTC</td><td><time>18:39 UTC</time> <span class="ago">in 9m</span>`,
	} {
		if !strings.Contains(body, s) {
			t.Errorf("the overview lacks %q", s)
		}
	}
	today := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	alerts := []budget.Alert{
		{ID: "alt_2", LimitID: "lim_eng", Level: budget.LevelTeam, Owner: "eng", Threshold: 80, WindowStart: today,
			Used: 4_000_000, Max: 5_000_000, At: now.Add(-time.Hour), DeliveredAt: now.Add(-59 * time.Minute)},
		{ID: "alt_1", LimitID: "lim_eng", Level: budget.LevelTeam, Owner: "eng", Threshold: 50, WindowStart: today.AddDate(0, 0, -1),
			Used: 2_500_000, Max: 5_000_000, At: now.AddDate(0, 0, -1), Attempts: 2, NextAttempt: now.Add(time.Minute)},
		// Its limit gone: the alert's own metric says dollars.
		{ID: "alt_3", LimitID: "lim_gone", Level: budget.LevelTeam, Owner: "eng", Kind: budget.AlertExhausted, Metric: budget.MetricUSD,
			WindowStart: today, Used: 4_500_000, Max: 5_000_000, At: now.Add(-2 * time.Hour)},
	}
	var alertsErr error
	h := f.handler(t, dashboard.Config{Alerts: func(context.Context, int) ([]budget.Alert, error) { return alerts, alertsErr }})
	_, body = get(t, h, "/")
	for _, s := range []string{
		`team eng</td><td>80%: $4.00 of $5.00 <span class="sub">delivered 17:31 UTC</span></td>`,
		`team eng</td><td>exhausted: $4.50 of $5.00 <span class="sub">not delivered yet</span></td>`,
		`team eng</td><td>50%: $2.50 of $5.00 <span class="sub">in the window from 2026-03-01 00:00 UTC</span> <span class="sub">not delivered yet: 2 failed attempt(s), next 18:31 UTC</span></td>`,
	} {
		if !strings.Contains(body, s) {
			t.Errorf("the overview lacks %q", s)
		}
	}
	_, body = get(t, h, "/?key=alice")
	if strings.Contains(section(body, "alerts"), "lim_eng") {
		t.Errorf("key alice's overview lists team eng's alert")
	}
	alertsErr = errors.New("outbox unreadable")
	_, body = get(t, h, "/")
	if !strings.Contains(body, "The alerts could not be read: outbox unreadable") {
		t.Errorf("an alerts error is not shown")
	}
	if strings.Contains(body, `id="refusals"`) {
		t.Errorf("without Refusals the overview still has their section")
	}
}

// TestReadOnly: the dashboard answers GET and HEAD only, and 404 for any
// other path.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	h := newFixture(t).handler(t, dashboard.Config{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader("x")))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: status %d; want 405", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/", nil))
	if rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Errorf("HEAD /: status %d, %d bytes; want 200 and none", rec.Code, rec.Body.Len())
	}
	if code, _ := get(t, h, "/nope"); code != http.StatusNotFound {
		t.Errorf("GET /nope: status %d; want 404", code)
	}
}

// TestFormatCharactersShownEscaped: a model and an end user (names a
// client chooses) with a right-to-left override or a zero-width
// character show escaped on every page, so a row cannot read as another.
func TestFormatCharactersShownEscaped(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.limit(t, budget.LimitSpec{ID: "lim_users", Key: "bob", Scope: "user", ScopeValue: "*", Window: "daily"}, 10_000)
	f.record(t,
		budget.Usage{Key: "bob", Model: "gpt-4o\u202etxt.exe", User: "mal\u202eyrot", Input: 40, Output: 2, At: now.Add(-time.Minute)},
		budget.Usage{Key: "bob", User: "ev\u200be", Input: 10, At: now.Add(-time.Minute)},
	)
	h := f.handler(t, dashboard.Config{})
	for _, c := range []struct{ path, want string }{
		{"/key?name=bob", `gpt-4o\u202Etxt.exe`},
		{"/", `user mal\u202Eyrot`},
		{"/?key=bob", `user ev\u200Be`},
		{"/limit?id=lim_users&subject=" + url.QueryEscape("mal\u202eyrot"), `mal\u202Eyrot`},
	} {
		code, body := get(t, h, c.path)
		if code != http.StatusOK || strings.ContainsAny(body, "\u202e\u200b") || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: status %d; want 200 showing %s and no raw format character:\n%s", c.path, code, c.want, body)
		}
	}
}

// TestOverviewRefusalCodes: the recent refusals say why each request was
// refused, an unpriced model's as well as a budget's.
func TestOverviewRefusalCodes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	refusals := []dashboard.Refusal{
		{At: now.Add(-time.Minute), Key: "alice", LimitID: "lim_alice", Code: "unpriced_model"},
		{At: now.Add(-2 * time.Minute), Key: "bob", LimitID: "lim_bob", Code: "token_budget_exceeded"},
	}
	h := f.handler(t, dashboard.Config{Refusals: func() []dashboard.Refusal { return refusals }})
	code, body := get(t, h, "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: status %d", code)
	}
	s := section(body, "refusals")
	i, j := strings.Index(s, "unpriced_model"), strings.Index(s, "token_budget_exceeded")
	if i < 0 || j < 0 || i > j {
		t.Errorf("the refusals do not show unpriced_model, then token_budget_exceeded:\n%s", s)
	}
}
