package dashboard_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// The headless Chromium the browser tests drive, and what they watch of it.

// browser finds a Chromium, or skips the test.
func browser(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BUDGET_TEST_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium found (chromium, chromium-browser or google-chrome on $PATH, or $BUDGET_TEST_CHROME): " +
		"the browser test needs one; on Debian: apt-get install chromium")
	return ""
}

// adminToken is the dashboard's token in the browser test.
const adminToken = "browser-test-token-0123456789"

// pageWatch collects what the browser reports: errors of any kind and
// every URL it requests.
type pageWatch struct {
	mu       sync.Mutex
	problems []string
	urls     []string
	byID     map[network.RequestID]string // what each request asked, for its failure
	changed  chan struct{}                // closed and replaced on each problem (waitFor)
}

// waitFor waits until a problem containing s has been reported, for at
// most d, and reports whether one was.
func (w *pageWatch) waitFor(s string, d time.Duration) bool {
	timeout := time.After(d)
	for {
		w.mu.Lock()
		found := slices.ContainsFunc(w.problems, func(p string) bool { return strings.Contains(p, s) })
		if w.changed == nil {
			w.changed = make(chan struct{})
		}
		changed := w.changed
		w.mu.Unlock()
		if found {
			return true
		}
		select {
		case <-changed:
		case <-timeout:
			return false
		}
	}
}

func (w *pageWatch) listen(ev any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.problems)
	defer func() {
		if len(w.problems) > n && w.changed != nil {
			close(w.changed)
			w.changed = nil
		}
	}()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value))
			}
			w.problems = append(w.problems, "console."+string(ev.Type)+": "+strings.Join(args, " "))
		}
	case *runtime.EventExceptionThrown:
		w.problems = append(w.problems, "exception: "+ev.ExceptionDetails.Text)
	case *log.EventEntryAdded:
		if ev.Entry.Level == log.EntryLevelError {
			w.problems = append(w.problems, "log: "+ev.Entry.Text+" "+ev.Entry.URL)
		}
	case *network.EventRequestWillBeSent:
		w.urls = append(w.urls, ev.Request.URL)
		if w.byID == nil {
			w.byID = map[network.RequestID]string{}
		}
		w.byID[ev.RequestID] = ev.Request.Method + " " + ev.Request.URL
	case *network.EventLoadingFailed:
		w.problems = append(w.problems, "request failed: "+ev.ErrorText+" "+w.byID[ev.RequestID])
	}
}

// take returns what was collected and starts afresh.
func (w *pageWatch) take() (problems, urls []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	problems, urls = w.problems, w.urls
	w.problems, w.urls = nil, nil
	return problems, urls
}

// startBrowser starts chrome headless with a fresh profile and no network
// but ours, for 90 seconds at most, and watches what it reports.
func startBrowser(t *testing.T, chrome string) (context.Context, *pageWatch) {
	t.Helper()
	profile, err := os.MkdirTemp("", "budget-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Chromium's children may still write there for a moment after
		// it stops.
		for range 50 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chrome), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(profile), chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true), chromedp.Flag("disable-default-apps", true))
	t.Cleanup(cancel)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	bctx, cancel = context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(cancel)
	watch := &pageWatch{}
	if err := chromedp.Listen(bctx, watch.listen); err != nil {
		t.Fatalf("starting %s: %v", chrome, err)
	}
	return bctx, watch
}
