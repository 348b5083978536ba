package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/oauth2"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
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
	// AzureKey is put in "api-key" on Azure OpenAI routes (Route.Kind
	// KindAzure).
	AzureKey string
	// GeminiKey is put in "x-goog-api-key" on Gemini routes
	// (GeminiGenerate).
	GeminiKey string
	// BedrockToken, a Bedrock API key, is put in "Authorization: Bearer"
	// on Bedrock routes. Without one, AWSCredentials sign them with SigV4
	// (signing name bedrock) in AWSRegion, else in the region the URL's
	// bedrock-runtime host names.
	BedrockToken   string
	AWSCredentials aws.CredentialsProvider
	AWSRegion      string
	// GoogleTokens gives the OAuth access token put in "Authorization:
	// Bearer" on Vertex AI routes (Route.Kind KindVertex): Google
	// application default credentials (golang.org/x/oauth2/google), whose
	// token source refreshes the token before it expires.
	GoogleTokens oauth2.TokenSource
	// Transport makes the upstream calls. (Optional; default a clone of
	// http.DefaultTransport.)
	Transport http.RoundTripper
	// HeaderTimeout bounds the wait for the upstream's response headers,
	// from the start of the call; past it the client gets 504. Reasoning
	// models can think for minutes before a non-streamed answer's headers.
	// (Optional; default DefaultHeaderTimeout, 10m.)
	HeaderTimeout time.Duration
	// StreamIdleTimeout bounds each wait for the next bytes of a response
	// body, streamed or not (time spent writing to a slow client does not
	// count); past it the response is cut off and charged what it reported
	// plus the estimate of the rest. (Optional; default
	// DefaultStreamIdleTimeout, 5m.)
	StreamIdleTimeout time.Duration
	// Logger gets upstream failures. (Optional; default slog.Default().)
	Logger *slog.Logger
}

// Defaults of UpstreamConfig.
const (
	DefaultHeaderTimeout     = 10 * time.Minute
	DefaultStreamIdleTimeout = 5 * time.Minute
)

// NewUpstream returns the reverse proxy behind the middleware: it sends
// each request to the upstream's URL with the upstream credential in the
// header of the request's route family, no gateway credential and no
// X-Forwarded-For, flushes streamed responses as they come, and answers a
// failed upstream call with a 502 in the route's error shape (504 past
// HeaderTimeout).
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
		tr = t
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	if cfg.StreamIdleTimeout <= 0 {
		cfg.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if cfg.BedrockToken == "" && cfg.AWSCredentials != nil {
		region := cmp.Or(cfg.AWSRegion, regionOf(target.Host))
		if region == "" {
			return nil, budget.Invalid("AWSRegion", cfg.URL.String(), "names no region: set AWS_REGION or use a bedrock-runtime.REGION.amazonaws.com URL")
		}
		tr = &signingTransport{rt: tr, creds: cfg.AWSCredentials, region: region, signer: v4.NewSigner(), now: time.Now}
	}
	creds := wire.Credentials{OpenAIKey: cfg.OpenAIKey, AnthropicKey: cfg.AnthropicKey, AzureKey: cfg.AzureKey,
		GeminiKey: cfg.GeminiKey, BedrockToken: cfg.BedrockToken}
	if cfg.GoogleTokens != nil {
		tr = &googleTransport{rt: tr, src: cfg.GoogleTokens}
	}
	rp := &httputil.ReverseProxy{
		Transport: &timeoutTransport{rt: tr, header: cfg.HeaderTimeout, idle: cfg.StreamIdleTimeout},
		// 0: ReverseProxy flushes each write of a stream by itself (an SSE
		// Content-Type or a body without a Content-Length: Bedrock's
		// event-streams, Gemini's JSON arrays); a body of known length is
		// written without a flush per write.
		FlushInterval: 0,
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The client's query as it came (the middleware removed a
			// gateway key= from it): ReverseProxy re-encodes a query with
			// a parameter it cannot parse, and drops that parameter,
			// such as Vertex AI's $alt=json;enum-encoding=int.
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			pr.SetURL(&target)
			h := pr.Out.Header
			h.Del("Authorization")
			for _, name := range keyHeaders {
				h.Del(name)
			}
			var a wire.Adapter
			if info, ok := InfoFrom(pr.In.Context()); ok {
				a = info.Route.adapter()
			} else {
				f, _ := wire.ForPath(pr.In.URL.Path)
				a = adapterOf(f)
			}
			a.Authorize(h, &creds)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client is gone: nobody to answer
			}
			f, _ := wire.ForPath(r.URL.Path)
			if info, ok := InfoFrom(r.Context()); ok {
				f = info.Route.Format
			}
			if errors.Is(err, errHeaderTimeout) {
				log.Warn("proxy: upstream sent no response headers in time", "path", r.URL.Path, "timeout", cfg.HeaderTimeout)
				writeError(w, f, simpleError(f, http.StatusGatewayTimeout, CodeUpstreamTime,
					"the upstream provider did not answer within "+cfg.HeaderTimeout.String()))
				return
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
	// Health is called by /healthz; an error answers 503 with its text.
	// (Optional; TrackerHealth is the one to use.)
	Health func(context.Context) error
	// OpsHost, when set, is the rule a request's Host must pass for
	// /metrics and /healthz, which answer 403 otherwise: on a loopback
	// listener a page of another site that a DNS rebinding points at the
	// proxy must not read the per-limit gauges (limit ids, owners, usage).
	// The API's routes need a gateway key, so they take any Host.
	// (Optional; nil: any Host.)
	OpsHost func(host string) bool
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
		// Gemini's keys are no mux patterns (a wildcard and a :method in
		// one segment): "/" takes them to the middleware, which routes them.
		if !strings.Contains(p, ":") {
			mux.Handle(p, api)
		}
	}
	ops := func(h http.Handler) http.Handler {
		if cfg.OpsHost == nil {
			return h
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !cfg.OpsHost(r.Host) {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(http.StatusForbidden)
				fmt.Fprintf(w, "403 forbidden: %s answers only at a loopback address such as http://127.0.0.1:PORT%s\n", r.URL.Path, r.URL.Path)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	mux.Handle("/healthz", ops(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if cfg.Health != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := cfg.Health(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "unavailable: %v\n", err)
				return
			}
		}
		fmt.Fprintf(w, "ok\n")
	})))
	if cfg.Registry != nil {
		mux.Handle("/metrics", ops(promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{})))
	}
	mux.Handle("/", api) // the middleware answers 404 in the API's shape
	return mux, nil
}

