package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awscreds "github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/dashboard"
	"github.com/tokenbudget/tokenbudget/proxy"
	"github.com/tokenbudget/tokenbudget/proxy/mock"
)

const proxyHelp = `usage: budget proxy (--upstream URL | --upstream NAME=URL ... | --mock-upstream) [--listen ADDR]
	[--provider NAME] [--upstream-key-env VAR | NAME=VAR ...] [--upstream-api NAME=KIND ...]
	[--model-route PATTERN=NAME ...] [--mode reserve|check] [--max-body N] [--default-max-output N]
	[--cap-field auto|none|max_tokens|max_completion_tokens|max_output_tokens]
	[--max-client-wait D] [--require-limits] [--image-tokens N] [--reservation-ttl D]
	[--leases=false | --lease-journal DIR]
	[--body-timeout D] [--header-timeout D] [--stream-idle-timeout D]
	[--max-inflight-bytes N] [--max-inflight-bytes-per-key N] [--min-body-rate N]
	[--retain D] [--log-format text|json]
	[--admin-listen ADDR [--admin-token-env VAR]]
	[--alert-webhook URL] [--usage-webhook URL] [--alert-secret-env VAR] [--metrics-limits ID,...] [--config FILE]

Serves POST /v1/chat/completions, /v1/responses, /v1/embeddings,
/v1/images/generations, /v1/messages, Gemini's
/v1beta/models/MODEL:generateContent and :streamGenerateContent, Bedrock's
/model/ID/converse, /converse-stream, /invoke and
/invoke-with-response-stream, and GET
/v1/models (other paths: 404) on --listen (default
127.0.0.1:8080), forwarding them to --upstream with the upstream
credential, under the token budgets of the database. Clients authenticate
with a gateway key ('budget key add NAME') as "Authorization: Bearer KEY" or
"x-api-key: KEY"; limits apply to the key's name, the provider (openai for
the OpenAI routes, anthropic for /v1/messages, or --provider) and the
request's model. GET /v1/models costs no budget; it goes upstream with
Anthropic's credential when it carries anthropic-version, else OpenAI's.
With --require-limits a request that no enabled limit applies to (its key's
own, a default, its team's or its org's; a per-user limit only when the
request names an end user) gets 403 no_budget.

Reserve mode decides most requests in memory from budget leases the proxy
holds in the database (room on a route's limits that every other process
and replica counts as reserved), exact all the same; every admission and
settlement is journaled in --lease-journal before it is answered, so a
crash charges exactly. The journal's default is FILE.leases beside a SQLite
database and, on PostgreSQL, $XDG_STATE_HOME/tokenbudget/leases/HASH
(~/.local/state without XDG_STATE_HOME; HASH names the database's hosts,
name, user and search_path, never the password), so the replicas of one
machine and its 'budget recover' share it. An in-memory database, or no
directory for the journal, keeps the store path and says why on stderr.
--leases=false takes every request through the store (two writes each).
A route with a concurrent or usd limit always takes the store path, and
so does a tagged request (X-Budget-Tags), even when no tag limit applies
to it: the journal records no tags.

Output caps: a request is estimated at the largest of its max_tokens,
max_completion_tokens and max_output_tokens (times n). A request with none
gets one: the largest up to --default-max-output that the room left
admits, at least 16, put in the field --cap-field names (auto:
max_completion_tokens on chat completions, max_output_tokens on responses;
Anthropic requests always carry max_tokens; none: inject nothing). A
client's own cap is never changed.

Refusals are 429s with Retry-After; one whose wait is longer than
--max-client-wait (default 60s; 0: every refusal) also carries
x-should-retry: false, so SDKs return it at once instead of sleeping until
the window resets. A client that leaves mid-stream is charged the usage
reported so far, else the input estimate plus ceil(streamed text bytes / 4).

The upstream credential is read from $OPENAI_API_KEY (OpenAI routes, sent as
Authorization: Bearer) and $ANTHROPIC_API_KEY (/v1/messages, sent as
x-api-key), or from --upstream-key-env VAR for every route. With
--provider azure the upstream is an Azure OpenAI resource: the proxy serves
/openai/deployments/NAME/{chat/completions,embeddings,images/generations}
(NAME is the model limits and prices use) and sends $AZURE_OPENAI_API_KEY
as api-key. Clients may send the gateway key as Authorization: Bearer,
x-api-key or api-key.
--mock-upstream answers with the built-in mock provider instead (no account).

Many upstreams: --upstream NAME=URL, repeated, gives one upstream each;
NAME is the provider limits, prices and the usage events use. Its API kind
is NAME when NAME is openai, anthropic, gemini, vertex, bedrock or azure,
else --upstream-api NAME=KIND says it (openai for any OpenAI-compatible
server: DeepSeek, Groq, Mistral, xAI, OpenRouter, Together, vLLM, Ollama).
Its credential is read from --upstream-key-env
NAME=VAR, else from the kind's variable when NAME is the kind
(OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY sent as x-goog-api-key,
AZURE_OPENAI_API_KEY, AWS_BEARER_TOKEN_BEDROCK: a Bedrock API key), else
from NAME_API_KEY (DEEPSEEK_API_KEY). A bedrock upstream without a Bedrock
API key signs each request with SigV4 (signing name bedrock) with the AWS
SDK's default credentials (AWS_ACCESS_KEY_ID and friends, AWS_PROFILE and
the shared files, SSO, roles) in the URL's region
(bedrock-runtime.REGION.amazonaws.com) or AWS_REGION. A vertex upstream
sends an OAuth token from Google application default credentials (the file
GOOGLE_APPLICATION_CREDENTIALS names, gcloud's default file, the metadata
server on Google Cloud), or the access token in $VAR with
--upstream-key-env NAME=VAR. Requests route by their native path:
/v1/messages to the first anthropic-kind upstream,
/v1beta/models/MODEL:generateContent and :streamGenerateContent to the
first gemini one, Vertex AI's
/v1/projects/P/locations/L/publishers/google/models/MODEL:generateContent
(and :streamGenerateContent) to the first vertex one, /model/ID/converse, /converse-stream, /invoke and
/invoke-with-response-stream to the first bedrock one,
/openai/deployments/NAME/... to the first azure one, and the OpenAI paths
to the first OpenAI-kind upstream unless a --model-route PATTERN=NAME
matches the request's normalised model (patterns as in limits; the first
matching flag wins) or an X-Budget-Provider: NAME header names another
OpenAI-kind upstream. A path no upstream serves is 404 naming the served
ones; X-Budget-Provider naming no OpenAI-kind upstream is 404 too. Clients
may send the gateway key as Authorization: Bearer, x-api-key, api-key,
x-goog-api-key or ?key=; it never goes upstream.

Every proxied response carries X-Tokenbudget-Request-Id: the request id its
usage is recorded under (the reservation id in reserve mode), and what it
was charged: X-Tokenbudget-Cost (dollars, six places; absent when no price
matched) and X-Tokenbudget-Charged-Tokens (input + output + reasoning),
sent as trailers of a streamed answer. A request names its tags with
X-Budget-Tags: name=value,... (at most 8; tag limits count them; never
forwarded; a bad one is 400). In reserve
mode a reservation lasts --reservation-ttl and is renewed every third of it
while the request runs; if the proxy dies, recovery charges its estimate
(a request that was never served may be charged; one that was is never
missed) and its concurrency leases are free within --reservation-ttl.

Bounds: a request body must arrive within --body-timeout (else 408); the
upstream must send its response headers within --header-timeout (else
504) and never go quiet for --stream-idle-timeout mid-response (else the
response is cut off and charged what it reported plus the estimate of the
rest); request bodies held at once are capped by --max-inflight-bytes (503
with Retry-After past it; a body over --max-body gets 413 first), counted
as they arrive, and one key's by --max-inflight-bytes-per-key (default a
quarter of it, at least twice --max-body); a body arriving slower than
--min-body-rate bytes a second (after 2s; default 4096, 0: no minimum)
gets 408.

Retention: with --retain D (days such as 400d, or a Go duration; at least
1d) the proxy prunes the usage history once when it starts and then every
24 hours: the events before now - D, rounded down to a UTC day, are deleted
and their daily rollups kept, as 'budget prune --before' does. A refusal
(a limit's current window or a reservation still needs those events) is
logged on stderr and the proxy carries on; it tries again a day later.
Without --retain nothing is pruned.

Alerts: with --alert-webhook URL the proxy POSTs every alert (a limit
window's usage crossing a threshold of 'budget limit set --alert') as one
JSON document (the fields of 'budget alerts ls --json') with an
X-Budget-Alert-Id header, at least once: a non-2xx answer or no answer is
tried again 1s later, doubling, at most 5 minutes apart, until a 2xx;
whenever the alert was logged, by whichever process. Any number of proxies
may deliver; each alert is sent by one at a time, and one acknowledged is
never sent again, across restarts. With --alert-secret-env VAR each POST
carries X-Budget-Signature: sha256=<hex HMAC-SHA256 of the body keyed with
$VAR> (a missing or empty VAR is exit 2). A failing webhook or store is
logged on stderr and never stops the proxy.

` + usageWebhookHelp + `
Config: with --config FILE the proxy applies FILE ('budget config apply
FILE': limits, teams, prices and gateway keys, JSON or YAML, without
pruning) before it serves, and again on every SIGHUP, logging each change
on stderr. A file that does not apply at start stops the start (exit 2
for bad input); one that does not apply on SIGHUP changes nothing, is
logged, and the proxy serves on with what it had.

Self-service: GET /v1/budget with a gateway key answers {"key", "limits"}:
the status of every limit that applies to that key, as 'budget inspect
--key KEY --json' prints it (with forecast_used and exhausts_at). It costs
no budget; without a valid key it is 401.

One line per request goes to stderr (--log-format text or json): key
name, provider, model, end user and tags (when given), status, outcome,
estimate, tokens charged, cost, latency (settle_failed when the store did
not take the settlement); never a secret or a prompt.

` + adminHelp + `
OpenTelemetry: with OTEL_EXPORTER_OTLP_ENDPOINT (or a signal's own
endpoint) set, the proxy exports a span per request (GenAI semantic
conventions and tokenbudget.* attributes; W3C trace context taken from
the client and passed upstream) and the /metrics series as OTel metrics,
over OTLP (OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf or grpc); the SDK
reads the other OTEL_* variables (service name, headers, sampler). Off
without an endpoint.

Also serves GET /healthz (200 "ok", or 503 with the reason while the
database cannot be written, was deleted or replaced, or cannot be read)
and GET /metrics (Prometheus), which includes tokenbudget_limit_used,
_max and _utilization {limit_id, level, owner} for the limits with alert
thresholds and those --metrics-limits names. SIGINT or SIGTERM stops accepting requests,
waits for those in flight (up to 30s), writes the queued usage and exits 0.

`

