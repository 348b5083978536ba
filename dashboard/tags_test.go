package dashboard_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/dashboard"
)

// TestTagCountersShown: a per-project limit shows one row per project
// with usage on the overview and the key's view, each naming its tag, and
// a project's counter has a page of its own.
func TestTagCountersShown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.limit(t, budget.LimitSpec{ID: "lim_projects", Key: "bob", Scope: "tag", ScopeValue: "project=*", Window: "daily"}, 10_000)
	f.record(t,
		budget.Usage{Key: "bob", Input: 40, Tags: "project=atlas", At: now.Add(-time.Minute)},
		budget.Usage{Key: "bob", Input: 7, Tags: "project=zeus,feature=search", At: now.Add(-time.Minute)},
	)
	h := f.handler(t, dashboard.Config{})
	for _, path := range []string{"/", "/?key=bob"} {
		code, body := get(t, h, path)
		if code != http.StatusOK || !strings.Contains(body, "tag project=atlas") || !strings.Contains(body, "tag project=zeus") {
			t.Errorf("GET %s: status %d; want 200 showing the atlas and zeus counters:\n%s", path, code, body)
		}
	}
	code, body := get(t, h, "/limit?id=lim_projects&subject=atlas")
	if code != http.StatusOK || !strings.Contains(body, "tag project=atlas") || !strings.Contains(body, "40") {
		t.Errorf("GET the atlas counter's page: status %d; want 200 showing its 40 tokens:\n%s", code, body)
	}
}
