// Package proxy is the HTTP layer of tokenbudget: it reads the usage that
// OpenAI and Anthropic responses report, streamed or not, and maps it to a
// budget.Usage so billable tokens are counted once (contract section 1).
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
// Concurrency: FormatForPath, ParseJSON, IsUsageOnlyChunk and the methods of
// Format and Tokens are pure functions, safe for concurrent use. A
// StreamParser, and the reader StripUsageChunks returns, hold per-response
// state and are not safe for concurrent use: feed and query each from one
// goroutine at a time (the one copying the response body), or guard them.
// Nothing in this package starts a goroutine or keeps global mutable state.
package proxy
