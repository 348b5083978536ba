package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy/internal/kinds"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// Mode is how the middleware admits a request.
type Mode string

const (
	// ModeReserve holds the estimate on every applicable limit before
	// forwarding and commits the actual usage after: limits hold exactly
	// under any concurrency, at the cost of two write transactions.
	ModeReserve Mode = "reserve"
	// ModeCheck only checks before forwarding and records the usage after:
	// fast, but concurrent requests may together overshoot a limit.
	ModeCheck Mode = "check"
)

// ParseMode validates a mode name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.TrimSpace(s)); m {
	case ModeReserve, ModeCheck:
		return m, nil
	}
	return "", budget.Invalid("mode", s, "want reserve or check")
}

// Defaults of Config.
const (
	DefaultMaxBody         = 32 << 20
	DefaultMaxResponseBody = 64 << 20
	DefaultOverloadedAfter = 3
	// DefaultReservationTTL is short so that the concurrency leases of a
	// proxy that died are free again within it; a live request renews its
	// reservation every third of it.
	DefaultReservationTTL = 20 * time.Second
	// DefaultBodyTimeout bounds reading one request body.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultMaxInflightBytes bounds the request bodies held at once.
	DefaultMaxInflightBytes = 256 << 20
	// DefaultMinBodyRate is the slowest a request body may arrive, in
	// bytes a second, once DefaultMinBodyRateGrace has passed.
	DefaultMinBodyRate = 4 << 10
	// DefaultMinBodyRateGrace is how long a body may lag behind
	// MinBodyRate before it is measured (a slow start, a 100 Continue).
	DefaultMinBodyRateGrace = 2 * time.Second
	// DefaultMaxClientWait is the longest wait a refusal lets clients
	// retry after: what the official SDKs cap their own waits at. A
	// longer one would have an SDK sleep for hours (some honour any
	// Retry-After) or retry at once in vain (others ignore a long one).
	DefaultMaxClientWait = 60 * time.Second
	// settleTimeout bounds a reservation, commit or release made on behalf
	// of a request, whether or not its client is still there.
	settleTimeout = 30 * time.Second
)

// UserHeader names the end user of a request. It wins over the body's
// fields (RequestInfo.User) and is removed before the request is
// forwarded.
const UserHeader = "X-Budget-User"

// Route is what the middleware serves at one path.
type Route struct {
	Format Format
	// Provider is the provider name limits and parking use.
	Provider string
	// Kind is the API kind of the upstream when it is not the one Format
	// implies: KindAzure for Azure OpenAI (api-key credential), KindVertex
	// for Vertex AI (an OAuth token); "" otherwise. With Format it picks
	// the route's adapter.
	Kind string
}

// KindAzure is the Route.Kind of Azure OpenAI routes.
const KindAzure = kinds.Azure

// DeploymentPath is how an Azure OpenAI route's key in Config.Routes names
// the deployment segment of its path: a request for
// /openai/deployments/NAME/chat/completions takes the route at
// DeploymentPath + "chat/completions", and NAME is its model.
const DeploymentPath = kinds.DeploymentPath

// AzureRoutes maps Azure OpenAI's deployment paths (chat completions,
// embeddings, image generations) to their formats with the provider
// provider ("azure" when ""). The deployment names the model: Azure serves
// it whatever model the body names.
func AzureRoutes(provider string) map[string]Route {
	if provider == "" {
		provider = KindAzure
	}
	routes := make(map[string]Route, 3)
	for _, f := range []Format{OpenAIChat, OpenAIEmbeddings, OpenAIImages} {
		routes[DeploymentPath+strings.TrimPrefix(f.Path(), "/v1/")] = Route{Format: f, Provider: provider, Kind: KindAzure}
	}
	return routes
}

// GeminiPath and VertexPath are the keys in Config.Routes of Gemini's and
// Vertex AI's generateContent routes: a request for
// /v1beta/models/MODEL:generateContent (or :streamGenerateContent) takes
// the route at GeminiPath, one for
// /v1/projects/P/locations/L/publishers/google/models/MODEL:... the one at
// VertexPath; MODEL is its model, the method says whether it streams.
const (
	GeminiPath = kinds.GeminiPath
	VertexPath = kinds.VertexPath
)