// Defaults of budget proxy and budget mock-upstream.
const (
	defaultProxyListen = "127.0.0.1:8080"
	defaultMockListen  = "127.0.0.1:8081"
	drainTimeout       = 30 * time.Second
)

// proxyOptions configure a proxy started by startProxy.
type proxyOptions struct {
	config   string // --config: applied at start and on SIGHUP
	dsn      string
	listen   string
	upstream string // "" with mock or upstreams
	mock     bool
	// upstreams are the --upstream NAME=URL upstreams, in flag order;
	// modelRoutes their --model-route rules.
	upstreams   []namedUpstream
	modelRoutes []proxy.ModelRoute
	provider    string
	keyEnv      string
	mode        proxy.Mode
	maxBody     int64
	maxOutput   int64
	imageTokens int64
	// zero: the proxy package's defaults
	reservationTTL time.Duration
	// maxWriteBackoff is the writer's longest wait between attempts at a
	// failing write (budget.Config.MaxRetryBackoff).
	maxWriteBackoff time.Duration
	bodyTimeout     time.Duration
	headerTimeout   time.Duration
	idleTimeout     time.Duration
	maxInflight     int64
	maxInflightKey  int64         // 0: the default share
	minBodyRate     int64         // 0: no minimum
	maxClientWait   time.Duration // 0: the default; negative: every refusal
	capField        string        // "": auto
	requireLimits   bool
	leases          bool
	leaseJournal    string
	log             *slog.Logger
	accessLog       bool // one line per request on log
	// retain prunes the history older than it, at start and daily (0: keep it all).
	retain time.Duration
	// retainTicks replaces the daily ticker of retain. (Optional; tests.)
	retainTicks <-chan time.Time
	// pruned is called after each prune of retain. (Optional; tests.)
	pruned func(budget.PruneResult, error)
	admin  adminOptions // the dashboard's listener (admin_listen.go)
	// alertWebhook receives every alert, signed with alertSecret when set
	// ("": no delivery; proxy_alerts.go).
	alertWebhook string
	alertSecret  []byte
	// alertTicks replaces the deliverer's ticker of alertInterval.
	// (Optional; tests.)
	alertTicks <-chan time.Time
	// usageWebhook receives every usage event, signed with alertSecret
	// when set ("": no delivery; proxy_usagehook.go); usageTicks
	// replaces its ticker. (Optional; tests.)
	usageWebhook string
	usageTicks   <-chan time.Time
	// metricsLimits are ids of limits the per-limit gauges report besides
	// those with alert thresholds.
	metricsLimits []string
}

