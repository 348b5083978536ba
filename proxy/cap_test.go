package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// honouring is an upstream that generates as many output tokens as the
// one cap field it reads says (uncapped: 5000, a model that runs long),
// reporting 6 prompt tokens, in the shape of the request's route. It
// records the bodies it got.
type honouring struct {
	field  string
	mu     sync.Mutex
	bodies []string
}

func (h *honouring) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.bodies = append(h.bodies, string(b))
	h.mu.Unlock()
	var top map[string]json.RawMessage
	json.Unmarshal(b, &top)
	out := int64(5000)
	if v, ok := top[h.field]; ok {
		out, _ = strconv.ParseInt(string(v), 10, 64)
	}
	if r.URL.Path == "/v1/responses" {
		writeJSON(w, 200, fmt.Sprintf(`{"id":"resp_1","object":"response","status":"completed","model":"o","output":[],`+
			`"usage":{"input_tokens":6,"output_tokens":%d,"total_tokens":%d}}`, out, 6+out))
		return
	}
	writeJSON(w, 200, chatUsageJSON(6, int(out)))
}

func (h *honouring) last() map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	var v map[string]any
	if len(h.bodies) > 0 {
		json.Unmarshal([]byte(h.bodies[len(h.bodies)-1]), &v)
	}
	return v
}

// TestReserveLargestCap: a request naming several caps is reserved at the
// largest, and forwarded unchanged, so an upstream that honours only
// max_tokens cannot take reserve mode over a limit with a small
// max_output_tokens beside a large max_tokens.
func TestReserveLargestCap(t *testing.T) {
	t.Parallel()
	up := &honouring{field: "max_tokens"}
	e := newEnv(t, envOptions{mode: proxy.ModeReserve}, up.serve)
	id := e.limit("", "", "tokens", "1h", 1000)
	// estimate: 6 input + 300 output (max_tokens, not max_output_tokens' 1)
	const body = `{"model":"gpt-4o","max_output_tokens":1,"max_tokens":300,"messages":[{"role":"user","content":"hi"}]}`
	const n = 16
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			codes <- e.send("/v1/chat/completions", body, "Authorization", "Bearer "+e.secret).status
		})
	}
	wg.Wait()
	e.wait(n)
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	used, reserved := e.used(id)
	if used > 1000 || reserved != 0 || count[200] != 3 || used != 3*306 {
		t.Errorf("statuses %v, used %d reserved %d; want 3 admitted at 306 each, the limit of 1000 never passed", count, used, reserved)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	for _, b := range up.bodies {
		if b != body {
			t.Errorf("forwarded body changed: %s", b)
		}
	}
}

// TestCapInjection: a request without a cap of its own is admitted on a
// nearly spent budget with the largest cap that fits the room left (up to
// the default max output), sent in the field its upstream reads, and
// charged no more than the room; once not even the floor of 16 fits it is
// refused. A client's own cap is never changed: one that does not fit is
// refused. Both modes.
func TestCapInjection(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, path, field, setting string
		body                       string // no cap
		choices                    int64
	}{
		{"chat: max_completion_tokens", "/v1/chat/completions", "max_completion_tokens", "",
			`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, 1},
		{"chat, n=2: the cap is per choice", "/v1/chat/completions", "max_completion_tokens", "",
			`{"model":"gpt-4o","n":2,"max_tokens":null,"messages":[{"role":"user","content":"hi"}]}`, 2},
		{"responses: max_output_tokens", "/v1/responses", "max_output_tokens", proxy.CapAuto,
			`{"model":"gpt-4o","input":[{"role":"user","content":"hi"}]}`, 1},
		{"chat, cap field max_tokens", "/v1/chat/completions", "max_tokens", proxy.CapMaxTokens,
			`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, 1},
	}
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		for _, c := range cases {
			t.Run(string(mode)+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				up := &honouring{field: c.field}
				e := newEnv(t, envOptions{mode: mode, cfg: func(pc *proxy.Config) { pc.CapField = c.setting }}, up.serve)
				id := e.limit("", "", "tokens", "1h", 1000)
				if _, err := e.db.RecordSync(context.Background(), budget.Usage{Key: "team", Provider: "openai", Model: "gpt-4o", Input: 900}); err != nil {
					t.Fatal(err)
				}
				// 100 left; the input estimate is 6: the output may have 94.
				wantCap := 94 / c.choices
				r := e.do(c.path, c.body)
				if r.status != 200 {
					t.Fatalf("status %d; want 200\n%s", r.status, r.body)
				}
				got := up.last()
				if got[c.field] != float64(wantCap) || r.header.Get("X-Tokenbudget-Max-Output") != strconv.FormatInt(wantCap, 10) {
					t.Errorf("upstream got %s=%v, header %q; want %d", c.field, got[c.field], r.header.Get("X-Tokenbudget-Max-Output"), wantCap)
				}
				for _, f := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
					if _, ok := got[f]; ok && f != c.field && !(f == "max_tokens" && strings.Contains(c.body, `"max_tokens":null`)) {
						t.Errorf("upstream got %s too: %v", f, got)
					}
				}
				// The upstream reports one choice, generated up to the cap.
				if used, reserved := e.used(id); used != 906+wantCap || reserved != 0 {
					t.Errorf("used %d reserved %d; want %d 0", used, reserved, 906+wantCap)
				}
				// A client's own cap that does not fit is refused, not lowered.
				r = e.do(c.path, strings.Replace(c.body, `"model"`, `"max_completion_tokens":50,"model"`, 1))
				if r.status != http.StatusTooManyRequests {
					t.Errorf("own cap over the room: status %d; want 429", r.status)
				}
			})
		}
	}
}