// BedrockConversePath and BedrockInvokePath are the keys in Config.Routes
// of Amazon Bedrock's runtime routes: /model/MODEL/converse and
// /converse-stream take the first, /model/MODEL/invoke and
// /invoke-with-response-stream the second; MODEL (a model id, an inference
// profile or an ARN, unescaped) is the request's model.
const (
	BedrockConversePath = kinds.BedrockConversePath
	BedrockInvokePath   = kinds.BedrockInvokePath
)

// BedrockRoutes maps Bedrock's runtime paths to BedrockConverse and
// BedrockInvoke with the provider provider ("bedrock" when "").
func BedrockRoutes(provider string) map[string]Route {
	if provider == "" {
		provider = BedrockConverse.Provider()
	}
	return map[string]Route{
		BedrockConversePath: {Format: BedrockConverse, Provider: provider},
		BedrockInvokePath:   {Format: BedrockInvoke, Provider: provider},
	}
}

// GeminiRoutes maps Gemini's generateContent paths to GeminiGenerate with
// the provider provider ("gemini" when "").
func GeminiRoutes(provider string) map[string]Route {
	if provider == "" {
		provider = GeminiGenerate.Provider()
	}
	return map[string]Route{GeminiPath: {Format: GeminiGenerate, Provider: provider}}
}

// target is where a request path leads: its route and what the path
// itself says of the request (an Azure deployment or a Gemini model, a
// Gemini stream).
type target struct {
	route Route
	kinds.Target
}

// routeFor is the route of path (URL.Path) with what the path says; rawPath
// is its escaped form, where a Gemini or Bedrock model name is read.
func (m *Middleware) routeFor(path, rawPath string) (t target, ok bool) {
	if t.route, ok = m.cfg.Routes[path]; ok {
		return t, true
	}
	key, pt, ok := kinds.Route(path, rawPath)
	if !ok {
		return target{}, false
	}
	t.route, ok = m.cfg.Routes[key]
	t.Target = pt
	return t, ok
}

// DefaultRoutes maps the five API paths to their formats, each with the
// provider provider; when provider is "", each with its family's default
// (openai, anthropic), and Gemini's generateContent (GeminiPath) and
// Bedrock's runtime paths (BedrockRoutes) too.
func DefaultRoutes(provider string) map[string]Route {
	routes := make(map[string]Route, 5)
	for _, f := range []Format{OpenAIChat, OpenAIResponses, OpenAIEmbeddings, AnthropicMessages, OpenAIImages} {
		p := provider
		if p == "" {
			p = f.Provider()
		}
		routes[f.Path()] = Route{Format: f, Provider: p}
	}
	if provider == "" {
		routes[GeminiPath] = Route{Format: GeminiGenerate, Provider: GeminiGenerate.Provider()}
		maps.Copy(routes, BedrockRoutes(""))
	}
	return routes
}

