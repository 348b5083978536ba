package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy/mock"
)

const mockUpstreamHelp = `usage: budget mock-upstream [--listen ADDR] [--chunk-delay D]

Serves a mock LLM provider on --listen (default 127.0.0.1:8081), for trying
'budget proxy --upstream http://127.0.0.1:8081' without an account and for
benchmarks. It answers POST /v1/chat/completions, /v1/responses,
/v1/embeddings and /v1/messages, streamed or not, in the shapes of the real
APIs with realistic usage: input = ceil(text bytes / 4) + 3 per message,
output = the words of a fixed reply, cut at max tokens. A request header
X-Mock-Status: N makes it answer status N (X-Mock-Retry-After: S adds a
Retry-After), to try parking. GET /v1/models lists a few models (in
Anthropic's shape with an anthropic-version header). Any credential is
accepted. It keeps no state
(--db is accepted and unused). SIGINT or SIGTERM stops it.

`

func (m *Main) runMockUpstream(ctx context.Context, args []string) error {
	fs := newFlagSet("mock-upstream")
	m.dbFlag(fs)
	listen := fs.String("listen", defaultMockListen, "address to serve on")
	delay := fs.Duration("chunk-delay", 0, "pause between streamed events, such as 20ms")
	pos, err := m.parseArgs(fs, mockUpstreamHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("mock-upstream", pos); err != nil {
		return err
	}
	if strings.TrimSpace(*listen) == "" {
		return budget.Invalid("listen", *listen, "want an address such as 127.0.0.1:8081")
	}
	if *delay < 0 {
		return budget.Invalid("chunk-delay", *delay, "must not be negative")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	srv := &http.Server{Handler: &mock.Upstream{ChunkDelay: *delay}, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(m.Stdout, "mock upstream listening on http://%s\n", ln.Addr())
	select {
	case <-ctx.Done():
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	return nil
}
