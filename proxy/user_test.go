package proxy_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
	"github.com/tokenbudget/tokenbudget/proxy/mock"
)

// headerSpy is the mock provider, remembering the X-Budget-User headers
// of the last request it got.
type headerSpy struct {
	mock mock.Upstream
	mu   sync.Mutex
	seen []string
}

func (s *headerSpy) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.seen = r.Header.Values(proxy.UserHeader)
	s.mu.Unlock()
	s.mock.ServeHTTP(w, r)
}

func (s *headerSpy) last() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen
}

// TestEndUserSources: the end user is the X-Budget-User header, else the
// body's user (OpenAI), else metadata.user_id (Anthropic); a blank one or
// one of another type names none. The reservation carries it; the header
// never reaches the upstream.
func TestEndUserSources(t *testing.T) {
	t.Parallel()
	spy := &headerSpy{}
	e := newEnv(t, envOptions{}, spy.serve)
	const anthropic = `{"model":"claude-x","max_tokens":20,"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		name, path, body string
		header           string // X-Budget-User; "" sends none
		want             string
	}{
		{"chat user field", "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":20,"user":"alice"}`, "", "alice"},
		{"header wins over user", "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":20,"user":"alice"}`, "bob", "bob"},
		{"responses user field", "/v1/responses", `{"model":"gpt-4o","max_output_tokens":20,"input":"hi","user":" carol "}`, "", "carol"},
		{"anthropic metadata.user_id", "/v1/messages", anthropic + `,"metadata":{"user_id":"dave"}}`, "", "dave"},
		{"header wins over metadata.user_id", "/v1/messages", anthropic + `,"metadata":{"user_id":"dave"}}`, "erin", "erin"},
		{"blank header: the body's", "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":20,"user":"alice"}`, "   ", "alice"},
		{"blank user: metadata.user_id", "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":20,"user":" ","metadata":{"user_id":"frank"}}`, "", "frank"},
		{"user of another type: none", "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":20,"user":7,"metadata":{"user_id":null}}`, "", ""},
		{"none", "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":20}`, "", ""},
	} {
		hdr := []string{}
		if c.header != "" {
			hdr = append(hdr, proxy.UserHeader, c.header)
		}
		r := e.do(c.path, c.body, hdr...)
		if r.status != http.StatusOK {
			t.Errorf("%s: status %d %s; want 200", c.name, r.status, r.body)
			continue
		}
		if got := e.reservation(r.header.Get("X-Tokenbudget-Request-Id")).User; got != c.want {
			t.Errorf("%s: the reservation's user is %q; want %q", c.name, got, c.want)
		}
		if got := spy.last(); len(got) != 0 {
			t.Errorf("%s: the upstream got %s: %q; want none", c.name, proxy.UserHeader, got)
		}
	}
}

// TestParseRequestUser: ParseRequest reads the end user and the field it
// came from.
func TestParseRequestUser(t *testing.T) {
	t.Parallel()
	for body, want := range map[string][2]string{
		`{"user":"u1"}`: {"u1", "user"},
		`{"user":"u1","metadata":{"user_id":"u2"}}`: {"u1", "user"},
		`{"metadata":{"user_id":" u2 "}}`:           {"u2", "metadata.user_id"},
		`{"user":"","metadata":{"user_id":"u2"}}`:   {"u2", "metadata.user_id"},
		`{"user":["u1"],"metadata":{"user_id":7}}`:  {"", ""},
		`{"metadata":"u2"}`:                         {"", ""},
		`{"user":null,"metadata":{"user_id":{}}}`:   {"", ""},
	} {
		ri, err := proxy.ParseRequest(proxy.AnthropicMessages, []byte(body))
		if err != nil || ri.User != want[0] || ri.UserField != want[1] {
			t.Errorf("%s: user %q from %q (%v); want %q from %q", body, ri.User, ri.UserField, err, want[0], want[1])
		}
	}
}

// TestEndUserInvalid: an end user the tracker could not store (over
// budget.MaxNameLen bytes, a control character) is 400 in the route's
// shape naming the field, where it came from, and the value (in part);
// nothing reaches the upstream or is charged.
func TestEndUserInvalid(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: mode}, okUpstream)
			id := e.limit("", "", "tokens", "1h", 1000)
			long := strings.Repeat("u", budget.MaxNameLen+1)
			for _, c := range []struct {
				name, path, body, header string
				wantMsg                  []string
				wantParam                any // OpenAI's param; nil on Anthropic routes too
			}{
				{"header with a tab", "/v1/chat/completions", chatBody("gpt-4o", 5, false), "a\tb",
					[]string{`user "a\tb"`, "control characters", proxy.UserHeader}, nil},
				{"long user field", "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":5,"user":"` + long + `"}`, "",
					[]string{`user "uuuu`, "at most 256", "the body's user"}, "user"},
				{"metadata.user_id with a newline", "/v1/messages", `{"model":"claude-x","max_tokens":5,"metadata":{"user_id":"a\nb"}}`, "",
					[]string{`user "a\nb"`, "control characters", "metadata.user_id"}, nil},
			} {
				hdr := []string{"X-Api-Key", e.secret}
				if c.header != "" {
					hdr = append(hdr, proxy.UserHeader, c.header)
				}
				r := e.send(c.path, c.body, hdr...)
				e.wait(1)
				eo := checkBadRequest(t, c.name, c.path, r, c.wantMsg)
				if eo == nil {
					continue
				}
				if msg, _ := eo["message"].(string); strings.Contains(msg, long) {
					t.Errorf("%s: the message quotes the whole value", c.name)
				}
				if c.path != "/v1/messages" && eo["param"] != c.wantParam {
					t.Errorf("%s: param %v; want %v", c.name, eo["param"], c.wantParam)
				}
			}
			if n := e.hits.Load(); n != 0 {
				t.Errorf("upstream called %d times; want 0", n)
			}
			if used, reserved := e.used(id); used != 0 || reserved != 0 {
				t.Errorf("used %d reserved %d; want 0 0", used, reserved)
			}
			if strings.Contains(e.logs.String(), long) {
				t.Errorf("the log holds the long user")
			}
		})
	}
}