// Config configures the middleware.
type Config struct {
	// Mode is ModeReserve or ModeCheck. (Optional; default ModeReserve.)
	Mode Mode
	// Keys maps a gateway secret to a key name. (Optional; default
	// NewKeys over the tracker's store, which must then be a KeyStore, as
	// both of this module's stores are.)
	Keys KeyLookup
	// Routes maps URL paths to what is served there; any other path gets
	// 404. A route without a provider gets its format's default.
	// (Optional; default DefaultRoutes("").)
	Routes map[string]Route
	// DefaultMaxOutput is the output estimate of a request without a max
	// tokens field, and the largest cap injected into one (see CapField).
	// (Optional; default DefaultMaxOutput.)
	DefaultMaxOutput int64
	// CapField is where a request without an output cap of its own
	// (max_tokens, max_completion_tokens, max_output_tokens) gets one:
	// CapAuto (the field the route's API reads), a field name, or CapNone
	// (no cap is injected). The cap injected is the largest up to
	// DefaultMaxOutput that the room left admits, at least
	// MinInjectedOutput, decided with the admission (inside the
	// reservation's transaction in reserve mode): the upstream can then
	// never generate more than was admitted. Embeddings and Anthropic
	// requests get none (Anthropic's API requires max_tokens). A client's
	// own cap is never changed. (Optional; default CapAuto.)
	CapField string
	// MaxClientWait is the longest Retry-After a refusal lets clients
	// retry after: a budget or park refusal whose wait is longer carries
	// x-should-retry: false, which the official SDKs obey, so the caller
	// gets the 429 at once instead of an SDK sleeping until a daily window
	// resets. Shorter waits (a requests-per-minute window, a concurrency
	// lease) stay retryable. Negative: every refusal says not to retry.
	// (Optional; default DefaultMaxClientWait, 60s.)
	MaxClientWait time.Duration
	// OpenAIProviders are the providers of the OpenAI-kind upstreams, in
	// the order the operator gave them, when there are several: an
	// OpenAI-shaped request (the routes' OpenAI paths, whose provider is
	// the first of them) goes to the one the first matching ModelRoutes
	// entry names, else to the one its X-Budget-Provider header
	// (ProviderHeader) names (404 when that is none of these), else to its
	// route's. (Optional.)
	OpenAIProviders []string
	// ModelRoutes route OpenAI-shaped requests by their normalised model,
	// first match first; each names one of OpenAIProviders. (Optional.)
	ModelRoutes []ModelRoute
	// RequireLimits refuses a request that no enabled limit applies to
	// (its key's own, a default, its team's or org's; a per-user limit
	// only when it names an end user): 403 with code no_budget,
	// before any upstream call. (Optional; default false: such a request
	// is unlimited.)
	RequireLimits bool
	// ImageTokens is the fixed estimate of one image or file part.
	// (Optional; default DefaultImageTokens.)
	ImageTokens int64
	// MaxBody caps a request body in bytes; a larger one gets 413 before
	// any upstream call. (Optional; default DefaultMaxBody, 32 MiB.)
	MaxBody int64
	// MaxResponseBody caps the non-streamed response kept for reading its
	// usage; a larger one is passed through and recorded at the estimate.
	// (Optional; default DefaultMaxResponseBody, 64 MiB.)
	MaxResponseBody int64
	// ReservationTTL is the lifetime of a reservation, renewed every third
	// of it while the response lasts: the concurrency leases of a proxy
	// that dies are free within it. (Optional; default
	// DefaultReservationTTL, 20s.)
	ReservationTTL time.Duration
	// BodyTimeout bounds reading a request body; a client that has not
	// sent it all in time gets 408. It needs a ResponseWriter that supports
	// read deadlines (net/http's do); others read without one. (Optional;
	// default DefaultBodyTimeout, 30s.)
	BodyTimeout time.Duration
	// MaxInflightBytes bounds the request body bytes held by requests in
	// progress; a request that would go over gets 503 with Retry-After
	// (one whose Content-Length is over MaxBody gets 413 first). Bytes are
	// held as they arrive (a buffer that grows with the body, plus a small
	// read-ahead), not as a Content-Length declares them. It should be at
	// least MaxBody and a quarter (a buffer's growth holds the old and the
	// new one for a moment), or the largest bodies are never served.
	// (Optional; default DefaultMaxInflightBytes, 256 MiB.)
	MaxInflightBytes int64
	// MaxInflightBytesPerKey bounds the request body bytes one gateway key
	// holds at once, so that one key's slow or large bodies cannot take
	// the whole of MaxInflightBytes; past it that key gets 503.
	// (Optional; default a quarter of MaxInflightBytes, but at least
	// twice MaxBody, and at most MaxInflightBytes.)
	MaxInflightBytesPerKey int64
	// MinBodyRate is the slowest, in bytes a second, a request body may
	// arrive once MinBodyRateGrace has passed: a body that falls behind is
	// cut with 408, long before BodyTimeout, so that a trickling client
	// cannot hold its buffer. (Optional; default DefaultMinBodyRate,
	// 4 KiB/s; negative: no minimum.)
	MinBodyRate int64
	// MinBodyRateGrace is the time a body has before MinBodyRate applies.
	// (Optional; default DefaultMinBodyRateGrace, 2s.)
	MinBodyRateGrace time.Duration
	// OverloadedAfter is how many 503s in a row park a provider as
	// overloaded. (Optional; default DefaultOverloadedAfter.)
	OverloadedAfter int
	// DisableParking leaves providers alone after upstream 429, 529, 503,
	// 401 and 403 answers. (Optional; default false: they park it.)
	DisableParking bool
	// Metrics receives the request metrics. (Optional.)
	Metrics *Metrics
	// Logger gets a line for every response without usage, every park and
	// every store failure; never a secret. (Optional; default slog.Default().)
	Logger *slog.Logger
	// AccessLog gets one line per request the middleware answers (see
	// Middleware.Wrap): key name, provider, model, status, outcome (a
	// refusal's limit, level and code with it), the estimate, the tokens
	// charged and the latency; never a secret, never a prompt. (Optional; nil: no access log.)
	AccessLog *slog.Logger
	// Observer sees every request the middleware answers, when it arrives
	// and once it is settled: tracing and metrics (the telemetry
	// package's OpenTelemetry). (Optional; nil: none.)
	Observer Observer

	// renewAfter schedules the reservations' renewals in place of
	// time.AfterFunc: the tests' seam (SetRenewTimers), which fire them
	// at the instants they choose.
	renewAfter func(d time.Duration, f func()) renewTimer
}