func (m *Main) runProxy(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("proxy")
	var o proxyOptions
	dsn := m.dbFlag(fs)
	fs.StringVar(&o.listen, "listen", defaultProxyListen, "address to serve on")
	var uf upstreamFlags
	uf.register(fs)
	fs.BoolVar(&o.mock, "mock-upstream", false, "answer with the built-in mock provider instead of --upstream")
	fs.StringVar(&o.provider, "provider", "", "provider `name` for every route (default openai, anthropic per route)")
	mode := fs.String("mode", string(proxy.ModeReserve), "reserve (exact under concurrency) or check (faster, may overshoot)")
	fs.Int64Var(&o.maxBody, "max-body", proxy.DefaultMaxBody, "largest request body in bytes; larger ones get 413")
	fs.Int64Var(&o.maxOutput, "default-max-output", proxy.DefaultMaxOutput, "output estimate of a request without max tokens")
	fs.Int64Var(&o.imageTokens, "image-tokens", proxy.DefaultImageTokens, "estimate of one image or file part")
	fs.DurationVar(&o.reservationTTL, "reservation-ttl", proxy.DefaultReservationTTL, "lifetime of a reservation, renewed every third of it while its request runs (at least 1s)")
	fs.DurationVar(&o.maxWriteBackoff, "max-write-backoff", budget.DefaultMaxRetryBackoff, "longest wait between the writer's attempts at a failing write (store away, disk full): the proxy writes again at most this long after the store is back")
	fs.DurationVar(&o.bodyTimeout, "body-timeout", proxy.DefaultBodyTimeout, "time allowed to receive a request body; slower ones get 408")
	fs.DurationVar(&o.headerTimeout, "header-timeout", proxy.DefaultHeaderTimeout, "time allowed for the upstream's response headers; past it 504")
	fs.DurationVar(&o.idleTimeout, "stream-idle-timeout", proxy.DefaultStreamIdleTimeout, "longest the upstream may go quiet mid-response before it is cut off")
	fs.Int64Var(&o.maxInflight, "max-inflight-bytes", proxy.DefaultMaxInflightBytes, "request body bytes held at once; past it 503 with Retry-After")
	fs.Int64Var(&o.maxInflightKey, "max-inflight-bytes-per-key", 0, "request body bytes one key holds at once; past it 503 (default: a quarter of --max-inflight-bytes, at least twice --max-body)")
	fs.Int64Var(&o.minBodyRate, "min-body-rate", proxy.DefaultMinBodyRate, "slowest a request body may arrive, in bytes a second after 2s; slower ones get 408 (0: no minimum)")
	fs.DurationVar(&o.maxClientWait, "max-client-wait", proxy.DefaultMaxClientWait, "a refusal with a longer wait says x-should-retry: false (0s: every refusal)")
	fs.StringVar(&o.capField, "cap-field", proxy.CapAuto, "field an injected output cap goes in: auto, none, max_tokens, max_completion_tokens or max_output_tokens")
	fs.BoolVar(&o.requireLimits, "require-limits", false, "refuse (403 no_budget) a request that no enabled limit applies to")
	fs.BoolVar(&o.leases, "leases", true, "reserve mode: decide requests in memory from budget leases (journaled; tagged requests keep the store path); --leases=false: every request through the store")
	fs.StringVar(&o.leaseJournal, "lease-journal", "", "`directory` of the lease journals (default: FILE.leases beside a SQLite database; on PostgreSQL $XDG_STATE_HOME/tokenbudget/leases/HASH)")
	retain := fs.String("retain", "", "prune the usage history older than this at start and daily: days (400d) or a duration (default: keep it all)")
	logFormat := fs.String("log-format", "text", "stderr log lines as text or json")
	o.admin.flags(fs)
	fs.StringVar(&o.alertWebhook, "alert-webhook", "", "POST every alert to this `URL`, at least once (retried until a 2xx)")
	fs.StringVar(&o.usageWebhook, "usage-webhook", "", "POST every recorded usage event to this `URL` as CloudEvents batches, at least once, in order per key")
	secretEnv := fs.String("alert-secret-env", "", "environment `variable` holding the secret that signs each alert and usage batch (X-Budget-Signature)")
	metricsLimits := fs.String("metrics-limits", "", "comma-separated limit `ids` the per-limit gauges report besides those with alerts")
	fs.StringVar(&o.config, "config", "", "apply this config `file` (JSON or YAML) at start and on every SIGHUP")
	pos, err := m.parseArgs(fs, proxyHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("proxy", pos); err != nil {
		return err
	}
	o.dsn = *dsn
	if uf.named() {
		o.upstreams, o.modelRoutes, err = uf.upstreams()
	} else {
		o.upstream, o.keyEnv, err = uf.single()
	}
	if err != nil {
		return err
	}
	if o.mode, err = proxy.ParseMode(*mode); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	if err := m.alertOptions(&o, *secretEnv); err != nil {
		return err
	}
	o.metricsLimits = parseIDs(*metricsLimits)
	if strings.TrimSpace(*retain) != "" {
		if o.retain, err = parseRetain(*retain); err != nil {
			return err
		}
	}
	switch strings.TrimSpace(*logFormat) {
	case "text":
		o.log = slog.New(slog.NewTextHandler(m.Stderr, nil))
	case "json":
		o.log = slog.New(slog.NewJSONHandler(m.Stderr, nil))
	default:
		return budget.Invalid("log-format", *logFormat, "want text or json")
	}
	o.accessLog = true
	if o.maxClientWait == 0 {
		o.maxClientWait = -1 // the library's "every refusal"; its 0 is the default
	}

	p, err := m.startProxy(ctx, o)
	if err != nil {
		return err
	}
	up := p.upstream
	if len(o.upstreams) > 0 {
		var names []string
		for _, u := range o.upstreams {
			names = append(names, u.name+"="+u.url)
		}
		up = strings.Join(names, " ")
	}
	if o.mock {
		up += " (built-in mock)"
	}
	fmt.Fprintf(m.Stdout, "budget proxy listening on %s, upstream %s, mode %s\n", p.url, up, o.mode)
	p.printAdmin(m.Stdout)
	select {
	case <-ctx.Done():
	case err = <-p.served:
	}
	fmt.Fprintln(m.Stderr, "budget proxy: draining in-flight requests")
	return errors.Join(err, p.stop(ctx))
}

func (o *proxyOptions) validate() error {
	named := len(o.upstreams) > 0
	switch {
	case o.mock && (o.upstream != "" || named):
		return usagef("proxy", "--upstream and --mock-upstream exclude each other")
	case !o.mock && o.upstream == "" && !named:
		return usagef("proxy", "--upstream URL (or NAME=URL, repeated) or --mock-upstream is required")
	case named && strings.TrimSpace(o.provider) != "":
		return usagef("proxy", "--provider names the one --upstream URL; with --upstream NAME=URL each NAME is its provider")
	}
	if o.upstream != "" {
		u, err := url.Parse(o.upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return budget.Invalid("upstream", o.upstream, "want an http or https URL such as https://api.openai.com")
		}
	}
	if strings.TrimSpace(o.listen) == "" {
		return budget.Invalid("listen", o.listen, "want an address such as 127.0.0.1:8080")
	}
	if o.maxBody <= 0 {
		return budget.Invalid("max-body", o.maxBody, "must be greater than 0")
	}
	if o.maxOutput <= 0 || o.maxOutput > budget.MaxTokens {
		return budget.Invalid("default-max-output", o.maxOutput, "must be between 1 and 2^53-1")
	}
	if o.imageTokens < 0 || o.imageTokens > budget.MaxTokens {
		return budget.Invalid("image-tokens", o.imageTokens, "must be between 0 and 2^53-1")
	}
	if o.reservationTTL < time.Second {
		return budget.Invalid("reservation-ttl", o.reservationTTL, "must be at least 1s")
	}
	if o.maxWriteBackoff < 10*time.Millisecond {
		return budget.Invalid("max-write-backoff", o.maxWriteBackoff, "must be at least 10ms (the first retry's wait)")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"body-timeout", o.bodyTimeout}, {"header-timeout", o.headerTimeout}, {"stream-idle-timeout", o.idleTimeout}} {
		if d.v <= 0 {
			return budget.Invalid(d.name, d.v, "must be greater than 0")
		}
	}
	if o.maxInflight <= 0 {
		return budget.Invalid("max-inflight-bytes", o.maxInflight, "must be greater than 0")
	}
	if o.maxInflightKey < 0 {
		return budget.Invalid("max-inflight-bytes-per-key", o.maxInflightKey, "must not be negative")
	}
	if o.minBodyRate < 0 {
		return budget.Invalid("min-body-rate", o.minBodyRate, "must not be negative")
	}
	if o.maxClientWait < 0 {
		return budget.Invalid("max-client-wait", o.maxClientWait, "must not be negative")
	}
	if _, err := proxy.ParseCapField(o.capField); err != nil {
		return err
	}
	if err := budget.CheckName("provider", strings.TrimSpace(o.provider)); err != nil {
		return err
	}
	if strings.ContainsAny(o.keyEnv, "= \t") {
		return budget.Invalid("upstream-key-env", o.keyEnv, "want an environment variable name")
	}
	return nil
}

