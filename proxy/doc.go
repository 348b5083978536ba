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
//  3. the body, capped (413) and read for the model, the output cap and
//     the prompt estimate (RequestInfo.Estimate);
//  4. admission: Tracker.Reserve (ModeReserve, exact) or Tracker.Check
//     (ModeCheck, fast) for key name, provider and the request's model;
//     a refusal is a 429 with Retry-After, x-ratelimit-*-tokens, the IETF
//     RateLimit-Policy and RateLimit fields and an OpenAI- or
//     Anthropic-shaped body (code token_budget_exceeded, or
//     provider_parked: 429, 503 when overloaded);
//  5. the wrapped handler, with stream_options.include_usage added to a
//     streamed chat request and no Accept-Encoding, whose response passes
//     through as it comes, each SSE event flushed (a usage-only chunk the
//     client did not ask for is dropped), its usage read on the way;
//  6. settlement: the usage is committed (recorded in check mode); a
//     response without usage at the estimate (logged, counted); a stream
//     cut short at what it reported plus the estimate of the rest; an
//     error answer releases the reservation. Upstream 429, 529, repeated
//     503, 401 and 403 answers park the provider.
//
// NewUpstream is the httputil.ReverseProxy that puts the upstream
// credential in the header each route family uses; NewHandler mounts the
// middleware over it with /healthz and /metrics (Metrics). MockUpstream
// answers the four routes like the real APIs, without an account.
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
// time. The middleware starts a timer per reservation (renewal at half its
// TTL) and nothing else; the package keeps no global mutable state.
package proxy
