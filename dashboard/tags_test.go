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
// with usage on the overview and the key's view, each naming its tag and
// its own project's usage, and a project's counter has a page of its own
// showing its usage.
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
		if code != http.StatusOK {
			t.Errorf("GET %s: status %d; want 200", path, code)
			continue
		}
		for tag, used := range map[string]string{"project=atlas": "40", "project=zeus": "7"} {
			if r := limitRow(body, "tag "+tag); !strings.Contains(r, "used <b>"+used+"</b>") {
				t.Errorf("GET %s: the %s counter's row does not show used %s:\n%s", path, tag, used, r)
			}
		}
	}
	code, body := get(t, h, "/limit?id=lim_projects&subject=atlas")
	if r := limitRow(body, "tag project=atlas"); code != http.StatusOK || !strings.Contains(r, "used <b>40</b>") {
		t.Errorf("GET the atlas counter's page: status %d; want 200 showing its 40 tokens used:\n%s", code, body)
	}
}

// limitRow is the part of a dashboard page from the limit row naming who
// to the next row (or the page's end); "" when no row names who.
func limitRow(body, who string) string {
	i := strings.Index(body, who+"</a>")
	if i < 0 {
		return ""
	}
	r := body[i:]
	if j := strings.Index(r, `<div class="lhead">`); j >= 0 {
		r = r[:j]
	}
	return r
}