// runningProxy is a proxy serving on a listener, with its database and,
// with --mock-upstream, the mock's server.
type runningProxy struct {
	url      string
	upstream string
	tracker  *budget.Tracker
	store    budget.Store
	keyStore proxy.KeyStore // store's gateway keys
	keys     *proxy.Keys
	mw       *proxy.Middleware
	srv      *http.Server
	mock     *http.Server
	served   chan error // Serve's error, if it stops by itself
	inflight sync.WaitGroup
	// stopRetention stops the retention loop and waits for it (nil without --retain).
	stopRetention func()
	// stopAlerts stops the alert deliverer and waits for it (nil without --alert-webhook).
	stopAlerts func()
	// stopUsage stops the usage deliverer and waits for it (nil without --usage-webhook).
	stopUsage func()
	// stopConfig stops the SIGHUP reloads of --config (nil without it).
	stopConfig func()
	admin      adminServer // the dashboard (admin_listen.go)

	// stopTelemetry exports the last spans and metrics (nil without an
	// OTLP endpoint; proxy_otel.go).
	stopTelemetry func(context.Context)
}

// startProxy opens the database (creating it), starts the mock upstream if
// asked, and serves the proxy on o.listen.
func (m *Main) startProxy(ctx context.Context, o proxyOptions) (_ *runningProxy, err error) {
	if strings.TrimSpace(o.dsn) == "" {
		return nil, budget.Invalid("db", o.dsn, "a database path is required")
	}
	p := &runningProxy{served: make(chan error, 2)}
	defer func() {
		if err != nil {
			p.stop(ctx)
		}
	}()
	reg := prometheus.NewRegistry()
	metrics := proxy.NewMetrics(reg)
	s, err := tokenbudget.OpenStore(ctx, o.dsn, tokenbudget.Options{Create: true})
	if err != nil {
		if isPostgres(o.dsn) {
			return nil, &redacted{msg: strings.ReplaceAll(err.Error(), o.dsn, tokenbudget.RedactDSN(o.dsn)), err: err}
		}
		return nil, err
	}
	p.store = s
	ks, ok := s.(proxy.KeyStore)
	if !ok {
		return nil, fmt.Errorf("budget proxy: the store %T keeps no gateway keys", s)
	}
	p.keyStore = ks
	cfg := budget.DefaultConfig()
	cfg.Now = m.Now
	cfg.OnError = trackerErrorLog(o.log)
	cfg.MaxRetryBackoff = o.maxWriteBackoff
	m.proxyLeases(o, &cfg)
	if p.tracker, err = budget.New(ctx, metrics.InstrumentStore(s), cfg); err != nil {
		return nil, err
	}
	metrics.SetTracker(p.tracker)
	if err := p.startConfig(ctx, m, o); err != nil {
		return nil, err
	}
	metrics.GaugeLimits(o.metricsLimits)
	p.warnUnknownLimits(ctx, o)
	if o.retain > 0 {
		p.startRetention(ctx, o)
	}
	if o.alertWebhook != "" {
		p.startAlerts(ctx, o)
	}
	if err := p.startUsageHook(ctx, o, reg); err != nil {
		return nil, err
	}

	routes, up, err := m.buildUpstreams(ctx, o, p)
	if err != nil {
		return nil, err
	}
	// The key lookup records each key's last use; stop waits for those
	// writes before it closes the database.
	p.keys = proxy.NewKeys(p.keyStore)
	p.keys.Now = m.Now
	p.keys.OnTouchError = func(name string, err error) {
		o.log.Warn("proxy: recording a gateway key's last use failed", "key", name, "err", err)
	}
	pc := proxy.Config{Mode: o.mode, Keys: p.keys, Routes: routes, ModelRoutes: o.modelRoutes,
		DefaultMaxOutput: o.maxOutput, CapField: o.capField, MaxClientWait: o.maxClientWait, RequireLimits: o.requireLimits,
		ImageTokens: o.imageTokens, MaxBody: o.maxBody,
		ReservationTTL: o.reservationTTL, BodyTimeout: o.bodyTimeout, MaxInflightBytes: o.maxInflight,
		MaxInflightBytesPerKey: o.maxInflightKey, MinBodyRate: cmp.Or(o.minBodyRate, -1),
		Metrics: metrics, Logger: o.log}
	for _, u := range o.upstreams {
		if u.kind == proxy.KindOpenAI {
			pc.OpenAIProviders = append(pc.OpenAIProviders, u.name)
		}
	}
	if o.accessLog {
		pc.AccessLog = o.log
	}
	if err := p.startTelemetry(ctx, o.log, reg, &pc); err != nil {
		return nil, err
	}
	mw, err := proxy.New(p.tracker, pc)
	if err != nil {
		return nil, err
	}
	p.mw = mw
	hc := proxy.HandlerConfig{Middleware: mw, Upstream: up, Registry: reg, Health: proxy.TrackerHealth(p.tracker)}
	if dashboard.IsLoopback(o.listen) {
		hc.OpsHost = dashboard.LoopbackHost // the dashboard's rule: no DNS rebinding onto the gauges
	}
	h, err := proxy.NewHandler(hc)
	if err != nil {
		return nil, err
	}
	if h, err = p.startAdmin(m, o, h); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	p.url = "http://" + ln.Addr().String()
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.inflight.Add(1)
			defer p.inflight.Done()
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(o.log.Handler(), slog.LevelWarn),
		Protocols:         proxyProtocols(),
	}
	go func() {
		if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.served <- fmt.Errorf("serve: %w", err)
		}
	}()
	return p, nil
}