// TestPerUserLimit: a key's limit of scope user, value "*", gives each end
// user a counter of their own through the proxy, in both modes, streamed
// or not: alice is refused once her usage leaves no room while bob, on
// the same key, is still admitted; the refusal names her counter.
func TestPerUserLimit(t *testing.T) {
	t.Parallel()
	upstream := func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("X-Test"), "stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			// 5 input + 7 output, and text.
			w.Write([]byte(chatChunk + chatUsageChunk + "data: [DONE]\n\n"))
			return
		}
		okUpstream(w, r) // 10 input + 20 output
	}
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		for _, stream := range []bool{false, true} {
			name := string(mode)
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, envOptions{mode: mode}, upstream)
				max := int64(60)
				l, _, err := e.db.SetLimit(context.Background(), budget.LimitSpec{Key: "team", Scope: "user", ScopeValue: "*",
					Window: "1h", Max: &max})
				if err != nil {
					t.Fatal(err)
				}
				test := ""
				if stream {
					test = "stream"
				}
				// The estimate is 6 input + 50 output = 56: one request fits
				// in 60, the second (after 30, or 12 streamed) does not.
				as := func(user string) response {
					return e.do("/v1/chat/completions", chatBody("gpt-4o", 50, stream), proxy.UserHeader, user, "X-Test", test)
				}
				if r := as("alice"); r.status != http.StatusOK {
					t.Fatalf("alice's first request: %d %s; want 200", r.status, r.body)
				}
				r := as("alice")
				if r.status != http.StatusTooManyRequests {
					t.Fatalf("alice's second request: %d %s; want 429", r.status, r.body)
				}
				if msg, _ := errorObject(t, r.body)["message"].(string); !strings.Contains(msg, "key team limit "+l.ID+" of end user alice") ||
					!strings.Contains(msg, "scope user=*") {
					t.Errorf("refusal message %q; want it to name key team's limit %s, end user alice and scope user=*", msg, l.ID)
				}
				if r := as("bob"); r.status != http.StatusOK {
					t.Errorf("bob after alice's refusal: %d %s; want 200", r.status, r.body)
				}
				if r := e.do("/v1/chat/completions", chatBody("gpt-4o", 50, stream), "X-Test", test); r.status != http.StatusOK {
					t.Errorf("no end user (the per-user limit does not apply): %d %s; want 200", r.status, r.body)
				}
				if r := as("alice"); r.status != http.StatusTooManyRequests {
					t.Errorf("alice after bob: %d; want 429 still", r.status)
				}
			})
		}
	}
}

// TestEndUserChargedOnExpiry: a reservation recovery charges carries the
// request's end user, so the charge lands on that user's counter.
func TestEndUserChargedOnExpiry(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	// Its renewals wait for the test, which never fires them: the
	// reservation expires when the clock says so, however slow the run.
	e := newEnv(t, envOptions{storePath: true, clock: true, renewals: true},
		sseUpstream(anthropicStart+anthropicDelta, anthropicEnd, release))
	max := int64(150)
	ctx := context.Background()
	if _, _, err := e.db.SetLimit(ctx, budget.LimitSpec{Key: "team", Scope: "user", ScopeValue: "*", Window: "1h", Max: &max}); err != nil {
		t.Fatal(err)
	}
	const body = `{"model":"claude-x","max_tokens":100,"stream":true,"metadata":{"user_id":"alice"},"messages":[{"role":"user","content":"hi"}]}`
	resp := e.openStream(ctx, "/v1/messages", body)
	rid := resp.Header.Get("X-Tokenbudget-Request-Id")
	br := bufio.NewReader(resp.Body)
	readEvent(t, br)
	if u := e.reservation(rid).User; u != "alice" {
		t.Fatalf("the reservation's user is %q; want alice", u)
	}
	e.advance(3 * time.Minute)
	if rec, err := e.db.Recover(ctx, e.db.Now()); err != nil || rec.ChargedReservations != 1 {
		t.Fatalf("recover: %+v %v; want 1 charged", rec, err)
	}
	// Charged 6 + 100 = 106 to alice: her next 106 does not fit in 150;
	// bob's does.
	ask := func(user string) int {
		b := strings.Replace(body, `"stream":true,`, "", 1)
		b = strings.Replace(b, "alice", user, 1)
		r := e.send("/v1/messages", b, "X-Api-Key", e.secret)
		e.wait(1)
		return r.status
	}
	if got := ask("alice"); got != http.StatusTooManyRequests {
		t.Errorf("alice after the charge: %d; want 429", got)
	}
	close(release)
	if _, err := io.ReadAll(br); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	e.wait(1)
	if got := ask("bob"); got != http.StatusOK {
		t.Errorf("bob: %d; want 200", got)
	}
}
