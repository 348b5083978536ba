package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/tokenbudget/tokenbudget/dashboard"
	"github.com/tokenbudget/tokenbudget/proxy"
	"github.com/tokenbudget/tokenbudget/proxy/mock"
)

// The browser test drives a headless Chromium against a dashboard served
// the way `budget proxy --admin-listen 0.0.0.0:PORT` serves it: on a
// non-loopback listener, behind its token, with the refusals of a real
// proxy in front of the mock provider.
//
// $BUDGET_TEST_CHROME names the browser (default: the first of chromium,
// chromium-browser, google-chrome on $PATH); the test skips only when there
// is none. With $BUDGET_TEST_SCREENSHOTS set to a directory, the
// screenshots are copied there too (docs/dashboard.png is
// overview-1280x800.png).

// shownBarJS measures every bar on the page: its numbers and the widths
// of its parts as laid out, in CSS pixels.
const shownBarJS = `[...document.querySelectorAll("svg.bar")].map(s => {
	const r = s.getBoundingClientRect();
	const w = k => s.querySelector("rect." + k).getBoundingClientRect().width;
	return {id: s.closest("li").dataset.id, used: +s.dataset.used, reserved: +s.dataset.reserved, max: +s.dataset.max,
		width: r.width, left: r.left, right: r.right, usedW: w("used"), reservedW: w("reserved"), remainingW: w("remaining")};
})`

type laidBar struct {
	ID                           string
	Used, Reserved, Max          float64
	Width, Left, Right           float64
	UsedW, ReservedW, RemainingW float64
}

// outsideJS lists the bars, numbers, headings, controls and table cells
// that are not wholly inside the viewport's width (or have no size), the
// chart labels cut off by their chart, and says whether the page scrolls
// sideways.
const outsideJS = `(() => {
	const out = [];
	const vw = document.documentElement.clientWidth;
	for (const e of document.querySelectorAll("svg.bar, .nums b, .times span, h1, h2, td, th, .filter label, .filter button, figure svg, figcaption, .models li")) {
		const r = e.getBoundingClientRect();
		if (r.width <= 0 || r.height <= 0 || r.left < -0.5 || r.right > vw + 0.5) {
			out.push(e.tagName + "." + e.getAttribute("class") + " " + (e.textContent || "").trim().slice(0, 40) + " [" + Math.round(r.left) + ", " + Math.round(r.right) + "] of " + vw);
		}
	}
	for (const svg of document.querySelectorAll("figure svg")) {
		const box = svg.getBoundingClientRect();
		for (const e of svg.querySelectorAll("text")) {
			const r = e.getBoundingClientRect();
			if (getComputedStyle(e).display !== "none" && (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5)) {
				out.push("chart label " + e.textContent + " sticks out of its chart");
			}
		}
	}
	if (document.documentElement.scrollWidth > vw) {
		out.push("the page scrolls sideways: " + document.documentElement.scrollWidth + " > " + vw);
	}
	return out;
})()`