// Middleware enforces token budgets around an upstream handler; see Wrap.
// It is safe for concurrent use.
type Middleware struct {
	t    *budget.Tracker
	cfg  Config
	keys KeyLookup
	log  *slog.Logger
	bufs sync.Pool // *[]budget.Status

	state sync.Map // provider name -> *providerState

	inflightMu  sync.Mutex
	inflight    int64            // request body bytes held (MaxInflightBytes)
	inflightKey map[string]int64 // by key (MaxInflightBytesPerKey); no zero entries

	settling settling // the store writes that follow their responses
}

// providerState is what the middleware remembers of a provider's answers.
type providerState struct {
	unavailable atomic.Int32 // 503s in a row
	parked      atomic.Bool  // parked by this middleware, not yet seen to recover
}

// New returns a middleware enforcing t's budgets.
func New(t *budget.Tracker, cfg Config) (*Middleware, error) {
	if t == nil {
		return nil, errors.New("proxy: New needs a Tracker")
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeReserve
	}
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, err
	}
	if cfg.Routes == nil {
		cfg.Routes = DefaultRoutes("")
	} else {
		routes := make(map[string]Route, len(cfg.Routes))
		for p, r := range cfg.Routes {
			if r.Format == Unknown {
				return nil, budget.Invalid("route", p, "has no format")
			}
			if r.Provider = strings.TrimSpace(r.Provider); r.Provider == "" {
				r.Provider = r.Format.Provider()
			}
			if err := budget.CheckName("provider", r.Provider); err != nil {
				return nil, err
			}
			routes[p] = r
		}
		cfg.Routes = routes
	}
	cfg.ModelRoutes = slices.Clone(cfg.ModelRoutes)
	if err := checkModelRoutes(&cfg); err != nil {
		return nil, err
	}
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.DefaultMaxOutput, DefaultMaxOutput)
	def(&cfg.ImageTokens, DefaultImageTokens)
	def(&cfg.MaxBody, DefaultMaxBody)
	def(&cfg.MaxResponseBody, DefaultMaxResponseBody)
	def(&cfg.MaxInflightBytes, DefaultMaxInflightBytes)
	def(&cfg.MaxInflightBytesPerKey, min(cfg.MaxInflightBytes, max(cfg.MaxInflightBytes/4, 2*cfg.MaxBody)))
	if cfg.MinBodyRate == 0 {
		cfg.MinBodyRate = DefaultMinBodyRate
	}
	if cfg.MinBodyRateGrace <= 0 {
		cfg.MinBodyRateGrace = DefaultMinBodyRateGrace
	}
	if cfg.ReservationTTL <= 0 {
		cfg.ReservationTTL = DefaultReservationTTL
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.OverloadedAfter <= 0 {
		cfg.OverloadedAfter = DefaultOverloadedAfter
	}
	if cfg.MaxClientWait == 0 {
		cfg.MaxClientWait = DefaultMaxClientWait
	}
	var err error
	if cfg.CapField, err = ParseCapField(cfg.CapField); err != nil {
		return nil, err
	}
	m := &Middleware{t: t, cfg: cfg, keys: cfg.Keys, log: cfg.Logger, inflightKey: map[string]int64{}}
	if m.keys == nil {
		ks, ok := budget.StoreAs[KeyStore](t)
		if !ok {
			return nil, budget.Invalid("Keys", "nil", "is required: the tracker's store keeps no gateway keys")
		}
		m.keys = NewKeys(ks)
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	cfg.Metrics.routes(cfg.Routes)
	return m, nil
}

// Info is what the middleware decided about a request, in the context of
// the request it hands to the wrapped handler (see InfoFrom).
type Info struct {
	// RequestID is the usage event's request id: the reservation id in
	// reserve mode, a generated one in check mode. It is also sent back in
	// the X-Tokenbudget-Request-Id header.
	RequestID string
	// At is when the request was admitted: its usage counts in the windows
	// holding At (a reservation's instant in reserve mode).
	At  time.Time
	Key string // the gateway key's name
	// Team and Org are the key's placement the request is charged to, as
	// its reservation took it (reserve mode); "" in check mode, where the
	// event is placed when it is written.
	Team, Org string
	// User is the request's end user: the X-Budget-User header, else the
	// body's (RequestInfo.User); "" when none is named. Its usage and
	// reservation carry it, so user-scope limits count it.
	User string
	// Tags are the request's tags: the X-Budget-Tags header, normalized
	// (TagsHeader). Its usage and reservation carry them.
	Tags    budget.Tags
	Route   Route
	Request RequestInfo
	// Estimate is what was admitted: the request's estimate, its output
	// part shrunk to the injected cap when one was (InjectedCap).
	Estimate budget.Estimate
	// InjectedCap is the output cap the proxy put in the request, in the
	// field CapField says, because the client set none (0: none).
	InjectedCap int64

	// stalled is set by NewUpstream's transport when the upstream went
	// quiet mid-response for longer than its stream idle timeout.
	stalled atomic.Bool
}

type infoKey struct{}

// InfoFrom returns the middleware's Info of a request it forwarded.
func InfoFrom(ctx context.Context) (*Info, bool) {
	i, ok := ctx.Value(infoKey{}).(*Info)
	return i, ok
}

// Wrap returns next behind the budget: for each request on a route it
// authenticates the gateway key (Authorization: Bearer or x-api-key; 401
// otherwise) and removes it, caps the body (413), estimates the request
// (RequestInfo.Estimate), reserves or checks the estimate against the key's limits
// for the request's provider and model (429 with rate-limit headers when
// refused; 429 or 503 when the provider is parked; 403 no_budget when
// RequireLimits and no limit applies), injects an output cap into a
// request without one (CapField), then calls next with the body
// (stream_options.include_usage added to a streamed chat request) and
// without Accept-Encoding. It reads the usage of next's response as it
// passes through, streamed or not, and commits it (records it in check
// mode), or the estimate when the response reports none; it releases the
// reservation when next answers an error. Upstream 429, 529, repeated 503,
// 401 and 403 answers park the provider. GET /v1/models (and
// /v1/models/ID) needs a valid key, costs no budget and goes to next as
// it is. GET /v1/budget (BudgetPath) needs a valid key, costs no budget
// and is answered here: the key's limits (see Budget). Every request gets
// one AccessLog line.
//
// The settlement (the usage charged and its cost) is decided in memory
// before the response's last bytes go out: a non-streamed answer carries
// it in X-Tokenbudget-Cost and X-Tokenbudget-Charged-Tokens, a stream in
// trailers of those names. The commit, release or record is queued in
// the tracker before the handler returns; the wait for its store write,
// the Observer's End and the access log line follow once it returned, on
// a goroutine Close waits for: the client never waits for the store.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		x := &exchange{ResponseWriter: w, start: time.Now()}
		var end func(*Observation)
		if m.cfg.Observer != nil {
			r, end = m.begin(r)
		}
		defer m.done(x, r, end)
		m.serve(x, r, next)
	})
}

