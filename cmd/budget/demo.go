package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
	"github.com/tokenbudget/tokenbudget/proxy/mock"
)

const demoHelp = `usage: budget demo [--db PATH] [--keep]

Shows the proxy at work, offline, in a second: on a fresh database (a
temporary one, deleted afterwards, unless --db names a file that does not
exist yet, which is kept) it starts 'budget proxy' and the built-in mock
provider in-process on loopback, creates the gateway key "demo" with a limit
of 240 tokens per hour, and sends a burst of OpenAI- and Anthropic-shaped
requests through the proxy, streamed and not (one without max_tokens, which
the proxy gives the largest cap that fits), and a Gemini and a Bedrock
one, until the budget refuses them
with 429. It prints what each request got and was charged, then the
'budget inspect' table, and exits 0. It never reads $BUDGET_DB.

The proxy's web dashboard is on too (as with --admin-listen 127.0.0.1:0):
its URL is printed under the proxy's. With --keep the proxy and the dashboard stay up
after the demo, until interrupted (Ctrl-C), with the demo key's secret
printed to send more requests.

`

// demoLimit is the demo key's budget: tokens per hour.
const demoLimit = 240

// demoRequest is one request of the demo's burst.
type demoRequest struct {
	what   string
	path   string
	header string // "bearer", "x-api-key", "x-goog-api-key" or "wrong"
	body   string
}

var demoRequests = []demoRequest{
	{"chat, wrong key", "/v1/chat/completions", "wrong",
		`{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"user","content":"Hello?"}]}`},
	{"chat gpt-4o-mini, no max_tokens", "/v1/chat/completions", "bearer",
		`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello in five words."}]}`},
	{"chat gpt-4o-mini, streamed", "/v1/chat/completions", "bearer",
		`{"model":"gpt-4o-mini","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Count to three."}]}`},
	{"responses gpt-4.1-mini, streamed", "/v1/responses", "bearer",
		`{"model":"gpt-4.1-mini","max_output_tokens":64,"stream":true,"input":"Name a colour."}`},
	{"messages claude-sonnet-4-5", "/v1/messages", "x-api-key",
		`{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Name a planet."}]}`},
	{"messages claude-sonnet-4-5, streamed", "/v1/messages", "x-api-key",
		`{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Name a river."}]}`},
	{"embeddings text-embedding-3-small", "/v1/embeddings", "bearer",
		`{"model":"text-embedding-3-small","input":"tokens are money"}`},
	{"gemini gemini-2.5-flash", "/v1beta/models/gemini-2.5-flash:generateContent", "x-goog-api-key",
		`{"contents":[{"role":"user","parts":[{"text":"Name a mountain."}]}],"generationConfig":{"maxOutputTokens":8}}`},
	{"bedrock converse claude-3-5-haiku", "/model/anthropic.claude-3-5-haiku-20241022-v1:0/converse", "bearer",
		`{"messages":[{"role":"user","content":[{"text":"Name a sea."}]}],"inferenceConfig":{"maxTokens":8}}`},
	{"chat gpt-4o-mini", "/v1/chat/completions", "bearer",
		`{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"user","content":"One more, please."}]}`},
	{"messages claude-sonnet-4-5, max_tokens 4000", "/v1/messages", "x-api-key",
		`{"model":"claude-sonnet-4-5","max_tokens":4000,"messages":[{"role":"user","content":"Write an essay."}]}`},
}