func TestBrowser(t *testing.T) {
	chrome := browser(t)
	f := showcase(t)
	ctx := context.Background()

	// The proxy: gateway keys for two keys, the mock provider upstream,
	// its refusals kept for the dashboard.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	keys := proxy.NewKeys(f.db.KeyStore())
	t.Cleanup(keys.Wait)
	mw, err := proxy.New(f.db.Tracker, proxy.Config{Keys: keys, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ph, err := proxy.NewHandler(proxy.HandlerConfig{Middleware: mw, Upstream: &mock.Upstream{}})
	if err != nil {
		t.Fatal(err)
	}
	refusals := proxy.NewRefusals(50)
	refusals.Now = func() time.Time { return now.Add(-time.Minute) }
	api := httptest.NewServer(refusals.Wrap(ph, keys))
	t.Cleanup(api.Close)
	for _, r := range []struct {
		key       string
		maxTokens int
		limit     string
	}{{"search-api", 60_000, "lim_search_hourly"}, {"notebook-ada", 100_000, "lim_default_hourly"}} {
		secret, err := proxy.AddKey(ctx, f.db.KeyStore(), r.key, now)
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":%d,"messages":[{"role":"user","content":"Summarise the quarter."}]}`, r.maxTokens)
		req, _ := http.NewRequest(http.MethodPost, api.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Tokenbudget-Limit") != r.limit {
			t.Fatalf("%s asking for %d tokens: status %d from %q; want 429 from %s", r.key, r.maxTokens, resp.StatusCode,
				resp.Header.Get("X-Tokenbudget-Limit"), r.limit)
		}
	}

	// The dashboard, on every interface: Protect demands the token.
	h := f.handler(t, dashboard.Config{
		Refresh: time.Hour, // the script runs; no reload happens during the test
		Refusals: func() []dashboard.Refusal {
			var out []dashboard.Refusal
			for _, r := range refusals.List() {
				out = append(out, dashboard.Refusal{At: r.At, Key: r.Key, LimitID: r.Limit})
			}
			return out
		},
	})
	if _, err := dashboard.Protect(h, "0.0.0.0:0", ""); err == nil {
		t.Fatal("Protect served a non-loopback address without a token")
	}
	protected, err := dashboard.Protect(h, "0.0.0.0:0", adminToken)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: protected, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	base := fmt.Sprintf("http://127.0.0.1:%d", ln.Addr().(*net.TCPAddr).Port)

	bctx, watch := startBrowser(t, chrome)

	// Without the token: 401, nothing of the budget.
	resp, err := chromedp.Run(bctx, chromedp.NavigateResponse(base+"/"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusUnauthorized || strings.Contains(text, "search-api") || !strings.Contains(text, "?token=") {
		t.Fatalf("without the token: status %d, page %q; want 401 saying how to give it", resp.Status, text)
	}
	if resp, err = chromedp.Run(bctx, chromedp.NavigateResponse(base+"/?token=wrong-token-0123456789")); err != nil || resp.Status != http.StatusUnauthorized {
		t.Fatalf("a wrong token: status %d (%v); want 401", resp.Status, err)
	}
	watch.take() // the 401s are logged as failed loads

	// With it: the cookie, and the address without the token.
	if resp, err = chromedp.Run(bctx, chromedp.NavigateResponse(base+"/?token="+adminToken)); err != nil {
		t.Fatal(err)
	}
	loc, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil || resp.Status != http.StatusOK || loc != base+"/" {
		t.Fatalf("with the token: status %d at %q (%v); want 200 at %s/", resp.Status, loc, err, base)
	}

	shots := t.TempDir()
	screenshot := func(name string) {
		t.Helper()
		buf, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		full, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		for file, b := range map[string][]byte{name + ".png": buf, name + "-full.png": full} {
			if err := os.WriteFile(filepath.Join(shots, file), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if dir := os.Getenv("BUDGET_TEST_SCREENSHOTS"); dir != "" {
				if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		t.Logf("screenshots %s", filepath.Join(shots, name+"{,-full}.png"))
	}
	load := func(path string, w, h int64) {
		t.Helper()
		if err := chromedp.Do(bctx, chromedp.EmulateViewport(w, h)); err != nil {
			t.Fatal(err)
		}
		resp, err := chromedp.Run(bctx, chromedp.NavigateResponse(base+path))
		if err != nil || resp.Status != http.StatusOK {
			t.Fatalf("GET %s at %dx%d: %v %v", path, w, h, resp, err)
		}
	}
	layout := func(what string) {
		t.Helper()
		out, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](outsideJS))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out {
			t.Errorf("%s: not wholly visible: %s", what, o)
		}
	}

	for _, size := range [][2]int64{{1280, 800}, {375, 667}} {
		w, hgt := size[0], size[1]
		sz := fmt.Sprintf("%dx%d", w, hgt)
		load("/", w, hgt)
		bars, err := chromedp.Run(bctx, chromedp.Evaluate[[]laidBar](shownBarJS))
		if err != nil {
			t.Fatal(err)
		}
		checkBars(t, sz, bars)
		layout("overview at " + sz)
		screenshot("overview-" + sz)
		for _, p := range []struct{ name, path, wait string }{
			{"limit", "/limit?id=lim_search_hourly", "svg.burn"},
			{"key", "/key?name=search-api", "svg.stack"},
		} {
			load(p.path, w, hgt)
			if n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("`+p.wait+`").length`)); err != nil || n == 0 {
				t.Errorf("%s page at %s: no %s (%v)", p.name, sz, p.wait, err)
			}
			layout(p.name + " page at " + sz)
			screenshot(p.name + "-" + sz)
		}
	}

	// The script: the auto-refresh switch shows and turns off.
	load("/", 1280, 800)
	label, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(() => { const b = document.getElementById("autorefresh"); if (b.hidden) return "hidden"; b.click(); return b.textContent; })()`))
	if err != nil || label != "auto-refresh: off" {
		t.Errorf("the auto-refresh switch: %q (%v); want it shown and turned off", label, err)
	}

	// The filter: a plain form; team research keeps its keys' limits,
	// its org's, and the default counted for notebook-ada.
	if err := chromedp.Do(bctx, chromedp.SetValue(chromedp.CSS(`select[name="team"]`), "research")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(`form.filter button`)))); err != nil {
		t.Fatal(err)
	}
	loc, _ = chromedp.Run(bctx, chromedp.Location())
	ids, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("li.limit")].map(l => l.dataset.id + " " + l.querySelector(".who").textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	want := []string{"lim_acme_tokens org acme", "lim_batch_prepaid key batch-jobs", "lim_default_hourly default for key notebook-ada"}
	if !strings.Contains(loc, "team=research") || !slices.Equal(ids, want) {
		t.Errorf("filtered by team research at %s: rows %q; want %q", loc, ids, want)
	}
	refused, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("refusals").innerText`))
	if err != nil || !strings.Contains(refused, "notebook-ada") || strings.Contains(refused, "search-api") {
		t.Errorf("team research's refusals: %q (%v); want notebook-ada's only", refused, err)
	}

	problems, urls := watch.take()
	for _, p := range problems {
		t.Errorf("the browser reported: %s", p)
	}
	for _, u := range urls {
		if !strings.HasPrefix(u, base+"/") {
			t.Errorf("the page requested %s, outside the dashboard", u)
		}
	}
	for _, asset := range []string{"/static/style.css", "/static/refresh.js", "/static/icon.svg"} {
		if !slices.Contains(urls, base+asset) {
			t.Errorf("the pages never loaded %s", asset)
		}
	}
}

// checkBars: every bar's parts have the widths its numbers imply, side by
// side over its whole width, inside the viewport; the showcase's numbers
// are there.
func checkBars(t *testing.T, size string, bars []laidBar) {
	t.Helper()
	if len(bars) != 9 {
		t.Errorf("%s: %d bars; want the showcase's 9", size, len(bars))
	}
	byID := map[string]laidBar{}
	for _, b := range bars {
		byID[b.ID] = b
		u := min(b.Used, b.Max)
		r := min(b.Reserved, b.Max-u)
		// Within a pixel: the browser snaps to device pixels.
		if math.Abs(b.UsedW-b.Width*u/b.Max) > 1 || math.Abs(b.ReservedW-b.Width*r/b.Max) > 1 ||
			math.Abs(b.RemainingW-b.Width*(b.Max-u-r)/b.Max) > 1 {
			t.Errorf("%s: bar %s is %.1fpx: used %.1f, reserved %.1f, remaining %.1f; its numbers (%g, %g of %g) make %.1f, %.1f, %.1f",
				size, b.ID, b.Width, b.UsedW, b.ReservedW, b.RemainingW, b.Used, b.Reserved, b.Max,
				b.Width*u/b.Max, b.Width*r/b.Max, b.Width*(b.Max-u-r)/b.Max)
		}
		if b.Width < 100 {
			t.Errorf("%s: bar %s is only %.1fpx wide", size, b.ID, b.Width)
		}
	}
	for id, w := range map[string][3]float64{
		"lim_search_hourly":  {150_000, 0, 200_000},
		"lim_support_sonnet": {320_000, 30_000, 400_000},
		"lim_batch_prepaid":  {14_000_000, 0, 20_000_000},
		"lim_default_hourly": {60_000, 0, 150_000},
	} {
		if b := byID[id]; b.Used != w[0] || b.Reserved != w[1] || b.Max != w[2] {
			t.Errorf("%s: bar %s shows %g + %g of %g; want %g + %g of %g", size, id, b.Used, b.Reserved, b.Max, w[0], w[1], w[2])
		}
	}
}
