package proxy_test

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// TestTagLimitThroughProxy: X-Budget-Tags gives a request its tags in
// both modes: a limit per project refuses one project once its usage
// leaves no room while another project, on the same key, is still
// admitted; the refusal names the project's counter; the stored event
// keeps the tags, normalized; and the upstream never sees the header.
func TestTagLimitThroughProxy(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var seen []string
			e := newEnv(t, envOptions{mode: mode}, func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, r.Header.Values(proxy.TagsHeader)...)
				mu.Unlock()
				okUpstream(w, r) // 10 input + 20 output
			})
			each := e.limit("tag", "project=*", "tokens", "1h", 60)
			// The estimate is 6 input + 50 output = 56: one request fits in
			// 60, the second (after 30) does not.
			as := func(tags string) response {
				return e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false), proxy.TagsHeader, tags)
			}
			first := as("Project=atlas, feature=search")
			if first.status != http.StatusOK {
				t.Fatalf("atlas's first request: %d %s; want 200", first.status, first.body)
			}
			r := as("project=atlas")
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("atlas's second request: %d %s; want 429", r.status, r.body)
			}
			if msg, _ := errorObject(t, r.body)["message"].(string); !strings.Contains(msg, "key team limit "+each+" of tag project=atlas") {
				t.Errorf("refusal message %q; want it to name key team's limit %s and tag project=atlas", msg, each)
			}
			if r := as("project=zeus"); r.status != http.StatusOK {
				t.Errorf("zeus after atlas's refusal: %d %s; want 200", r.status, r.body)
			}
			if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false)); r.status != http.StatusOK {
				t.Errorf("no tags (the per-project limit does not apply): %d %s; want 200", r.status, r.body)
			}
			var tags string
			rid := first.header.Get("X-Tokenbudget-Request-Id")
			if err := e.flushedDB().QueryRowContext(context.Background(), `SELECT tags FROM usage WHERE key = 'team' AND request_id = ?`, rid).Scan(&tags); err != nil {
				t.Fatal(err)
			}
			if tags != "feature=search,project=atlas" {
				t.Errorf("the stored event's tags are %q; want feature=search,project=atlas", tags)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 0 {
				t.Errorf("the upstream got %s: %q; want none", proxy.TagsHeader, seen)
			}
		})
	}
}

// TestTagsHeaderInvalid: tags the tracker would refuse are 400 in the
// route's error shape naming the tag and the header; nothing reaches the
// upstream or is charged.
func TestTagsHeaderInvalid(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{}, okUpstream)
	id := e.limit("", "", "tokens", "1h", 1000)
	for _, c := range []struct {
		name, path, body, tags string
		wantMsg                []string
	}{
		{"no value", "/v1/chat/completions", chatBody("gpt-4o", 5, false), "project",
			[]string{`tags "project"`, "want name=value", proxy.TagsHeader}},
		{"a name twice", "/v1/chat/completions", chatBody("gpt-4o", 5, false), "project=a,PROJECT=b",
			[]string{`"project"`, "given twice"}},
		{"nine tags", "/v1/messages", `{"model":"claude-x","max_tokens":5,"messages":[]}`, "a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8,i=9",
			[]string{"has 9 tags; at most 8", proxy.TagsHeader}},
		{"a bad name", "/v1/messages", `{"model":"claude-x","max_tokens":5,"messages":[]}`, "pro ject=a",
			[]string{`"pro ject"`, "a tag name is letters"}},
	} {
		checkBadRequest(t, c.name, c.path, e.do(c.path, c.body, proxy.TagsHeader, c.tags), c.wantMsg)
	}
	if n := e.hits.Load(); n != 0 {
		t.Errorf("upstream called %d times; want 0", n)
	}
	if used, reserved := e.used(id); used != 0 || reserved != 0 {
		t.Errorf("used %d reserved %d; want 0 0", used, reserved)
	}
}

// TestBudgetShowsTagCounters: /v1/budget shows a per-project limit once
// per project with usage, each with its tag.
func TestBudgetShowsTagCounters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{}, okUpstream)
	each := e.limit("tag", "project=*", "tokens", "1h", 1000)
	for _, p := range []string{"atlas", "zeus", "atlas"} {
		if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false), proxy.TagsHeader, "project="+p); r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", p, r.status, r.body)
		}
	}
	if _, err := e.db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := e.get(proxy.BudgetPath, "Authorization", "Bearer "+e.secret)
	if r.status != http.StatusOK {
		t.Fatalf("/v1/budget: %d %s", r.status, r.body)
	}
	v := jsonBody(t, r.body)
	got := map[string]float64{}
	for _, l := range v["limits"].([]any) {
		s := l.(map[string]any)
		if s["id"] == each {
			tag, _ := s["tag"].(string)
			got[tag] = s["used"].(float64)
		}
	}
	if len(got) != 2 || got["project=atlas"] != 60 || got["project=zeus"] != 30 {
		t.Errorf("/v1/budget per-project rows = %v; want atlas 60 and zeus 30", got)
	}
}

// checkBadRequest checks that r, the answer to a request to path, is a 400
// invalid_request_error in the route's shape (Anthropic's on
// /v1/messages) whose message holds each of wantMsg, and returns its
// error object (nil when it is not one).
func checkBadRequest(t *testing.T, name, path string, r response, wantMsg []string) map[string]any {
	t.Helper()
	eo := errorObject(t, r.body)
	if r.status != http.StatusBadRequest || eo["type"] != "invalid_request_error" {
		t.Errorf("%s: got %d %s; want 400 invalid_request_error", name, r.status, r.body)
		return nil
	}
	msg, _ := eo["message"].(string)
	for _, want := range wantMsg {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: message %q lacks %q", name, msg, want)
		}
	}
	if path == "/v1/messages" {
		if v := jsonBody(t, r.body); v["type"] != "error" {
			t.Errorf("%s: not in Anthropic's shape: %s", name, r.body)
		}
	}
	return eo
}

// TestTagLimitGauge: the gauges of a limit per project report its most
// used project's counter, one series for the limit.
func TestTagLimitGauge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mode: proxy.ModeReserve, clock: true}, okUpstream)
	ctx := context.Background()
	if _, _, err := e.db.SetLimit(ctx, budget.LimitSpec{ID: "lim-projects", Key: "team", Scope: "tag", ScopeValue: "project=*", Window: "1h",
		Max: ptr(int64(50)), Alerts: &[]int{90}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.RecordSync(ctx,
		budget.Usage{RequestID: "u1", Key: "team", Tags: "project=a", Provider: "openai", Model: "gpt-4o", Input: 5, At: testNow},
		budget.Usage{RequestID: "u2", Key: "team", Tags: "project=b", Provider: "openai", Model: "gpt-4o", Input: 12, At: testNow},
		budget.Usage{RequestID: "u3", Key: "team", Provider: "openai", Model: "gpt-4o", Input: 30, At: testNow},
	); err != nil {
		t.Fatal(err)
	}
	e.advance(time.Minute)
	got := gauges(t, e.metrics())
	want := map[string]gauge{"lim-projects": {"key", "tokens", "team", 12, 50, 0.24}} // project b's
	if !maps.Equal(got, want) {
		t.Errorf("gauges:\n got %v\nwant %v", got, want)
	}
}
