package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
	"github.com/tokenbudget/tokenbudget/proxy/mock"
)

// TestAccessLog: one line per request the middleware answers, whatever
// the answer, with the key's name, provider, model, end user (when one is
// named), status, outcome, estimate, tokens charged and latency; never
// the secret, never the prompt.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	log := &syncBuffer{}
	e := newEnv(t, envOptions{clock: true, cfg: func(pc *proxy.Config) {
		pc.AccessLog = slog.New(slog.NewJSONHandler(log, nil))
	}}, okUpstream)
	e.limit("", "", "tokens", "1h", 80)
	const prompt = "the secret plans of the prompt"
	// estimate: ceil((4 + 30) / 4) + 4 = 13 input, 50 output
	body := `{"model":"gpt-4o","max_tokens":50,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	e.do("/v1/chat/completions", body)                            // 200, charged 10 + 20
	e.do("/v1/chat/completions", body, proxy.UserHeader, "alice") // 429: 63 > 50 left
	e.send("/v1/chat/completions", body, "Authorization", "Bearer tbk_nope")
	e.wait(1)
	e.do("/v1/nothing", body)
	e.do("/v1/chat/completions", `{"model":"gpt-4o","max_tokens":500,"messages":[]}`)
	type line struct {
		Msg            string   `json:"msg"`
		Status         int      `json:"status"`
		Outcome        string   `json:"outcome"`
		Key            string   `json:"key"`
		Provider       string   `json:"provider"`
		Model          string   `json:"model"`
		User           string   `json:"user"`
		RequestID      string   `json:"request_id"`
		EstimateInput  *int64   `json:"estimate_input"`
		EstimateOutput *int64   `json:"estimate_output"`
		Charged        *int64   `json:"charged_tokens"`
		Latency        *float64 `json:"latency_ms"`
	}
	var lines []line
	sc := bufio.NewScanner(strings.NewReader(log.String()))
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON line: %v\n%s", err, sc.Text())
		}
		lines = append(lines, l)
	}
	if len(lines) != 5 {
		t.Fatalf("%d access log lines; want 5:\n%s", len(lines), log.String())
	}
	ok := lines[0]
	if ok.Msg != "request" || ok.Status != 200 || ok.Outcome != proxy.OutcomeOK || ok.Key != "team" || ok.Provider != "openai" ||
		ok.Model != "gpt-4o" || !strings.HasPrefix(ok.RequestID, "rsv_") || ok.Charged == nil || *ok.Charged != 30 ||
		ok.EstimateInput == nil || *ok.EstimateInput != 13 || *ok.EstimateOutput != 50 || ok.Latency == nil || *ok.Latency < 0 {
		t.Errorf("a forwarded request's line: %+v", ok)
	}
	for i, want := range []struct {
		status        int
		outcome, key  string
		charged       int64
		withEstimate  bool
		withRequestID bool
	}{
		{200, proxy.OutcomeOK, "team", 30, true, true},
		{429, proxy.OutcomeRefused, "team", 0, true, false},
		{401, proxy.OutcomeUnauthorized, "", 0, false, false},
		{404, proxy.OutcomeNotFound, "", 0, false, false},
		{429, proxy.OutcomeRefused, "team", 0, true, false},
	} {
		l := lines[i]
		if l.Status != want.status || l.Outcome != want.outcome || l.Key != want.key || l.Charged == nil || *l.Charged != want.charged ||
			(l.EstimateInput != nil) != want.withEstimate || (l.RequestID != "") != want.withRequestID {
			t.Errorf("line %d: %+v; want %+v", i, l, want)
		}
	}
	if lines[0].User != "" || lines[1].User != "alice" {
		t.Errorf("end users: %q, %q; want none, then alice (the X-Budget-User header)", lines[0].User, lines[1].User)
	}
	if s := log.String(); strings.Contains(s, e.secret) || strings.Contains(s, "tbk_nope") || strings.Contains(s, prompt) {
		t.Errorf("the access log holds a secret or the prompt:\n%s", s)
	}
}

// TestModels: GET /v1/models needs a valid gateway key (401 otherwise,
// no upstream call), costs no budget, and reaches the upstream with the
// upstream credential of its family: Anthropic's when the request carries
// anthropic-version. The built-in mock answers it in both shapes.
func TestModels(t *testing.T) {
	t.Parallel()
	mock := &mock.Upstream{}
	e := newEnv(t, envOptions{}, func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/models") {
			mock.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet {
			t.Errorf("upstream got %s %s", r.Method, r.URL.Path)
		}
		anth := r.Header.Get("Anthropic-Version") != ""
		if anth && (r.Header.Get("X-Api-Key") != upstreamAnthropicKey || r.Header.Get("Authorization") != "") ||
			!anth && (r.Header.Get("Authorization") != "Bearer "+upstreamOpenAIKey || r.Header.Get("X-Api-Key") != "") {
			t.Errorf("upstream credential: authorization %q x-api-key %q (anthropic %v)", r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), anth)
		}
		if r.Header.Get("X-Test") == "401" {
			writeJSON(w, 401, `{"error":{"message":"bad key `+upstreamOpenAIKey+`"}}`)
			return
		}
		mock.ServeHTTP(w, r)
	})
	id := e.limit("", "", "requests", "1h", 1)
	get := func(path string, hdr ...string) response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.proxy.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e.wait(1)
		return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
	}
	if r := get("/v1/models"); r.status != http.StatusUnauthorized || e.hits.Load() != 0 {
		t.Errorf("no key: status %d, %d upstream calls; want 401 and none", r.status, e.hits.Load())
	}
	r := get("/v1/models", "Authorization", "Bearer "+e.secret)
	v := jsonBody(t, r.body)
	if data, _ := v["data"].([]any); r.status != 200 || v["object"] != "list" || len(data) == 0 {
		t.Errorf("openai shape: %d %s", r.status, r.body)
	}
	r = get("/v1/models", "X-Api-Key", e.secret, "Anthropic-Version", "2023-06-01")
	v = jsonBody(t, r.body)
	if data, _ := v["data"].([]any); r.status != 200 || v["has_more"] != false || len(data) == 0 {
		t.Errorf("anthropic shape: %d %s", r.status, r.body)
	}
	if r := get("/v1/models/gpt-4o", "Authorization", "Bearer "+e.secret); r.status != 200 || jsonBody(t, r.body)["id"] != "gpt-4o" {
		t.Errorf("one model: %d %s", r.status, r.body)
	}
	r = get("/v1/models", "Authorization", "Bearer "+e.secret, "X-Test", "401")
	if r.status != http.StatusBadGateway || strings.Contains(r.body, upstreamOpenAIKey) {
		t.Errorf("upstream 401: %d %s; want 502 without the upstream's body", r.status, r.body)
	}
	if used, reserved := e.used(id); used != 0 || reserved != 0 {
		t.Errorf("requests limit: used %d reserved %d; want 0 0", used, reserved)
	}
	// The one request the limit allows is still there.
	if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 5, false)); r.status != 200 {
		t.Errorf("chat after the model lists: %d", r.status)
	}
	resp, err := http.Post(e.proxy.URL+"/v1/models", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	e.wait(1)
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/models: %d; want 405", resp.StatusCode)
	}
}

// TestEventsWrittenMetric: tokenbudget_recorder_events_written_total
// counts the usage events written in either mode: recorded ones in check
// mode, committed reservations in reserve mode.
func TestEventsWrittenMetric(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		e := newEnv(t, envOptions{mode: mode}, okUpstream)
		id := e.limit("", "", "tokens", "1h", 1000)
		for range 3 {
			if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false)); r.status != 200 {
				t.Fatalf("%s: status %d", mode, r.status)
			}
		}
		e.used(id) // flushes what check mode queued
		resp, err := http.Get(e.proxy.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e.wait(1)
		m := regexp.MustCompile(`(?m)^tokenbudget_recorder_events_written_total (\S+)$`).FindStringSubmatch(string(b))
		if m == nil || m[1] != "3" {
			t.Errorf("%s: events written %v; want 3", mode, m)
		}
	}
}

// settleObserver is a proxy.Observer keeping what End was told of each
// request: its tags and its settlement's store error.
type settleObserver struct {
	mu   sync.Mutex
	tags []budget.Tags
	errs []error
}

func (o *settleObserver) Begin(r *http.Request) context.Context { return r.Context() }

func (o *settleObserver) End(_ context.Context, ob *proxy.Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var tags budget.Tags
	if ob.Info != nil {
		tags = ob.Info.Tags
	}
	o.tags = append(o.tags, tags)
	o.errs = append(o.errs, ob.SettleErr)
}

// TestAccessLogTagsAndFailedSettlement: a tagged request's access log
// line carries its tags, normalized, and the Observer sees them; a request
// whose settlement the store did not take (the tracker closed while it
// was upstream) is answered, and its line says settle_failed while the
// Observer's End gets the store's error (Observation.SettleErr), which a
// written settlement's End does not.
func TestAccessLogTagsAndFailedSettlement(t *testing.T) {
	t.Parallel()
	log := &syncBuffer{}
	obs := &settleObserver{}
	var closeTracker atomic.Bool
	var e *env
	e = newEnv(t, envOptions{mode: proxy.ModeCheck, cfg: func(pc *proxy.Config) {
		pc.AccessLog = slog.New(slog.NewJSONHandler(log, nil))
		pc.Observer = obs
	}}, func(w http.ResponseWriter, r *http.Request) {
		if closeTracker.Load() {
			if err := e.db.Tracker.Close(context.Background()); err != nil {
				t.Errorf("close the tracker: %v", err)
			}
		}
		okUpstream(w, r)
	})
	if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false), proxy.TagsHeader, "Project=atlas, feature=search"); r.status != http.StatusOK {
		t.Fatalf("tagged request: %d %s", r.status, r.body)
	}
	closeTracker.Store(true)
	if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, false)); r.status != http.StatusOK {
		t.Fatalf("request settled after the tracker closed: %d %s; want its answer", r.status, r.body)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(log.String()))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON line: %v\n%s", err, sc.Text())
		}
		lines = append(lines, l)
	}
	if len(lines) != 2 {
		t.Fatalf("%d access log lines; want 2:\n%s", len(lines), log.String())
	}
	if lines[0]["tags"] != "feature=search,project=atlas" || lines[0]["settle_failed"] != nil {
		t.Errorf("the tagged request's line has tags %v, settle_failed %v; want feature=search,project=atlas and no failure",
			lines[0]["tags"], lines[0]["settle_failed"])
	}
	if _, ok := lines[1]["tags"]; ok || lines[1]["settle_failed"] != true {
		t.Errorf("the untagged request's line has tags %v, settle_failed %v; want no tags and settle_failed true",
			lines[1]["tags"], lines[1]["settle_failed"])
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.errs) != 2 || obs.tags[0] != "feature=search,project=atlas" || obs.errs[0] != nil ||
		obs.tags[1] != "" || !errors.Is(obs.errs[1], budget.ErrClosed) {
		t.Errorf("the Observer saw tags %q and settlement errors %v; want the tags then none, no error then budget.ErrClosed", obs.tags, obs.errs)
	}
}