func (m *Middleware) serve(x *exchange, r *http.Request, next http.Handler) {
	var w http.ResponseWriter = x
	ctx := r.Context()
	// A gateway header: the upstream never sees it, on any path.
	hdrUser := strings.TrimSpace(r.Header.Get(UserHeader))
	r.Header.Del(UserHeader)
	hdrProvider := strings.TrimSpace(r.Header.Get(ProviderHeader))
	r.Header.Del(ProviderHeader)
	hdrTags := takeTags(r.Header)
	if isModels(r.URL.Path) {
		m.models(x, r, next)
		return
	}
	if r.URL.Path == BudgetPath {
		m.budget(x, r)
		return
	}
	if r.URL.Path == countTokensPath && m.countTokens(x, r, next) {
		return
	}
	tg, ok := m.routeFor(r.URL.Path, r.URL.EscapedPath())
	route := tg.route
	if !ok {
		m.outcome(w, OutcomeNotFound)
		writeError(w, Unknown, simpleError(Unknown, http.StatusNotFound, CodeNotFound, "no route "+r.URL.Path+": this proxy serves "+m.paths()))
		return
	}
	f := route.Format
	x.provider = route.Provider
	if !m.allowMethod(x, r, f, http.MethodPost) {
		return
	}
	key, ok := m.authenticate(x, r, f)
	if !ok {
		return
	}

	body, held, ok := m.readBody(w, r, f, key)
	defer m.release(key, held)
	if !ok {
		return
	}
	a := route.adapter()
	ri, err := parseRequest(a, body)
	if err != nil {
		m.outcome(w, OutcomeBadRequest)
		writeError(w, f, simpleError(f, http.StatusBadRequest, CodeBadRequest, "the request body is not a JSON object"))
		return
	}
	if tg.Model != "" {
		ri.Model = tg.Model // what Azure or Gemini runs, whatever the body says
	}
	ri.Stream = ri.Stream || tg.Stream
	// Before anything is written or logged: the model is the one string a
	// client chooses that the tracker stores (reservations, usage), and
	// the error quotes only its start.
	if err := budget.CheckName("model", ri.Model); err != nil {
		m.outcome(w, OutcomeBadRequest)
		writeError(w, f, simpleError(f, http.StatusBadRequest, CodeBadRequest, err.Error()))
		return
	}
	x.model = ri.Model
	if !m.modelAllowed(w, f, key, ri.Model) {
		return
	}
	if route.Provider, ok = m.chooseProvider(route, ri.Model, hdrProvider); !ok {
		m.outcome(w, OutcomeNotFound)
		writeError(w, f, simpleError(f, http.StatusNotFound, CodeNotFound, "no upstream "+clipName(hdrProvider)+
			" (the "+ProviderHeader+" header): OpenAI-shaped requests go to "+strings.Join(m.cfg.OpenAIProviders, ", ")))
		return
	}
	x.provider = route.Provider
	user, ok := m.endUser(w, f, hdrUser, &ri)
	if !ok {
		return
	}
	x.user = user
	tags, ok := m.requestTags(w, f, hdrTags)
	if !ok {
		return
	}
	est := ri.Estimate(f, m.cfg.DefaultMaxOutput, m.cfg.ImageTokens)
	// A request without a cap gets one: the output estimate may shrink to
	// the room left, down to the floor, and the upstream is told the
	// result, so no answer can outgrow what was admitted.
	field, choices, minOutput := "", int64(1), int64(0)
	if !ri.HasCap {
		if field = a.CapField(m.cfg.CapField); field != "" {
			// The cap is per choice (chat's n, Gemini's candidateCount),
			// the estimate for all of them.
			choices = max(1, min(ri.Choices, wire.MaxChoices))
			minOutput = min(MinInjectedOutput, m.cfg.DefaultMaxOutput) * choices
		}
	}
	body, strip, err := a.Prepare(body, &ri)
	if err != nil {
		m.outcome(w, OutcomeBadRequest)
		writeError(w, f, simpleError(f, http.StatusBadRequest, CodeBadRequest, "the request body is not a JSON object"))
		return
	}
	info := &Info{Key: key, User: user, Tags: tags, Route: route, Request: ri, Estimate: est}
	x.est, x.info = &info.Estimate, info
	req := budget.Request{Key: key, Provider: route.Provider, Model: ri.Model, User: user, Tags: tags, Estimate: est, ServiceTier: ri.ServiceTier}
	extra := make(http.Header, 8)
	res, ok := m.admit(w, r, f, req, minOutput, info, extra)
	if !ok {
		return
	}
	x.requestID = info.RequestID
	w.Header().Set("X-Tokenbudget-Request-Id", info.RequestID)
	if field != "" {
		info.InjectedCap = info.Estimate.Output / choices
		info.Estimate.Output = info.InjectedCap * choices
		// The body parsed as a JSON object above, so this cannot fail.
		body, _ = withCap(body, field, info.InjectedCap)
		extra.Set("X-Tokenbudget-Max-Output", strconv.FormatInt(info.InjectedCap, 10))
	}

	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	r.Header.Del("Accept-Encoding")
	r = r.WithContext(context.WithValue(ctx, infoKey{}, info))

	rec := &recorder{w: w, f: f, a: a, reqID: info.RequestID, extra: extra, stripUsage: strip, maxJSON: m.cfg.MaxResponseBody,
		stream: ri.Stream}
	var renew *renewer
	if res != nil {
		renew = m.startRenew(res)
	}
	defer func() {
		p := recover()
		if renew != nil {
			renew.stop()
		}
		m.settle(x, r, rec, info, route, res, p != nil)
		if p != nil {
			panic(p)
		}
	}()
	next.ServeHTTP(rec, r)
}

