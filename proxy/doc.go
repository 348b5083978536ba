// Package proxy is the HTTP layer of tokenbudget: a net/http middleware
// that enforces token budgets around any handler, the reverse proxy and
// handler of `budget proxy` and gateway keys, for OpenAI's Chat
// Completions, Responses, Embeddings and image APIs (and the
// OpenAI-compatible servers, Azure OpenAI), Anthropic's Messages API,
// Gemini's and Vertex AI's generateContent and Bedrock's Converse and
// InvokeModel, streamed or not, each read by its kind's adapter (see API
// kinds below).
//
// The middleware (New, Middleware.Wrap) takes a request through:
//
//  1. its route (Config.Routes: path -> Format and provider; others 404;
//     GET /v1/models and /v1/models/ID, see below);
//  2. the gateway key, "Authorization: Bearer" or "x-api-key", looked up
//     by its SHA-256 in a KeyStore (Keys: found or not, an answer is
//     trusted for DefaultKeyTTL; keys found and unknown secrets are cached
//     apart, each bounded, so made-up secrets never evict a known key;
//     the key opens for its secret, or for the secret a
//     rotation replaced until the grace period ends, decided at each
//     request with the current time; 401 otherwise); the secret is removed
//     before forwarding and never logged. Keys records a key's last use at
//     most once a minute, on a goroutine of its own;
//  3. the body: over MaxBody 413 (from its Content-Length, before a byte
//     is read); not all there within BodyTimeout, or arriving slower
//     than MinBodyRate, 408; its bytes held as they arrive against
//     MaxInflightBytes and the key's MaxInflightBytesPerKey, 503 with
//     Retry-After when they would go over; then read for the model, the output cap, the end user and
//     the prompt estimate (RequestInfo.Estimate; the output at the
//     largest of max_tokens, max_completion_tokens and max_output_tokens,
//     since an upstream may honour any of them). The end user is the
//     X-Budget-User header (UserHeader, never forwarded, on any path),
//     its tags the X-Budget-Tags header (TagsHeader, never forwarded,
//     on any path; bad tags are 400 as bad names are),
//     else the body's "user" string (OpenAI), else its metadata.user_id
//     string (Anthropic); none when all are blank. A model or an end user
//     the tracker could not store (budget.CheckName: over
//     budget.MaxNameLen bytes, control characters) is 400 before anything
//     is written or logged, naming the field and where it came from,
//     quoted only in part;
//  4. admission: Tracker.ReserveWith (ModeReserve, exact) or Tracker.Check
//     (ModeCheck, fast) for key name, provider, the request's model and end
//     user, against the limits of the key, its team, its organisation and
//     the defaults (the tracker decides which apply). A request without a
//     cap of its own (Config.CapField) is admitted with the largest output
//     up to DefaultMaxOutput that the room left allows, at least
//     MinInjectedOutput (budget.ReserveOptions.MinOutput inside the
//     reservation's transaction; budget.FitOutput on Check's statuses), and
//     forwarded with that cap in the field its API reads, so no answer
//     outgrows its admission. A refusal is a 429 with Retry-After,
//     x-ratelimit-*-tokens, the IETF RateLimit-Policy and RateLimit fields,
//     X-Tokenbudget-Limit and -Limit-Scope, and an OpenAI- or
//     Anthropic-shaped body (code token_budget_exceeded, or provider_parked:
//     429, 503 when overloaded); x-should-retry: false when it can never fit
//     or its wait is over MaxClientWait (60s), so SDKs do not sleep until a
//     window resets. Retry-After, the x-ratelimit-* fields, the message and
//     reset_at all come from the limit whose reset lets the request pass
//     (budget.Decision.Until); dollar limits stay out of the token fields. A
//     model without a price under a dollar limit (unpriced_model) is a
//     configuration error, not a rate limit: 403 in the API's permission
//     shape with x-should-retry: false. A budget refusal names the level whose limit refused
//     ("team eng limit lim_...", and level and owner in its limit object)
//     and counts the limit in force (raises included, budget.Status.Max);
//     a limit that never resets (window once) announces no reset: no
//     Retry-After, reset header or reset_at. With RequireLimits a request no
//     enabled limit applies to is 403 no_budget. A reservation is charged on
//     expiry (budget.ExpireCharge) and lasts ReservationTTL (20s), renewed
//     every third of it while the request runs: if the process dies,
//     recovery charges the estimate (the client may have had its answer; a
//     request never served may be charged, a served one is never missed) and
//     the concurrency leases are free within the TTL. A tracker with
//     budget leases (budget.Config.Leases, budget proxy's default) answers
//     most reservations in memory, from room it holds per route and
//     journals each admission and settlement before the call returns, so
//     reserve mode costs about what check mode does and recovery charges
//     exactly (a settled request its usage, one in flight its estimate,
//     under the id the client saw); reads (GET /v1/budget, the dashboard,
//     inspect) count a lease's room as reserved. Tagged requests, routes
//     with a concurrent or dollar limit and a tracker without leases
//     reserve through the store;
//  5. the wrapped handler, with stream_options.include_usage added to a
//     streamed chat request and no Accept-Encoding, whose stream passes
//     through as it comes, each SSE event flushed (a usage-only chunk the
//     client did not ask for is dropped), its usage and streamed text read
//     on the way; a 2xx non-streamed body is held until it ends (up to
//     MaxResponseBody; a larger or compressed one passes through as it
//     comes) so that its settlement is known before its first byte goes
//     out. Every answer carries X-Tokenbudget-Request-Id: the
//     request id its usage is recorded under (the reservation id, or a
//     generated one in check mode), whatever the upstream sent; a 2xx
//     also the rate-limit headers of the limit with the least room left
//     (X-Tokenbudget-Limit, -Limit-Scope) and, when a cap was injected,
//     X-Tokenbudget-Max-Output;
//  6. settlement, decided in memory once the upstream's answer ended and
//     priced by the tracker's price table (budget.Tracker.PriceUsage, the
//     cost the event is stored at): a held body goes out with
//     X-Tokenbudget-Cost (dollars, six places; absent when no price
//     matches) and X-Tokenbudget-Charged-Tokens, a stream sends them as
//     trailers it declared, an upstream error says 0. The
//     settlement is queued in the tracker (budget.Tracker.CommitQueued,
//     ReleaseQueued, RecordQueued: in memory, so the client's next request
//     is decided after it); then the handler returns, so the client's
//     response completes, and the wait for the store write follows on a
//     goroutine of its own (Middleware.Close waits for these), on a context
//     the client leaving does not cancel. Two degraded cases are the
//     exceptions, deliberate (usage is never dropped; a leased commit is
//     durable before the client hears of it): a full writer queue blocks
//     the queueing up to settleTimeout (30 s), and a leased commit whose
//     lease journal is sealed after a failed write waits for its store
//     write before the response ends. The usage
//     is committed (recorded in check mode, with the end user; a commit and
//     a charge on expiry take it from the reservation); a response without
//     usage, or with an invalid one (a count or the billable sum over
//     2^53-1), at the estimate (logged, counted); a stream the client left
//     at the usage reported so far, else the input estimate plus
//     ceil(streamed text bytes / 4); a stream the upstream cut short (or
//     that stalled) at what it reported plus the estimate of the rest; an
//     error answer releases the reservation. A commit the store cannot take
//     yet stays queued in the tracker until it can. Upstream 429, 529,
//     repeated 503, 401 and 403 answers park the provider;
//  7. after the write, the Observer's End (Config.Observer; its Begin saw
//     the request arrive and may have set trace-context headers that go
//     upstream): the seam the telemetry package's OpenTelemetry spans use,
//     so that this package imports no tracing library; then one AccessLog
//     line (key name, provider, model, end user, status, outcome, estimate,
//     tokens charged, cost, latency to the response's end; never a secret
//     or a prompt).
//
// GET /v1/models (and /v1/models/ID) needs a valid gateway key, costs no
// budget, and goes to the wrapped handler as it is, with the Info of the
// family's route: Anthropic's when it carries anthropic-version, else
// OpenAI's, so NewUpstream sends that family's credential. POST
// /v1/messages/count_tokens is passed the same way to the Anthropic
// Messages route's upstream when there is one (Anthropic charges nothing
// for it, and coding agents call it before many turns).
//
// Azure OpenAI (AzureRoutes): a route keyed DeploymentPath + "chat/completions"
// (etc.) serves /openai/deployments/NAME/chat/completions with NAME as the
// request's model; Route.Kind KindAzure has NewUpstream send
// UpstreamConfig.AzureKey as api-key. The gateway key is accepted where
// each SDK sends its API key (RequestSecret: Authorization: Bearer,
// x-api-key, api-key, x-goog-api-key, ?key=), and every one of those places
// is stripped before forwarding.
//
// Gemini (GeminiRoutes, GeminiPath; Vertex AI's publisher paths at
// VertexPath): generateContent and streamGenerateContent, the model and the
// stream named by the path, the cap injected in
// generationConfig.maxOutputTokens, usageMetadata read from a body, an
// alt=sse stream or a JSON-array stream (framed chunk by chunk, so a stream
// cut short keeps its last usage), refusals in Google's error shape;
// NewUpstream sends UpstreamConfig.GeminiKey as x-goog-api-key. Vertex AI
// (VertexRoutes, Route.Kind KindVertex) is read the same way and
// authenticated with an OAuth token from UpstreamConfig.GoogleTokens (Google
// application default credentials), put on each Vertex request by
// NewUpstream's transport. The client's query reaches the upstream as it
// was sent (Vertex's $alt=json;enum-encoding=int included), less a gateway
// key= parameter.
//
// Many upstreams: KindRoutes gives the routes of an upstream of an API
// kind under its provider name; Upstreams forwards each admitted request to
// its route's provider's handler. With several OpenAI-kind upstreams
// (Config.OpenAIProviders) an OpenAI-shaped request goes to the provider of
// the first Config.ModelRoutes pattern matching its normalised model, else
// to the one its X-Budget-Provider header (ProviderHeader, never forwarded)
// names, else to its route's; a header naming none of them is 404.
//
// GET /v1/budget (BudgetPath) is self-service: with a valid gateway key
// (the same lookup and the same 401 as step 2) the middleware answers it
// itself with 200 {"key", "limits"} (Budget): the status of every limit
// that applies to the key (its own, its team's, its organisation's and the
// defaults with its usage; a per-user limit once per end user with usage in
// the window), each the object of `budget inspect --json` (package
// jsonview) with its forecast, read in one snapshot
// (budget.Tracker.Inspect). Nothing about another key's own limits; it
// costs no budget (nothing is reserved or recorded) and never goes
// upstream.
//
// NewUpstream is the httputil.ReverseProxy that puts the upstream
// credential in the header each route family uses, and bounds the upstream
// call: response headers within HeaderTimeout (10m, for slow reasoning
// models; 504 past it) and no wait for more of the body longer than
// StreamIdleTimeout (5m; the response is then cut off, charged as cut
// short, counted as an upstream error). NewHandler mounts the middleware
// over it with /healthz (TrackerHealth: 503 with the reason while the
// tracker's writes fail, as on a full disk, or its database file was
// deleted or replaced) and /metrics (Metrics, with per-limit gauges read
// from the store at each scrape for the limits with alert thresholds and
// those named by Metrics.GaugeLimits). Package proxy/mock is a fake
// provider of every kind, answering like the real APIs without an account.
//
// API kinds: one adapter each. What differs between APIs sits behind one
// interface, wire.Adapter (proxy/internal/wire), chosen by a route's
// Format and Kind (proxy/internal/kinds.For): how a request names its
// model, cap, stream and end user and what its estimate counts
// (Request); where a cap is injected (CapField); a body the proxy changes
// before forwarding (Prepare: an OpenAI chat stream's include_usage); where
// usage sits in a body (Body) and in a stream, read as it passes through
// (Stream: SSE, Gemini's JSON array, Bedrock's event-stream; a
// wire.Decoder per kind for SSE events); the upstream credential
// (Authorize; signatures and OAuth tokens are NewUpstream's transport);
// and the error shape of refusals (ErrorBody, ErrorType). The middleware,
// the recorder and NewUpstream ask the route's adapter and never switch on
// a Format. Each kind is a package of its own under proxy/internal:
// openai (Chat Completions, Responses, Embeddings, images; Azure OpenAI's
// credential), anthropic (Messages), gemini (generateContent, Gemini API
// and Vertex AI), bedrock (Converse and InvokeModel); wire holds what they
// share (SSE framing, stripping, JSON scanning, Tokens, the request's top
// level) and none of it is exported from proxy.
//
// Adding an API kind:
//  1. a package proxy/internal/NAME implementing wire.Adapter (a
//     wire.Decoder for its stream events, or a wire.Stream of its own for
//     a framing that is not SSE), with table tests over recorded real
//     responses in testdata/captures (their sources listed) and a fuzz
//     target over its parsers;
//  2. a Format in wire/format.go (its name, default provider), the adapter
//     in kinds.For's table, and, when its path names the model, the path
//     shape in kinds.Route;
//  3. its routes in KindRoutes (and Kinds), its credential in
//     UpstreamConfig, and its answers in proxy/mock.
//
// Concurrency: Middleware, Keys and Metrics are safe for concurrent use;
// ParseRequest and the methods of Format are pure functions, and the
// adapters hold no state. The usage reader of one response holds its
// state and is fed and queried by that request's goroutine alone. The
// middleware starts a timer per reservation (renewal every third of its
// TTL), a goroutine per forwarded request for its settlement's store write
// and access log line once its response is complete (Middleware.Close
// waits for them; after Close a request settles before its handler
// returns), NewUpstream's transport two timers per upstream call (headers,
// body idle), and Keys a goroutine per recorded key use (at most one a
// minute per key; Keys.Wait waits for them); nothing else runs in the
// background, and the package keeps no global mutable state. An
// Observer's Begin is called on the request's goroutine, its End after
// the response, on the goroutine that waited for the settlement's write
// (the request's own when nothing was settled); it must be safe for
// concurrent use.
package proxy
