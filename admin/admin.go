// Package admin is the HTTP admin API of `budget proxy --admin-listen`:
// keys, limits, raises, teams, prices, alerts, the report, the usage
// history and the audit log, as JSON in the shapes the CLI's --json
// prints (package jsonview), under /admin/v1/. It holds no domain logic:
// every answer is one call of the Tracker or the gateway key store, the
// calls the CLI makes.
//
// Access (auth.go): the global admin token, scoped admin tokens (a team's,
// an org's; read-only or not), browser sessions, and credential-less GETs
// on a loopback listener. A scoped token sees only its scope in every
// listing, report and export and is answered 403 for anything else
// (scope.go). Cross-origin writes are refused (http.CrossOriginProtection:
// Fetch Metadata, then Origin against Host). Every change runs with the
// principal as its actor (budget.WithActor), which the audit log records
// in the change's own transaction.
//
// Errors are {"error": {"code", "message", "field"}} (errors.go).
//
// Concurrency: a Handler is safe for concurrent use. It keeps only the
// browser sessions in memory; everything else is read from the Tracker on
// each request.
package admin

import (
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

// Prefix is where the API is served.
const Prefix = "/admin/v1/"

// Config configures a Handler.
type Config struct {
	// Tracker is read and changed on each request. (Required.)
	Tracker *budget.Tracker
	// Keys is the gateway key store. (Required.)
	Keys gatekey.Store
	// Now is the current instant. (Optional; default Tracker.Now.)
	Now func() time.Time
	// Token is the global admin token ("": none).
	Token string
	// OpenReads answers GETs without credentials (a loopback listener
	// without a global token, as the dashboard's pages are). Writes
	// always need a token.
	OpenReads bool
	// Tokens is the admin token store: scoped tokens. (Optional; nil:
	// only Token.)
	Tokens gatekey.AdminStore
	// Logger gets the errors that fail a request. (Optional; default
	// slog.Default().)
	Logger *slog.Logger
}

// Handler serves the API under Prefix.
type Handler struct {
	cfg      Config
	mux      *http.ServeMux
	cop      *http.CrossOriginProtection
	sessions sessions
	routes   []route // routes, which the OpenAPI document lists
}

// handlerFunc serves one route for an authenticated principal; an error
// is answered as errors.go says.
type handlerFunc func(h *Handler, w http.ResponseWriter, r *http.Request, p *Principal) error

// route is one method and path of the API.
type route struct {
	Method, Path string
	serve        handlerFunc
	// Open routes are served before authentication (signing in).
	Open bool
}

// routes are every route of the API; openapi.go documents each.
var routes = []route{
	{Method: "POST", Path: "/admin/v1/session", serve: (*Handler).openSession, Open: true},
	{Method: "DELETE", Path: "/admin/v1/session", serve: (*Handler).closeSession, Open: true},
	{Method: "GET", Path: "/admin/v1/session", serve: (*Handler).whoami},
	{Method: "GET", Path: "/admin/v1/keys", serve: (*Handler).listKeys},
	{Method: "POST", Path: "/admin/v1/keys", serve: (*Handler).createKey},
	{Method: "GET", Path: "/admin/v1/keys/{name}", serve: (*Handler).getKey},
	{Method: "PATCH", Path: "/admin/v1/keys/{name}", serve: (*Handler).patchKey},
	{Method: "DELETE", Path: "/admin/v1/keys/{name}", serve: (*Handler).revokeKey},
	{Method: "POST", Path: "/admin/v1/keys/{name}/rotate", serve: (*Handler).rotateKey},
	{Method: "GET", Path: "/admin/v1/limits", serve: (*Handler).listLimits},
	{Method: "POST", Path: "/admin/v1/limits", serve: (*Handler).setLimit},
	{Method: "GET", Path: "/admin/v1/limits/{id}", serve: (*Handler).getLimit},
	{Method: "PATCH", Path: "/admin/v1/limits/{id}", serve: (*Handler).patchLimit},
	{Method: "DELETE", Path: "/admin/v1/limits/{id}", serve: (*Handler).deleteLimit},
	{Method: "POST", Path: "/admin/v1/limits/{id}/raises", serve: (*Handler).raiseLimit},
	{Method: "GET", Path: "/admin/v1/teams", serve: (*Handler).listTeams},
	{Method: "PUT", Path: "/admin/v1/teams/{name}", serve: (*Handler).putTeam},
	{Method: "DELETE", Path: "/admin/v1/teams/{name}", serve: (*Handler).deleteTeam},
	{Method: "GET", Path: "/admin/v1/prices", serve: (*Handler).listPrices},
	{Method: "POST", Path: "/admin/v1/prices", serve: (*Handler).setPrice},
	{Method: "GET", Path: "/admin/v1/alerts", serve: (*Handler).listAlerts},
	{Method: "GET", Path: "/admin/v1/report", serve: (*Handler).report},
	{Method: "GET", Path: "/admin/v1/usage", serve: (*Handler).usage},
	{Method: "GET", Path: "/admin/v1/audit", serve: (*Handler).audit},
	{Method: "GET", Path: "/admin/v1/openapi.json", serve: (*Handler).openAPI, Open: true},
}

// New returns the API of cfg.Tracker.
func New(cfg Config) (*Handler, error) {
	if cfg.Tracker == nil || cfg.Keys == nil {
		return nil, errors.New("admin: New needs a Tracker and a key store")
	}
	if cfg.Now == nil {
		cfg.Now = cfg.Tracker.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Handler{cfg: cfg, cop: http.NewCrossOriginProtection(), routes: routes}
	h.register()
	return h, nil
}

// register routes h.routes on a new mux, and anything else under Prefix
// to a 404 in the API's error shape.
func (h *Handler) register() {
	h.mux = http.NewServeMux()
	for _, rt := range h.routes {
		h.mux.HandleFunc(rt.Method+" "+rt.Path, h.serve(rt))
	}
	h.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, notFound("no route %s %s: GET %sopenapi.json lists them", r.Method, r.URL.Path, Prefix))
	})
}

