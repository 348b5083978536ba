// Package proxy is the HTTP layer of tokenbudget: a net/http middleware
// that enforces token budgets around any handler, the reverse proxy and
// handler of `budget proxy`, gateway keys, a mock provider, and the usage
// extraction they rest on, for OpenAI's Chat Completions, Responses and
// Embeddings APIs and Anthropic's Messages API, streamed or not.
//
// The middleware (New, Middleware.Wrap) takes a request through:
//
//  1. its route (Config.Routes: path -> Format and provider; others 404);
//  2. the gateway key, "Authorization: Bearer" or "x-api-key", looked up
//     by its SHA-256 (Keys, cached for DefaultKeyTTL; 401 when unknown or
//     revoked); the secret is removed before forwarding and never logged;
//  3. the body: over MaxBody 413 (from its Content-Length, before a byte
//     is read); not all there within BodyTimeout 408; its bytes held
//     against MaxInflightBytes, 503 with Retry-After when they would go
//     over; then read for the model, the output cap and the prompt
//     estimate (RequestInfo.Estimate). A model the tracker could not store
//     (budget.CheckName: over budget.MaxNameLen bytes, control characters)
//     is 400 before anything is written or logged, quoted only in part;
//  4. admission: Tracker.ReserveWith (ModeReserve, exact) or Tracker.Check
//     (ModeCheck, fast) for key name, provider and the request's model;
//     a refusal is a 429 with Retry-After, x-ratelimit-*-tokens, the IETF
//     RateLimit-Policy and RateLimit fields and an OpenAI- or
//     Anthropic-shaped body (code token_budget_exceeded, or
//     provider_parked: 429, 503 when overloaded). A reservation is charged
//     on expiry (budget.ExpireCharge) and lasts ReservationTTL (20s),
//     renewed every third of it while the request runs: if the process
//     dies, recovery charges the estimate (the client may have had its
//     answer; a request never served may be charged, a served one is never
//     missed) and the concurrency leases are free within the TTL;
//  5. the wrapped handler, with stream_options.include_usage added to a
//     streamed chat request and no Accept-Encoding, whose response passes
//     through as it comes, each SSE event flushed (a usage-only chunk the
//     client did not ask for is dropped), its usage read on the way. Every
//     answer carries X-Tokenbudget-Request-Id: the request id its usage is
//     recorded under (the reservation id, or a generated one in check
//     mode), whatever the upstream sent;
//  6. settlement, on a context the client leaving does not cancel: the
//     usage is committed (recorded in check mode); a response without
//     usage, or with an invalid one (a count or the billable sum over
//     2^53-1), at the estimate (logged, counted); a stream cut short at
//     what it reported plus the estimate of the rest; an error answer
//     releases the reservation. A commit the store cannot take yet stays
//     queued in the tracker until it can. Upstream 429, 529, repeated 503,
//     401 and 403 answers park the provider.
//
// NewUpstream is the httputil.ReverseProxy that puts the upstream
// credential in the header each route family uses, and bounds the upstream
// call: response headers within HeaderTimeout (10m, for slow reasoning
// models; 504 past it) and no wait for more of the body longer than
// StreamIdleTimeout (5m; the response is then cut off, charged as cut
// short, counted as an upstream error). NewHandler mounts the middleware
// over it with /healthz (TrackerHealth: 503 with the reason while the
// tracker's writes fail, as on a full disk, or its database file was
// deleted or replaced) and /metrics (Metrics). MockUpstream answers the
// four routes like the real APIs, without an account.
//
// Usage extraction:
//   - FormatForPath maps a route (/v1/chat/completions, /v1/responses,
//     /v1/embeddings, /v1/messages) to its Format.
//   - ParseJSON reads a non-streamed response body.
//   - StreamParser reads a text/event-stream body as it passes through,
//     chunk by chunk (io.TeeReader(body, parser)), never buffering it whole;
//     Result gives the usage, Final whether the stream's last usage event
//     has arrived.
//   - StripUsageChunks does the same and also removes the usage-only chunk
//     of an OpenAI chat stream, for a client that did not ask for
//     stream_options.include_usage; IsUsageOnlyChunk tells one such event.
//
// A response without usage reports found == false: the caller records its
// estimate instead, never zero. The parsers read bodies as they are on the
// wire after Content-Encoding is removed: a gzip-compressed body has no
// usage to find, so the caller must decode it or not ask for compression.
//
// Concurrency: Middleware, Keys, Metrics and MockUpstream are safe for
// concurrent use. FormatForPath, ParseJSON, ParseRequest, IsUsageOnlyChunk
// and the methods of Format and Tokens are pure functions. A StreamParser,
// and the reader StripUsageChunks returns, hold per-response state and are
// not safe for concurrent use: feed and query each from one goroutine at a
// time. The middleware starts a timer per reservation (renewal every third
// of its TTL), and NewUpstream's transport two per upstream call (headers,
// body idle); nothing else runs in the background, and the package keeps
// no global mutable state.
package proxy