// authenticate looks the request's gateway key up and removes it from the
// request; it answers 401 (or 503) and returns false when there is none.
func (m *Middleware) authenticate(x *exchange, r *http.Request, f Format) (string, bool) {
	key, err := m.keys.Lookup(r.Context(), RequestSecret(r))
	if err != nil {
		if errors.Is(err, ErrUnknownKey) {
			m.outcome(x, OutcomeUnauthorized)
			writeError(x, f, simpleError(f, http.StatusUnauthorized, CodeInvalidKey,
				"invalid gateway key: send a key from 'budget key add' where the SDK sends its API key (Authorization: Bearer, x-api-key, api-key, x-goog-api-key or ?key=)"))
			return "", false
		}
		m.unavailable(x, r, f, "look up the gateway key", err)
		return "", false
	}
	x.key = key
	stripKey(r)
	if m.expired(x, f, key) {
		return "", false
	}
	return key, true
}

// endUser is the request's end user: hdr (the X-Budget-User header,
// trimmed) when set, else the body's. A name the tracker could not store
// (budget.CheckName) is 400, naming where it came from, before anything is
// written or logged; ok is false then.
func (m *Middleware) endUser(w http.ResponseWriter, f Format, hdr string, ri *RequestInfo) (user string, ok bool) {
	user, from, param := hdr, "the "+UserHeader+" header", ""
	if user == "" {
		user, from, param = ri.User, "the body's "+ri.UserField, ri.UserField
	}
	if user == "" {
		return "", true
	}
	if err := budget.CheckName("user", user); err != nil {
		m.outcome(w, OutcomeBadRequest)
		e := simpleError(f, http.StatusBadRequest, CodeBadRequest, err.Error()+" (from "+from+")")
		e.param = param
		writeError(w, f, e)
		return "", false
	}
	return user, true
}

