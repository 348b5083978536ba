package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/admin"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/dashboard"
	"github.com/tokenbudget/tokenbudget/gatekey"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// The admin listener of `budget proxy --admin-listen ADDR`: the dashboard
// (package dashboard) and the admin API under /admin/v1/ (package admin)
// on an address of their own, never on the proxy's, so the proxy's
// clients cannot reach them and a firewall can tell them apart.
// On a loopback address it needs nothing more (and answers only to
// loopback Host names); anywhere else it needs --admin-token-env NAME,
// whose value a browser gives once (the form of the 401 page, or
// ?token=) for a session cookie, and a script as a bearer token.

// adminHelp is what `budget proxy -h` says of the admin listener.
const adminHelp = `Dashboard: --admin-listen ADDR serves a web dashboard of the
budget on an address of its own (off by default; /metrics and /healthz
stay on --listen): every limit as a bar of used, reserved and left with its
reset and forecast, filters by key, team and org, the alerts, the recent
refusals, the parked providers, a burn-down page per limit and a 30-day
spend page per key. A loopback address (127.0.0.1:8081, localhost:8081)
needs nothing more; any other needs --admin-token-env NAME, the
environment variable holding a token of at least 16 characters: open the
dashboard once with ?token=TOKEN (or type it in the form it shows) for a
session cookie, or send Authorization: Bearer TOKEN. The second line on
stdout is "budget dashboard on <URL>".

Admin API: the same listener serves /admin/v1/ (keys, limits, teams,
prices, alerts, report, usage, audit; GET /admin/v1/openapi.json describes
it) to "Authorization: Bearer TOKEN": the --admin-token-env token acts
as the global admin, 'budget admin token add' makes scoped ones (a team's,
an org's, read-only). On a loopback address without --admin-token-env it
answers GETs without a token; every change needs one. The dashboard's
forms (create, rotate or revoke a key; set, change or raise a limit) call
this API with the browser's session.
`

// adminOptions configure the admin listener.
type adminOptions struct {
	listen   string // "": none
	tokenEnv string // the variable holding the token ("": none)
}

// flags defines --admin-listen and --admin-token-env on fs.
func (o *adminOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.listen, "admin-listen", "", "serve the web dashboard on this `address` (loopback, or with --admin-token-env)")
	fs.StringVar(&o.tokenEnv, "admin-token-env", "", "environment `variable` holding the dashboard's token (required off loopback)")
}

// token checks the options against the environment and returns the
// dashboard's token ("" for none).
func (o *adminOptions) token(getenv func(string) string) (string, error) {
	if o.listen == "" {
		if o.tokenEnv != "" {
			return "", usagef("proxy", "--admin-token-env needs --admin-listen")
		}
		return "", nil
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return "", budget.Invalid("admin-listen", o.listen, "want an address such as 127.0.0.1:8081")
	}
	var token string
	if o.tokenEnv != "" {
		if strings.ContainsAny(o.tokenEnv, "= \t") {
			return "", budget.Invalid("admin-token-env", o.tokenEnv, "want an environment variable name")
		}
		if token = strings.TrimSpace(getenv(o.tokenEnv)); token == "" {
			return "", budget.Invalid("admin-token-env", o.tokenEnv, "names an empty or unset variable")
		}
		if len(token) < dashboard.MinTokenLen {
			return "", budget.Invalid("admin-token-env", o.tokenEnv, fmt.Sprintf("holds a token of %d characters; use a random one of at least %d (openssl rand -hex 16)",
				len(token), dashboard.MinTokenLen))
		}
	} else if !dashboard.IsLoopback(o.listen) {
		return "", budget.Invalid("admin-listen", o.listen, "is not a loopback address: the dashboard there needs --admin-token-env NAME")
	}
	return token, nil
}

// adminServer is a running admin listener.
type adminServer struct {
	url      string // "http://127.0.0.1:8081" ("" when there is none)
	srv      *http.Server
	refusals *proxy.Refusals
}

// startAdmin serves the dashboard of p on o.admin.listen, if set, and
// returns api (the proxy's handler) recording its refusals for it.
func (p *runningProxy) startAdmin(m *Main, o proxyOptions, api http.Handler) (http.Handler, error) {
	getenv := m.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	token, err := o.admin.token(getenv)
	if err != nil || o.admin.listen == "" {
		return api, err
	}
	p.admin.refusals = proxy.NewRefusals(0)
	p.admin.refusals.Now = m.Now
	log := o.log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d, err := dashboard.New(dashboard.Config{Tracker: p.tracker, Now: m.Now, Logger: log, Refusals: p.refusalList, Manage: true})
	if err != nil {
		return nil, err
	}
	pages, err := dashboard.Protect(d, o.admin.listen, token)
	if err != nil {
		return nil, err
	}
	tokens, _ := p.store.(gatekey.AdminStore)
	adminAPI, err := admin.New(admin.Config{Tracker: p.tracker, Keys: p.keyStore, Now: m.Now, Token: token, Tokens: tokens,
		OpenReads: token == "", Logger: log})
	if err != nil {
		return nil, err
	}
	h := http.NewServeMux()
	h.Handle(admin.Prefix, adminAPI)
	h.Handle("/", pages)
	ln, err := net.Listen("tcp", o.admin.listen)
	if err != nil {
		return nil, fmt.Errorf("admin listen on %s: %w", o.admin.listen, err)
	}
	p.admin.url = "http://" + ln.Addr().String()
	p.admin.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		if err := p.admin.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			select {
			case p.served <- fmt.Errorf("admin serve: %w", err):
			default:
			}
		}
	}()
	return p.admin.refusals.Wrap(api, p.keys), nil
}

// refusalList is the proxy's recent refusals as the dashboard lists them.
func (p *runningProxy) refusalList() []dashboard.Refusal {
	rs := p.admin.refusals.List()
	out := make([]dashboard.Refusal, len(rs))
	for i, r := range rs {
		out[i] = dashboard.Refusal{At: r.At, Key: r.Key, LimitID: r.Limit, Code: r.Code}
	}
	return out
}

// printAdmin writes the dashboard's URL line, when there is a dashboard.
func (p *runningProxy) printAdmin(w io.Writer) {
	if p.admin.url != "" {
		fmt.Fprintf(w, "budget dashboard on %s/\n", p.admin.url)
	}
}

// stopAdmin stops the admin listener, waiting until ctx ends for the
// pages being served.
func (p *runningProxy) stopAdmin(ctx context.Context) {
	if p.admin.srv != nil {
		if err := p.admin.srv.Shutdown(ctx); err != nil {
			p.admin.srv.Close()
		}
	}
}

// keepDemo keeps the demo's proxy and dashboard up until ctx ends
// (`budget demo --keep`), saying where they are.
func (p *runningProxy) keepDemo(ctx context.Context, w io.Writer, secret string) error {
	fmt.Fprintf(w, "\nThe proxy and its dashboard stay up until interrupted (Ctrl-C):\n")
	fmt.Fprintf(w, "  dashboard  %s/\n", p.admin.url)
	fmt.Fprintf(w, "  proxy      %s/v1 (gateway key \"demo\": %s)\n", p.url, secret)
	<-ctx.Done()
	return nil
}