// TrackerHealth is a Health function: t can write (its writer's last
// attempt did not fail, its database file is the one it opened; see
// budget.Tracker.Health) and its store answers a read.
func TrackerHealth(t *budget.Tracker) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := t.Health(); err != nil {
			return err
		}
		return t.Ping(ctx)
	}
}

// The causes timeoutTransport cancels an upstream call with.
var (
	errHeaderTimeout = errors.New("proxy: no upstream response headers within the header timeout")
	errStreamIdle    = errors.New("proxy: no upstream response bytes within the stream idle timeout")
)

// timeoutTransport bounds the wait for an upstream's response headers and
// each wait for more of its body, by cancelling the call's context.
type timeoutTransport struct {
	rt           http.RoundTripper
	header, idle time.Duration
}

func (t *timeoutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(t.header, func() { cancel(errHeaderTimeout) })
	resp, err := t.rt.RoundTrip(req.WithContext(ctx))
	fired := !timer.Stop()
	if err == nil && fired {
		resp.Body.Close()
		err = context.Cause(ctx)
	}
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errHeaderTimeout) && !errors.Is(err, errHeaderTimeout) {
			err = fmt.Errorf("%w: %w", errHeaderTimeout, err)
		}
		cancel(nil)
		return nil, err
	}
	b := &idleBody{ReadCloser: resp.Body, ctx: ctx, cancel: cancel, idle: t.idle}
	if info, ok := InfoFrom(req.Context()); ok {
		b.info = info
	}
	b.timer = time.AfterFunc(time.Hour, func() { cancel(errStreamIdle) })
	b.timer.Stop()
	resp.Body = b
	return resp, nil
}

// idleBody cancels its call when one Read waits longer than idle. Only the
// wait inside Read counts: the reverse proxy blocked writing to a slow
// client is not the upstream stalling.
type idleBody struct {
	io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   time.Duration
	timer  *time.Timer
	info   *Info
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.idle)
	n, err := b.ReadCloser.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF && errors.Is(context.Cause(b.ctx), errStreamIdle) {
		if b.info != nil {
			b.info.stalled.Store(true)
		}
		err = fmt.Errorf("%w: %w", errStreamIdle, err)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}