// outcome counts a request's outcome in the metrics and, when w is the
// request's exchange, keeps it for the access log.
func (m *Middleware) outcome(w http.ResponseWriter, o string) {
	m.cfg.Metrics.outcome(o)
	if x, ok := w.(*exchange); ok {
		x.outcome = o
	}
}

// allowMethod reports whether r uses method (GET admits HEAD too), or
// answers 405 naming it.
func (m *Middleware) allowMethod(x *exchange, r *http.Request, f Format, method string) bool {
	if r.Method == method || (method == http.MethodGet && r.Method == http.MethodHead) {
		return true
	}
	m.outcome(x, OutcomeBadRequest)
	x.Header().Set("Allow", method)
	writeError(x, f, simpleError(f, http.StatusMethodNotAllowed, CodeBadRequest, r.Method+" is not allowed on "+r.URL.Path+": use "+method))
	return false
}

// paths lists the served paths, for a 404's message.
func (m *Middleware) paths() string {
	var ps []string
	for p := range m.cfg.Routes {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return strings.Join(ps, ", ")
}

// readBody reads the request body up to MaxBody within BodyTimeout and no
// slower than MinBodyRate, holding its buffer against MaxInflightBytes and
// key's MaxInflightBytesPerKey; held is what the caller gives back
// (release) once the body is no longer needed. ok is false once it has
// answered 413, 408, 503 or 400.
func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request, f Format, key string) (body []byte, held int64, ok bool) {
	fail := func(outcome string, e apiError) ([]byte, int64, bool) {
		m.outcome(w, outcome)
		// The rest of the body is not read: the connection cannot be reused.
		w.Header().Set("Connection", "close")
		writeError(w, f, e)
		return nil, held, false
	}
	tooLarge := func() ([]byte, int64, bool) {
		return fail(OutcomeTooLarge, simpleError(f, http.StatusRequestEntityTooLarge, CodeTooLarge,
			"the request body exceeds the gateway's limit of "+strconv.FormatInt(m.cfg.MaxBody, 10)+" bytes"))
	}
	busy := func() ([]byte, int64, bool) {
		w.Header().Set("Retry-After", "1")
		return fail(OutcomeBusy, simpleError(f, http.StatusServiceUnavailable, CodeBusy,
			"the gateway holds too many request bytes now; retry shortly"))
	}
	slow := func() ([]byte, int64, bool) {
		return fail(OutcomeTimeout, simpleError(f, http.StatusRequestTimeout, CodeTimeout,
			"the request body arrived slower than "+strconv.FormatInt(m.cfg.MinBodyRate, 10)+" bytes/s"))
	}
	if r.ContentLength > m.cfg.MaxBody {
		return tooLarge()
	}
	if r.Body == nil || r.ContentLength == 0 {
		return nil, 0, true
	}
	// One byte more than the body may have sees its end.
	limit := m.cfg.MaxBody + 1
	if r.ContentLength > 0 {
		limit = r.ContentLength + 1
	}
	rc := http.NewResponseController(w)
	start := time.Now()
	end := start.Add(m.cfg.BodyTimeout)
	deadlines := rc.SetReadDeadline(end) == nil
	if deadlines {
		// For the body only: the response may stream for much longer.
		defer rc.SetReadDeadline(time.Time{})
	}
	// behind is when a body of n bytes so far falls behind MinBodyRate.
	behind := func(n int) time.Time {
		if m.cfg.MinBodyRate <= 0 {
			return end
		}
		// Whole seconds apart from the rest: n * time.Second overflows
		// for a MaxBody over 9 GB.
		rate := m.cfg.MinBodyRate
		due := time.Duration(int64(n)/rate)*time.Second + time.Duration(int64(n)%rate)*time.Second/time.Duration(rate)
		return start.Add(m.cfg.MinBodyRateGrace + due)
	}
	// What a Content-Length declares is not held before it arrives: a
	// client declaring MaxBody and sending nothing holds a read-ahead.
	size := min(limit, m.readAhead())
	if !m.hold(key, size) {
		return busy()
	}
	held = size
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			// The buffer doubles up to a quarter of the limit, then takes
			// the limit at once: while the bytes are copied both buffers
			// live, and both are held, at most a quarter over the limit.
			old := int64(cap(buf))
			next := min(limit, 2*old)
			if 4*next > limit {
				next = limit
			}
			if !m.hold(key, next) {
				return busy()
			}
			held += next
			nb := make([]byte, len(buf), next)
			copy(nb, buf)
			buf = nb
			m.release(key, old)
			held -= old
		}
		if deadlines {
			rc.SetReadDeadline(minTime(end, behind(len(buf))))
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > m.cfg.MaxBody {
			return tooLarge()
		}
		if err == io.EOF {
			return buf, held, true
		}
		now := time.Now()
		if err == nil && now.After(behind(len(buf))) && now.Before(end) {
			return slow() // a writer without read deadlines
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if now.Before(end) {
					return slow()
				}
				return fail(OutcomeTimeout, simpleError(f, http.StatusRequestTimeout, CodeTimeout,
					"the request body did not arrive within "+m.cfg.BodyTimeout.String()))
			}
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return tooLarge()
			}
			return fail(OutcomeBadRequest, simpleError(f, http.StatusBadRequest, CodeBadRequest, "reading the request body failed"))
		}
	}
}

// readAhead is the buffer a body starts with: small beside
// MaxInflightBytes, so that many stalled bodies hold little.
func (m *Middleware) readAhead() int64 {
	return min(16<<10, max(64, m.cfg.MaxInflightBytes/256))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// hold takes n bytes of MaxInflightBytes and of key's
// MaxInflightBytesPerKey, or reports that they are not free.
func (m *Middleware) hold(key string, n int64) bool {
	m.inflightMu.Lock()
	defer m.inflightMu.Unlock()
	if m.inflight+n > m.cfg.MaxInflightBytes || m.inflightKey[key]+n > m.cfg.MaxInflightBytesPerKey {
		return false
	}
	m.inflight += n
	m.inflightKey[key] += n
	return true
}

// release gives back n bytes hold took for key.
func (m *Middleware) release(key string, n int64) {
	if n == 0 {
		return
	}
	m.inflightMu.Lock()
	defer m.inflightMu.Unlock()
	m.inflight -= n
	if v := m.inflightKey[key] - n; v != 0 {
		m.inflightKey[key] = v
	} else {
		delete(m.inflightKey, key)
	}
}
