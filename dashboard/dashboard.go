package dashboard

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Defaults of Config.
const (
	// DefaultRefresh is how often the pages reload themselves.
	DefaultRefresh = 15 * time.Second
	// DefaultListed is how many refusals and alerts the overview lists.
	DefaultListed = 20
)

// Refusal is a request the budget refused, as the overview lists it.
type Refusal struct {
	At      time.Time
	Key     string // the gateway key's name ("" when unknown)
	LimitID string // the limit that refused
	// Code is why: the refusal's error code (token_budget_exceeded,
	// unpriced_model for a model with no price under a dollar limit, ...).
	Code string
}

// Config configures a Handler.
type Config struct {
	// Tracker is read on each request. (Required.)
	Tracker *budget.Tracker
	// Now is the instant the pages show. (Optional; default
	// Tracker.Now.)
	Now func() time.Time
	// Location is the time zone instants are shown in. (Optional;
	// default UTC.)
	Location *time.Location
	// Refresh is how often the pages reload themselves while a visitor
	// has auto-refresh on (a script: without JavaScript they never do).
	// (Optional; default DefaultRefresh; negative: never.)
	Refresh time.Duration
	// Refusals lists the recent refusals, newest first. (Optional; nil:
	// the overview has no refusals section.)
	Refusals func() []Refusal
	// Alerts lists the newest n threshold alerts, newest first.
	// (Optional; default Tracker.Alerts.)
	Alerts func(ctx context.Context, n int) ([]budget.Alert, error)
	// Series sums a limit's usage in the buckets of its burn-down chart.
	// (Optional; default StoreSeries(Tracker).)
	Series SeriesFunc
	// Listed bounds the refusals and alerts listed. (Optional; default
	// DefaultListed.)
	Listed int
	// Logger gets the errors that fail a page. (Optional; default
	// slog.Default().)
	Logger *slog.Logger
	// Manage shows the management forms on the overview, key and limit
	// pages: they post to the admin API (package admin), which must be
	// served on the same origin under /admin/v1/. (Optional; default
	// off: a read-only dashboard.)
	Manage bool
}

//go:embed assets
var assets embed.FS

//go:embed templates
var templates embed.FS

// Handler serves the dashboard's pages; see the package documentation.
// It is safe for concurrent use.
type Handler struct {
	cfg   Config
	mux   *http.ServeMux
	pages map[string]*template.Template
}

// New returns the dashboard of cfg.Tracker.
func New(cfg Config) (*Handler, error) {
	if cfg.Tracker == nil {
		return nil, errors.New("dashboard: New needs a Tracker")
	}
	if cfg.Now == nil {
		cfg.Now = cfg.Tracker.Now
	}
	if cfg.Location == nil {
		cfg.Location = time.UTC
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Alerts == nil {
		cfg.Alerts = cfg.Tracker.Alerts
	}
	if cfg.Series == nil {
		cfg.Series = StoreSeries(cfg.Tracker)
	}
	if cfg.Listed <= 0 {
		cfg.Listed = DefaultListed
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), pages: map[string]*template.Template{}}
	for _, p := range []string{"overview", "limit", "key", "error"} {
		t, err := template.New(p).ParseFS(templates, "templates/layout.html", "templates/parts.html", "templates/manage.html", "templates/"+p+".html")
		if err != nil {
			return nil, err
		}
		h.pages[p] = t
	}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	files := http.FileServerFS(static)
	h.mux.Handle("GET /static/", http.StripPrefix("/static", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})))
	h.mux.HandleFunc("GET /{$}", h.serveOverview)
	h.mux.HandleFunc("GET /limit", h.serveLimit)
	h.mux.HandleFunc("GET /key", h.serveKey)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "No page at "+r.URL.Path+".", nil)
	})
	return h, nil
}

// csp allows this origin's stylesheet, scripts and icon, and the
// management script's calls of this origin's admin API, and nothing else.
const csp = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; " + connectSelf + "; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// ServeHTTP serves the pages. Every answer forbids framing and sniffing,
// and pages are never cached.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "the dashboard is read-only: use GET", http.StatusMethodNotAllowed)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// page is what every page's layout shows.
type page struct {
	Title     string
	Generated string  // the instant shown, "2026-03-02 18:00 UTC"
	Refresh   int     // seconds between reloads (0: none)
	Manage    *manage // the management forms it shows (nil: none)
}

func (h *Handler) page(title string, c clock) page {
	p := page{Title: title, Generated: c.full(c.now)}
	if h.cfg.Refresh > 0 {
		p.Refresh = int(max(h.cfg.Refresh/time.Second, 1))
	}
	return p
}

// clock is the instant and zone a request's page is drawn at.
func (h *Handler) clock() clock {
	return clock{loc: h.cfg.Location, now: h.cfg.Now()}
}

// render executes page name with data into w, buffered so that a failure
// is a clean 500.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", data); err != nil {
		h.cfg.Logger.Error("dashboard: rendering a page failed", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	// Models and end users are the clients' names: a bidirectional
	// override or a zero-width character in one would make a row read as
	// another, so every page shows them escaped. Links are unaffected (the
	// template percent-encodes them), and no page embeds data for scripts.
	page := buf.Bytes()
	if v := budget.Visible(string(page)); len(v) != len(page) {
		page = []byte(v)
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Length", strconv.Itoa(len(page)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(page)
	}
}

// errorPage is a page that says what went wrong.
type errorPage struct {
	page
	Status  int
	Message string
}

// fail answers status with a page saying msg; err (logged) is what the
// tracker answered, nil for a request's own fault.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string, err error) {
	if err != nil {
		h.cfg.Logger.Error("dashboard: reading the budget failed", "path", r.URL.Path, "err", err)
		if errors.Is(err, budget.ErrInvalid) || errors.Is(err, budget.ErrNotFound) {
			msg = err.Error()
		}
	}
	h.render(w, r, status, "error", errorPage{page: h.page(http.StatusText(status), h.clock()), Status: status, Message: msg})
}

// The management forms (templates/manage.html, assets/manage.js): each
// page says which of them it shows. The forms post to the admin API
// (package admin) on the same origin; the pages themselves stay GET-only.

// manage says which forms a page shows.
type manage struct {
	NewKey   bool       // the new key form
	Teams    []string   // the teams a new key may be placed in
	Team     string     // the team selected for a new key
	LimitFor *limitFor  // the set-a-limit form, for this owner
	Key      *keyEdit   // the rotate and revoke forms, for this key
	Limit    *limitEdit // the change, raise and delete forms, for this limit
}

// keyEdit is the key the key page's forms change.
type keyEdit struct {
	Name string
	Path string // its API path, /admin/v1/keys/NAME escaped
}

func editKey(name string) *keyEdit {
	return &keyEdit{Name: name, Path: "/admin/v1/keys/" + url.PathEscape(name)}
}

// limitFor is the owner a set-a-limit form makes a limit for.
type limitFor struct {
	Who   string // "key app", "team research"
	Field string // the API's field: key or team
	Owner string
}

// limitEdit is the limit the limit page's forms change.
type limitEdit struct {
	ID    string
	Path  string // its API path, /admin/v1/limits/ID escaped
	Limit string // the limit in force, as the page shows it
}

func editLimit(id, limit string) *limitEdit {
	return &limitEdit{ID: id, Path: "/admin/v1/limits/" + url.PathEscape(id), Limit: limit}
}

// connectSelf is the CSP directive the management script needs to call
// the admin API: this origin only.
const connectSelf = "connect-src 'self'"