// buildUpstreams returns the routes and the upstream handler of o: the one
// --upstream URL (or the mock, started here) for every route, or one
// upstream per --upstream NAME=URL serving its kind's routes, the first of
// each kind taking that kind's native paths.
func (m *Main) buildUpstreams(ctx context.Context, o proxyOptions, p *runningProxy) (map[string]proxy.Route, http.Handler, error) {
	base := proxy.UpstreamConfig{Logger: o.log, HeaderTimeout: o.headerTimeout, StreamIdleTimeout: o.idleTimeout}
	if len(o.upstreams) > 0 {
		routes := map[string]proxy.Route{}
		ups := proxy.Upstreams{}
		var missing []string
		for _, u := range o.upstreams {
			kr, err := proxy.KindRoutes(u.kind, u.name)
			if err != nil {
				return nil, nil, fmt.Errorf("upstream %s: %w", u.name, err)
			}
			for path, r := range kr {
				if _, taken := routes[path]; !taken {
					routes[path] = r
				}
			}
			pu, _ := url.Parse(u.url) // checked when the flags were parsed
			key := ""
			if u.keyEnv != "" {
				key = m.Getenv(u.keyEnv)
			}
			uc := upstreamConfig(base, u.kind, key)
			uc.URL = pu
			switch {
			case u.kind == proxy.KindVertex:
				if uc.GoogleTokens, err = m.googleTokens(ctx, key); err != nil {
					return nil, nil, fmt.Errorf("upstream %s: %w", u.name, err)
				}
			case key != "":
			case u.kind == proxy.KindBedrock:
				// No Bedrock API key: SigV4 with the standard AWS
				// credential chain (variables, profiles, SSO, roles).
				if uc.AWSCredentials, uc.AWSRegion, err = m.awsCredentials(ctx); err != nil {
					return nil, nil, fmt.Errorf("upstream %s: %w", u.name, err)
				}
			default:
				missing = append(missing, u.name+" ($"+u.keyEnv+")")
			}
			if ups[u.name], err = proxy.NewUpstream(uc); err != nil {
				return nil, nil, err
			}
		}
		if len(missing) > 0 {
			o.log.Warn("no upstream credential in the environment: these upstreams are called without one", "upstreams", strings.Join(missing, ", "))
		}
		return routes, ups, nil
	}
	p.upstream = o.upstream
	if o.mock {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, fmt.Errorf("mock upstream: %w", err)
		}
		p.mock = &http.Server{Handler: &mock.Upstream{}, ReadHeaderTimeout: 10 * time.Second}
		go p.mock.Serve(ln)
		p.upstream = "http://" + ln.Addr().String()
	}
	u, err := url.Parse(p.upstream)
	if err != nil {
		return nil, nil, budget.Invalid("upstream", p.upstream, err.Error())
	}
	uc := base
	uc.URL = u
	uc.OpenAIKey, uc.AnthropicKey, uc.AzureKey = m.Getenv("OPENAI_API_KEY"), m.Getenv("ANTHROPIC_API_KEY"), m.Getenv("AZURE_OPENAI_API_KEY")
	uc.GeminiKey, uc.BedrockToken = m.Getenv("GEMINI_API_KEY"), m.Getenv("AWS_BEARER_TOKEN_BEDROCK")
	if o.keyEnv != "" {
		uc.OpenAIKey = m.Getenv(o.keyEnv)
		uc.AnthropicKey, uc.AzureKey, uc.GeminiKey = uc.OpenAIKey, uc.OpenAIKey, uc.OpenAIKey
	}
	// The provider name azure is also the API kind: an Azure OpenAI
	// resource serves only its deployment paths.
	azure := strings.TrimSpace(o.provider) == proxy.KindAzure
	routes := proxy.DefaultRoutes(strings.TrimSpace(o.provider))
	if azure {
		routes = proxy.AzureRoutes(proxy.KindAzure)
		uc.OpenAIKey, uc.AnthropicKey, uc.GeminiKey, uc.BedrockToken = "", "", "", ""
	}
	missing := uc.OpenAIKey == "" && uc.AnthropicKey == "" && uc.GeminiKey == ""
	if azure {
		missing = uc.AzureKey == ""
	}
	if !o.mock && missing {
		o.log.Warn("no upstream credential in the environment: requests go upstream without one",
			"variables", credentialVars(o.keyEnv))
	}
	up, err := proxy.NewUpstream(uc)
	if err != nil {
		return nil, nil, err
	}
	return routes, up, nil
}