// ServeHTTP serves the API. Cross-origin browser requests that change
// something are refused before anything else is read.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err := h.cop.Check(r); err != nil {
		h.fail(w, r, forbidden("cross-origin request refused: %v", err))
		return
	}
	// A known path with another method: 405 naming the allowed ones,
	// in the API's error shape rather than the mux's text.
	if _, pattern := h.mux.Handler(r); pattern == "" || pattern == Prefix {
		if allow := allowed(r.URL.Path); allow != "" {
			w.Header().Set("Allow", allow)
			h.fail(w, r, &apiError{http.StatusMethodNotAllowed, codeMethod, r.Method + " is not allowed here: use " + allow, ""})
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

// serve authenticates the request, enforces read-only tokens and runs
// the route with the principal's name as the actor of its changes.
func (h *Handler) serve(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var p Principal
		if !rt.Open {
			var err error
			if p, err = h.authenticate(r); err != nil {
				h.fail(w, r, err)
				return
			}
			if p.Scope.ReadOnly && r.Method != http.MethodGet && r.Method != http.MethodHead {
				h.fail(w, r, forbidden("%s is a read-only token: it may only GET", p.Name))
				return
			}
			r = r.WithContext(budget.WithActor(r.Context(), p.Actor))
		}
		if err := rt.serve(h, w, r, &p); err != nil {
			h.fail(w, r, err)
		}
	}
}

// allowed is the methods the API serves at path, comma-separated; "" when
// none.
func allowed(path string) string {
	var ms string
	for _, rt := range routes {
		// Built directly: path is decoded, and a "%" in it (from %25) would
		// not parse back as a URL.
		probe := &http.Request{Method: rt.Method, URL: &url.URL{Path: path}, Header: http.Header{}}
		m := http.NewServeMux()
		m.HandleFunc(rt.Method+" "+rt.Path, func(http.ResponseWriter, *http.Request) {})
		if _, pat := m.Handler(probe); pat != "" {
			if ms != "" {
				ms += ", "
			}
			ms += rt.Method
		}
	}
	return ms
}