func (m *Main) runDemo(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("demo")
	dbPath := fs.String("db", "", "keep the demo database at this new `path` (default a temporary file)")
	keep := fs.Bool("keep", false, "keep the proxy and its dashboard up after the demo, until interrupted")
	pos, err := m.parseArgs(fs, demoHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("demo", pos); err != nil {
		return err
	}
	path := *dbPath
	if path != "" {
		if isPostgres(path) || !sqliteMissing(path) {
			return budget.Invalid("db", path, "the demo needs a new SQLite file: name one that does not exist")
		}
	} else {
		dir, err := os.MkdirTemp("", "budget-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "demo.db")
	}

	p, err := m.startProxy(ctx, proxyOptions{dsn: path, listen: "127.0.0.1:0", mock: true, mode: proxy.ModeReserve, leases: true,
		maxBody: proxy.DefaultMaxBody, maxOutput: proxy.DefaultMaxOutput, imageTokens: proxy.DefaultImageTokens, log: discardLogger(),
		admin: adminOptions{listen: "127.0.0.1:0"}})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, p.stop(ctx)) }()

	secret, err := proxy.AddKey(ctx, p.keyStore, "demo", m.Now())
	if err != nil {
		return err
	}
	max := int64(demoLimit)
	lim, _, err := p.tracker.SetLimit(ctx, budget.LimitSpec{Key: "demo", Window: "1h", Max: &max})
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "proxy %s -> mock provider %s (mode reserve), database %s\n", p.url, p.upstream, path)
	p.printAdmin(m.Stdout)
	fmt.Fprintf(m.Stdout, "gateway key \"demo\" created; limit %s: %d tokens per %s for key demo\n\n", lim.ID, demoLimit, lim.Window)

	client := &http.Client{Timeout: 10 * time.Second}
	w := newTable(m.Stdout)
	fmt.Fprintln(w, "#\tREQUEST\tSTATUS\tUSAGE IN RESPONSE\tX-RATELIMIT-REMAINING\tCHARGED\tREMAINING\tNOTE")
	var notes []string
	for i, dr := range demoRequests {
		before := demoUsed(ctx, p.tracker)
		res, err := demoSend(ctx, client, p.url, secret, dr)
		if err != nil {
			return fmt.Errorf("demo request %d: %w", i+1, err)
		}
		// The proxy has queued the request's settlement; the flush writes it.
		p.inflight.Wait()
		if _, err := p.tracker.Flush(ctx); err != nil {
			return fmt.Errorf("demo request %d: %w", i+1, err)
		}
		after := demoUsed(ctx, p.tracker)
		charged := "-"
		if after.used != before.used {
			charged = itoa(after.used - before.used)
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%s\t%d\t%s\n", i+1, dr.what, res.status, res.usage, res.remaining, charged, after.remaining, res.note)
		if res.message != "" {
			notes = append(notes, fmt.Sprintf("%d: %s", i+1, res.message))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(m.Stdout, "\nX-RATELIMIT-REMAINING is the x-ratelimit-remaining-tokens header of the response: the room left")
	fmt.Fprintln(m.Stdout, "while the request's estimate was held; CHARGED is the usage the proxy recorded (the response's,")
	fmt.Fprintln(m.Stdout, "or the estimate when it reports none) and REMAINING what is left after it.")
	fmt.Fprintln(m.Stdout)
	for _, n := range notes {
		fmt.Fprintln(m.Stdout, n)
	}
	fmt.Fprintln(m.Stdout, "\nbudget inspect:")
	r, err := p.tracker.Inspect(ctx, "", m.Now(), defaultRollovers)
	if err != nil {
		return err
	}
	if err := writeReport(m, &r); err != nil || !*keep {
		return err
	}
	return p.keepDemo(ctx, m.Stdout, secret)
}

type demoState struct{ used, remaining int64 }

// demoUsed reads the demo key's limit as it stands now.
func demoUsed(ctx context.Context, t *budget.Tracker) demoState {
	d, err := t.Check(ctx, budget.Request{Key: "demo"})
	if err != nil || len(d.Limits) == 0 {
		return demoState{}
	}
	return demoState{used: d.Limits[0].Used, remaining: d.Limits[0].Remaining()}
}

// demoResult is what one request got.
type demoResult struct {
	status    int
	usage     string // what the response itself reported
	remaining string // its x-ratelimit-remaining-tokens header
	note      string
	message   string // an error's message
}

// demoSend sends one request and reads its answer as a client would.
func demoSend(ctx context.Context, c *http.Client, base, secret string, dr demoRequest) (demoResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+dr.path, strings.NewReader(dr.body))
	if err != nil {
		return demoResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	switch dr.header {
	case "bearer":
		req.Header.Set("Authorization", "Bearer "+secret)
	case "x-api-key":
		req.Header.Set("X-Api-Key", secret)
		req.Header.Set("Anthropic-Version", "2023-06-01")
	case "x-goog-api-key":
		req.Header.Set("X-Goog-Api-Key", secret)
	default:
		req.Header.Set("Authorization", "Bearer tbk_not-a-key")
	}
	resp, err := c.Do(req)
	if err != nil {
		return demoResult{}, err
	}
	defer resp.Body.Close()
	res := demoResult{status: resp.StatusCode, usage: "-", remaining: "-"}
	if rem := resp.Header.Get("X-Ratelimit-Remaining-Tokens"); rem != "" {
		res.remaining = rem
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		res.message = errorMessage(body)
		var notes []string
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			notes = append(notes, "retry-after "+ra+"s")
		}
		if resp.Header.Get("X-Should-Retry") == "false" {
			notes = append(notes, "x-should-retry: false")
		}
		res.note = strings.Join(notes, ", ")
		return res, nil
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return res, err
	}
	ct := resp.Header.Get("Content-Type")
	in, out, found := mock.Usage(dr.path, ct, body)
	if strings.HasPrefix(ct, "text/event-stream") {
		res.note = fmt.Sprintf("streamed, %d events", bytes.Count(body, []byte("\n\n")))
		if dr.path == "/v1/chat/completions" && !found {
			res.note += "; usage chunk added upstream, stripped for the client"
		}
	}
	if found {
		res.usage = fmt.Sprintf("%d in + %d out", in, out)
	}
	if c := resp.Header.Get("X-Tokenbudget-Max-Output"); c != "" {
		// The request had no cap: the proxy gave it the largest that fits.
		res.note = strings.TrimPrefix(res.note+"; output cap "+c+" injected", "; ")
	}
	return res, nil
}

// errorMessage is the message of an OpenAI- or Anthropic-shaped error body.
func errorMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
		return strings.TrimSpace(string(body))
	}
	if e.Error.Code != "" {
		return e.Error.Code + ": " + e.Error.Message
	}
	return e.Error.Message
}
