package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// get sends GET path with the headers given (name, value, ...), waits for
// the proxy to finish it, and returns the answer.
func (e *env) get(path string, header ...string) response {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.proxy.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		e.t.Fatal(err)
	}
	e.wait(1)
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// selfServiceEnv: keys "team" and "other" in team eng, each with a limit
// of its own, "other" also with a per-user limit; eng has a limit; and a
// default limit of input tokens. team used 10 tokens, other 20 for end
// user bob.
func selfServiceEnv(t *testing.T) (e *env, otherSecret string, ids map[string]string) {
	e = newEnv(t, envOptions{mode: proxy.ModeReserve, clock: true}, okUpstream)
	ctx := context.Background()
	var err error
	if otherSecret, err = proxy.AddKey(ctx, e.db.KeyStore(), "other", testNow); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.SetTeam(ctx, "eng", ""); err != nil {
		t.Fatal(err)
	}
	ids = map[string]string{}
	for name, spec := range map[string]budget.LimitSpec{
		"team":      {Key: "team", ID: "lim-team"},
		"other":     {Key: "other", ID: "lim-other"},
		"other-per": {Key: "other", Scope: "user", ScopeValue: budget.AllUsers, ID: "lim-other-users"},
		"eng":       {Team: "eng", ID: "lim-eng"},
		"eng-per":   {Team: "eng", Scope: "user", ScopeValue: budget.AllUsers, ID: "lim-eng-users"},
		"default":   {Default: true, Metric: "input", ID: "lim-default"}, // no key has one of its own
	} {
		max := int64(1000)
		spec.Window, spec.Max = "1h", &max
		l, _, err := e.db.SetLimit(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = l.ID
	}
	for _, k := range []string{"team", "other"} {
		if err := e.db.SetKeyTeam(ctx, k, "eng"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.db.RecordSync(ctx,
		budget.Usage{RequestID: "u1", Key: "team", Provider: "openai", Model: "gpt-4o", Input: 10, At: testNow},
		budget.Usage{RequestID: "u2", Key: "other", User: "bob", Provider: "openai", Model: "gpt-4o", Input: 20, At: testNow},
	); err != nil {
		t.Fatal(err)
	}
	e.advance(10 * time.Minute)
	return e, otherSecret, ids
}

// TestSelfService: GET /v1/budget answers each key with the limits that
// apply to it (its own, its team's, the default with its usage) as
// inspect --json prints them, and nothing of the other key's.
func TestSelfService(t *testing.T) {
	t.Parallel()
	e, otherSecret, ids := selfServiceEnv(t)
	for _, c := range []struct {
		key, secret string
		want        []string // limit ids
		used        map[string]float64
		never       []string // in no form in the body
	}{
		// The team's per-user limit counts bob, other's end user: team's
		// holder sees the limit, with no user and no usage.
		{"team", e.secret, []string{ids["team"], ids["eng"], ids["eng-per"], ids["default"]},
			map[string]float64{ids["team"]: 10, ids["eng"]: 30, ids["eng-per"]: 0, ids["default"]: 10}, []string{"other", "bob", "lim-other"}},
		{"other", otherSecret, []string{ids["other"], ids["other-per"], ids["eng"], ids["eng-per"], ids["default"]},
			map[string]float64{ids["other"]: 20, ids["other-per"]: 20, ids["eng"]: 30, ids["eng-per"]: 0, ids["default"]: 20}, []string{`"key":"team"`, `"owner":"team"`, "lim-team"}},
	} {
		for _, auth := range [][]string{{"Authorization", "Bearer " + c.secret}, {"X-Api-Key", c.secret}} {
			r := e.get(proxy.BudgetPath, auth...)
			if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
				t.Fatalf("GET /v1/budget as %s (%s): %d %s %s; want 200 JSON", c.key, auth[0], r.status, r.header.Get("Content-Type"), r.body)
			}
			for _, s := range c.never {
				if strings.Contains(r.body, s) {
					t.Errorf("GET /v1/budget as %s shows %s:\n%s", c.key, s, r.body)
				}
			}
			v := jsonBody(t, r.body)
			if v["key"] != c.key || len(v) != 2 {
				t.Errorf("as %s: got key %v in %v; want {key, limits}", c.key, v["key"], keysOf(v))
			}
			var got []string
			for _, l := range v["limits"].([]any) {
				o := l.(map[string]any)
				got = append(got, o["id"].(string))
				for _, f := range []string{"id", "level", "owner", "used", "reserved", "remaining", "window_start", "reset_at",
					"forecast_used", "exhausts_at", "user", "alerts"} {
					if _, ok := o[f]; !ok {
						t.Errorf("as %s: limit %s has no %s", c.key, o["id"], f)
					}
				}
				if o["used"] != c.used[o["id"].(string)] {
					t.Errorf("as %s: limit %s used %v; want %v", c.key, o["id"], o["used"], c.used[o["id"].(string)])
				}
			}
			if !sameSet(got, c.want) {
				t.Errorf("as %s: limits %v; want %v", c.key, got, c.want)
			}
			// The objects of inspect --json, from the same code (but the
			// team's per-user limit, shown here without its users).
			rep, err := e.db.Inspect(context.Background(), c.key, e.db.Now(), 0)
			if err != nil {
				t.Fatal(err)
			}
			var sts []budget.Status
			var fs []*budget.Forecast
			for i, st := range rep.Limits {
				if st.Limit.ID != ids["eng-per"] {
					sts, fs = append(sts, st), append(fs, rep.Forecasts[i])
				}
			}
			want, _ := json.Marshal(jsonview.Statuses(sts, fs, rep.At))
			var mine []any
			for _, l := range v["limits"].([]any) {
				if l.(map[string]any)["id"] != ids["eng-per"] {
					mine = append(mine, l)
				}
			}
			gotJSON, _ := json.Marshal(mine)
			if !jsonEqual(t, gotJSON, want) {
				t.Errorf("as %s: limits\n%s\nwant inspect's\n%s", c.key, gotJSON, want)
			}
		}
	}
	if e.hits.Load() != 0 {
		t.Errorf("the upstream was called %d times", e.hits.Load())
	}
}

// TestSelfServiceAuth: without a valid key GET /v1/budget is the 401 of
// the other routes, in each family's shape; other methods are 405.
func TestSelfServiceAuth(t *testing.T) {
	t.Parallel()
	e, _, _ := selfServiceEnv(t)
	chat := errorObject(t, e.send("/v1/chat/completions", chatBody("gpt-4o", 5, false)).body)
	e.wait(1)
	for _, h := range [][]string{nil, {"Authorization", "Bearer tbk_made_up"}, {"X-Api-Key", "nope"}} {
		r := e.get(proxy.BudgetPath, h...)
		if r.status != http.StatusUnauthorized {
			t.Errorf("GET /v1/budget with %v: %d %s; want 401", h, r.status, r.body)
			continue
		}
		if got := errorObject(t, r.body); got["code"] != chat["code"] || got["type"] != chat["type"] || got["message"] != chat["message"] {
			t.Errorf("GET /v1/budget with %v: error %v; want the chat route's %v", h, got, chat)
		}
	}
	r := e.get(proxy.BudgetPath, "Anthropic-Version", "2023-06-01")
	if v := jsonBody(t, r.body); r.status != http.StatusUnauthorized || v["type"] != "error" {
		t.Errorf("GET /v1/budget with anthropic-version, no key: %d %s; want Anthropic's 401", r.status, r.body)
	}
	if r := e.do(proxy.BudgetPath, ""); r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "GET" {
		t.Errorf("POST /v1/budget: %d %s; want 405 allowing GET", r.status, r.body)
	}
}

// TestSelfServiceFree: asking costs nothing: no event, no reservation, no
// usage on any limit, nothing upstream.
func TestSelfServiceFree(t *testing.T) {
	t.Parallel()
	e, _, _ := selfServiceEnv(t)
	ctx := context.Background()
	state := func() string {
		if _, err := e.db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		rep, err := e.db.Inspect(ctx, "", e.db.Now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if _, err := e.db.Export(ctx, testNow.Add(-time.Hour), testNow.Add(time.Hour), "", func(budget.Usage) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(struct {
			Limits []jsonview.Status
			Events int
		}{jsonview.Statuses(rep.Limits, nil, rep.At), n})
		return string(b)
	}
	before := state()
	for range 5 {
		if r := e.get(proxy.BudgetPath, "Authorization", "Bearer "+e.secret); r.status != http.StatusOK {
			t.Fatalf("GET /v1/budget: %d %s", r.status, r.body)
		}
	}
	if after := state(); after != before {
		t.Errorf("after 5 GET /v1/budget:\n%s\nbefore:\n%s", after, before)
	}
	if e.hits.Load() != 0 {
		t.Errorf("the upstream was called %d times", e.hits.Load())
	}
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// jsonEqual reports whether two JSON documents hold the same value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	x, _ := json.Marshal(va)
	y, _ := json.Marshal(vb)
	return string(x) == string(y)
}