// awsCredentials loads the AWS SDK's default credential chain and region,
// reading the environment through m.Getenv: the AWS_* variables, then the
// shared config and credentials files (AWS_PROFILE), SSO and web identity.
func (m *Main) awsCredentials(ctx context.Context) (aws.CredentialsProvider, string, error) {
	env := func(k string) string { return m.Getenv(k) }
	opts := []func(*config.LoadOptions) error{}
	if v := env("AWS_ACCESS_KEY_ID"); v != "" {
		opts = append(opts, config.WithCredentialsProvider(awscreds.NewStaticCredentialsProvider(v, env("AWS_SECRET_ACCESS_KEY"), env("AWS_SESSION_TOKEN"))))
	}
	if v := cmp.Or(env("AWS_REGION"), env("AWS_DEFAULT_REGION")); v != "" {
		opts = append(opts, config.WithRegion(v))
	}
	if v := env("AWS_PROFILE"); v != "" {
		opts = append(opts, config.WithSharedConfigProfile(v))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, "", fmt.Errorf("AWS credentials: %w", err)
	}
	return cfg.Credentials, cfg.Region, nil
}

// proxyProtocols are HTTP/1.1 and HTTP/2 without TLS (prior knowledge):
// the AWS SDKs for JavaScript speak HTTP/2 to a Bedrock runtime endpoint,
// even an http:// one.
func proxyProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