// TestCapInjectionFloor: the injected cap is refused only when not even
// 16 output tokens fit; a client's own cap that fits is sent as it was.
func TestCapInjectionFloor(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		up := &honouring{field: "max_completion_tokens"}
		// A max client wait over the hour: whether to retry is then the
		// refusal's own answer.
		e := newEnv(t, envOptions{mode: mode, cfg: func(pc *proxy.Config) { pc.MaxClientWait = 2 * time.Hour }}, up.serve)
		id := e.limit("", "", "tokens", "1h", 1000)
		if _, err := e.db.RecordSync(context.Background(), budget.Usage{Key: "team", Provider: "openai", Model: "gpt-4o", Input: 978}); err != nil {
			t.Fatal(err)
		}
		// 22 left: 6 input + the floor of 16 fit exactly.
		r := e.do("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
		if r.status != 200 || up.last()["max_completion_tokens"] != 16.0 {
			t.Errorf("%s: at the floor: status %d, cap %v; want 200 16", mode, r.status, up.last()["max_completion_tokens"])
		}
		// Refused at the floor: it needs 6 + 16, which fits the limit once
		// the window resets, so it may be retried (decided on the default
		// max output of 4096 it could never fit).
		r = e.do("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
		lim, _ := errorObject(t, r.body)["limit"].(map[string]any)
		if r.status != http.StatusTooManyRequests || r.header.Get("X-Should-Retry") != "" || lim["estimate"] != 22.0 || lim["retryable"] != true {
			t.Errorf("%s: nothing left: status %d x-should-retry %q limit %v; want 429, retryable, estimate 22", mode, r.status, r.header.Get("X-Should-Retry"), lim)
		}
		if used, _ := e.used(id); used != 1000 {
			t.Errorf("%s: used %d; want 1000", mode, used)
		}
	}
	up := &honouring{field: "max_completion_tokens"}
	e := newEnv(t, envOptions{}, up.serve)
	const own = `{"model":"gpt-4o","max_completion_tokens":7,"messages":[{"role":"user","content":"hi"}]}`
	if r := e.do("/v1/chat/completions", own); r.status != 200 || up.bodies[0] != own || r.header.Get("X-Tokenbudget-Max-Output") != "" {
		t.Errorf("own cap: status %d, forwarded %s, header %q; want it unchanged and no header", r.status, up.bodies[0], r.header.Get("X-Tokenbudget-Max-Output"))
	}
}

// TestCapInjectionConcurrent: 64 concurrent requests without a cap never
// take a limit over it: each reservation holds the cap it injects, decided
// in the writer's transaction, and the upstream cannot generate more. With
// a default max output of 100, 18 get it whole, one gets the 86 left after
// its input, and the rest are refused, in any order.
func TestCapInjectionConcurrent(t *testing.T) {
	t.Parallel()
	up := &honouring{field: "max_completion_tokens"}
	e := newEnv(t, envOptions{mode: proxy.ModeReserve, cfg: func(pc *proxy.Config) { pc.DefaultMaxOutput = 100 }}, up.serve)
	id := e.limit("", "", "tokens", "1h", 2000)
	const n = 64
	type answer struct {
		status int
		cap    string
	}
	answers := make(chan answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			r := e.send("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer "+e.secret)
			answers <- answer{r.status, r.header.Get("X-Tokenbudget-Max-Output")}
		})
	}
	close(start)
	wg.Wait()
	e.wait(n)
	close(answers)
	caps := map[string]int{}
	refused := 0
	for a := range answers {
		switch a.status {
		case 200:
			caps[a.cap]++
		case 429:
			refused++
		default:
			t.Errorf("status %d", a.status)
		}
	}
	used, reserved := e.used(id)
	if used != 2000 || reserved != 0 || caps["100"] != 18 || caps["86"] != 1 || len(caps) != 2 || refused != n-19 {
		t.Errorf("caps %v, refused %d, used %d reserved %d; want 18 x 100, 1 x 86, %d refused, used 2000", caps, refused, used, reserved, n-19)
	}
	if got := e.hits.Load(); got != 19 {
		t.Errorf("upstream called %d times; want 19", got)
	}
}
