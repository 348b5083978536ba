package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tokenbudget/tokenbudget/budget"
)

// UpstreamConfig says where the proxy forwards and how it authenticates
// there.
type UpstreamConfig struct {
	// URL is the upstream's base, such as https://api.openai.com; a base
	// ending in /v1 is accepted too (the request's /v1 is not repeated).
	URL *url.URL
	// OpenAIKey is put in "Authorization: Bearer" on OpenAI routes;
	// AnthropicKey in "x-api-key" on Anthropic routes. Empty: none is sent.
	OpenAIKey    string
	AnthropicKey string
	// Transport makes the upstream calls. (Optional; default a clone of
	// http.DefaultTransport.)
	Transport http.RoundTripper
	// Logger gets upstream failures. (Optional; default slog.Default().)
	Logger *slog.Logger
}

// NewUpstream returns the reverse proxy behind the middleware: it sends
// each request to the upstream's URL with the upstream credential in the
// header of the request's route family, no gateway credential and no
// X-Forwarded-For, flushes streamed responses as they come, and answers a
// failed upstream call with a 502 in the route's error shape.
func NewUpstream(cfg UpstreamConfig) (*httputil.ReverseProxy, error) {
	if cfg.URL == nil || cfg.URL.Scheme == "" || cfg.URL.Host == "" {
		return nil, budget.Invalid("upstream", fmt.Sprint(cfg.URL), "want an absolute URL such as https://api.openai.com")
	}
	if cfg.URL.Scheme != "http" && cfg.URL.Scheme != "https" {
		return nil, budget.Invalid("upstream", cfg.URL.String(), "want an http or https URL")
	}
	target := *cfg.URL
	target.Path = strings.TrimSuffix(strings.TrimSuffix(target.Path, "/"), "/v1")
	target.RawPath = ""
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	tr := cfg.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		t.ResponseHeaderTimeout = 10 * time.Minute
		tr = t
	}
	rp := &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&target)
			h := pr.Out.Header
			h.Del("Authorization")
			h.Del("X-Api-Key")
			f := Unknown
			if info, ok := InfoFrom(pr.In.Context()); ok {
				f = info.Route.Format
			} else {
				f, _ = FormatForPath(pr.In.URL.Path)
			}
			switch {
			case f == AnthropicMessages && cfg.AnthropicKey != "":
				h.Set("X-Api-Key", cfg.AnthropicKey)
			case f != AnthropicMessages && f != Unknown && cfg.OpenAIKey != "":
				h.Set("Authorization", "Bearer "+cfg.OpenAIKey)
			}
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client is gone: nobody to answer
			}
			f, _ := FormatForPath(r.URL.Path)
			if info, ok := InfoFrom(r.Context()); ok {
				f = info.Route.Format
			}
			log.Warn("proxy: upstream call failed", "path", r.URL.Path, "err", err)
			writeError(w, f, simpleError(f, http.StatusBadGateway, CodeUpstream, "the upstream provider could not be reached"))
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return rp, nil
}

// HandlerConfig assembles the proxy's HTTP handler.
type HandlerConfig struct {
	// Middleware enforces the budgets; its routes are served. (Required.)
	Middleware *Middleware
	// Upstream answers what the middleware admits. (Required.)
	Upstream http.Handler
	// Registry is served at /metrics. (Optional; nil: no /metrics.)
	Registry *prometheus.Registry
	// Health is called by /healthz; an error answers 503. (Optional.)
	Health func(context.Context) error
}

// NewHandler returns the proxy's handler: the middleware's routes through
// to the upstream, GET /healthz, GET /metrics, and a 404 in OpenAI's error
// shape for any other path.
func NewHandler(cfg HandlerConfig) (http.Handler, error) {
	if cfg.Middleware == nil || cfg.Upstream == nil {
		return nil, errors.New("proxy: NewHandler needs a Middleware and an Upstream")
	}
	mux := http.NewServeMux()
	api := cfg.Middleware.Wrap(cfg.Upstream)
	for p := range cfg.Middleware.cfg.Routes {
		mux.Handle(p, api)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if cfg.Health != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := cfg.Health(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "{\"status\":\"unavailable\"}\n")
				return
			}
		}
		fmt.Fprintf(w, "{\"status\":\"ok\"}\n")
	})
	if cfg.Registry != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	}
	mux.Handle("/", api) // the middleware answers 404 in the API's shape
	return mux, nil
}

// StoreHealth is a Health function: the store answers a read.
func StoreHealth(s budget.Store) func(context.Context) error {
	return func(ctx context.Context) error {
		return s.View(ctx, func(tx budget.Tx) error {
			_, err := tx.LimitsVersion(ctx)
			return err
		})
	}
}