func credentialVars(keyEnv string) string {
	if keyEnv != "" {
		return keyEnv
	}
	return "OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, AZURE_OPENAI_API_KEY"
}

// stop drains in-flight requests (at most drainTimeout, then closes the
// connections), stops the mock, and flushes and closes the database.
func (p *runningProxy) stop(ctx context.Context) error {
	var errs []error
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainTimeout)
	defer cancel()
	if p.srv != nil {
		if err := p.srv.Shutdown(dctx); err != nil {
			p.srv.Close()
			errs = append(errs, fmt.Errorf("drain: %w", err))
		}
		p.inflight.Wait()
	}
	if p.mw != nil {
		// The store writes that follow the responses (each bounded by the
		// middleware's own timeout): none is dropped.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		err := p.mw.Close(sctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("drain settlements: %w", err))
		}
	}
	p.stopAdmin(dctx)
	if p.stopTelemetry != nil {
		p.stopTelemetry(ctx)
	}
	if p.mock != nil {
		p.mock.Close()
	}
	if p.keys != nil {
		p.keys.Wait()
	}
	if p.stopRetention != nil {
		p.stopRetention()
	}
	if p.stopAlerts != nil {
		p.stopAlerts()
	}
	if p.stopUsage != nil {
		p.stopUsage()
	}
	if p.stopConfig != nil {
		p.stopConfig()
	}
	if p.tracker != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if err := p.tracker.Close(cctx); err != nil {
			errs = append(errs, fmt.Errorf("close database: %w", err))
		}
	}
	if p.store != nil {
		if err := p.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close database: %w", err))
		}
	}
	return errors.Join(errs...)
}

// startRetention runs the pruning of --retain in the background until stop.
func (p *runningProxy) startRetention(ctx context.Context, o proxyOptions) {
	r := &retention{tracker: p.tracker, retain: o.retain, log: o.log, done: o.pruned}
	p.stopRetention = background(ctx, o.retainTicks, retentionInterval, r.run)
}

// warnUnknownLimits warns about ids of --metrics-limits that no limit has
// (yet): a misspelt id would otherwise report nothing without a word.
func (p *runningProxy) warnUnknownLimits(ctx context.Context, o proxyOptions) {
	if len(o.metricsLimits) == 0 {
		return
	}
	ls, err := p.tracker.Limits(ctx, "")
	if err != nil {
		return // a warning only
	}
	for _, id := range o.metricsLimits {
		if !slices.ContainsFunc(ls, func(l budget.Limit) bool { return l.ID == id }) {
			o.log.Warn("metrics-limits: no limit has this id (yet); its gauges appear once one does", "id", id)
		}
	}
}

// discardLogger logs nothing.
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// trackerErrorLog logs what the tracker reports (budget.Config.OnError):
// a failed write, which the tracker retries, or a lease recovery charged
// whole because its journal was not found (the error names the lease and
// the journal directory), which is not retried and not a write failure.
func trackerErrorLog(log *slog.Logger) func(error) {
	return func(err error) {
		if errors.Is(err, budget.ErrLeaseUnjournaled) {
			log.Warn("budget: a lease was charged whole: its journal was not found", "err", err)
			return
		}
		log.Error("budget: write failed; retrying", "err", err)
	}
}
