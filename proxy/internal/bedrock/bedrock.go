// Package bedrock is the Amazon Bedrock wire layer for the proxy: the
// request path, the usage of a Converse response, and the usage of a
// ConverseStream response's AWS event-stream. It is pure: no network, no
// proxy types; it maps Bedrock's usage to wire.Tokens.
package bedrock

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// Operation is the Bedrock runtime API a request path names.
type Operation string

// The operations of the bedrock-runtime /model/{modelId}/... paths.
const (
	Converse                 Operation = "converse"
	ConverseStream           Operation = "converse-stream"
	Invoke                   Operation = "invoke"
	InvokeWithResponseStream Operation = "invoke-with-response-stream"
)

// Path is what a bedrock-runtime request path says.
type Path struct {
	// Model is the model id, URL-unescaped: a plain id
	// ("anthropic.claude-3-sonnet-20240229-v1:0"), an inference profile
	// ("us.anthropic.claude-sonnet-4-6") or an ARN.
	Model string
	Op    Operation
}

// Stream reports whether the operation answers with an event-stream.
func (p Path) Stream() bool { return p.Op == ConverseStream || p.Op == InvokeWithResponseStream }

// ErrPath reports a path that is not /model/{modelId}/{operation}.
var ErrPath = errors.New("not a bedrock-runtime /model/{modelId}/{operation} path")

// ParsePath parses the escaped request path (URL.EscapedPath, so that an ARN's
// %2F stays inside the model id) of a bedrock-runtime call.
func ParsePath(escaped string) (Path, error) {
	rest, ok := strings.CutPrefix(escaped, "/model/")
	if !ok {
		return Path{}, fmt.Errorf("path %q: %w", escaped, ErrPath)
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return Path{}, fmt.Errorf("path %q: %w", escaped, ErrPath)
	}
	op := Operation(rest[i+1:])
	switch op {
	case Converse, ConverseStream, Invoke, InvokeWithResponseStream:
	default:
		return Path{}, fmt.Errorf("path %q: operation %q: %w", escaped, op, ErrPath)
	}
	if strings.Contains(rest[:i], "/") {
		return Path{}, fmt.Errorf("path %q: model id holds an unescaped /: %w", escaped, ErrPath)
	}
	model, err := url.PathUnescape(rest[:i])
	if err != nil || model == "" {
		return Path{}, fmt.Errorf("path %q: model id %q: %w", escaped, rest[:i], ErrPath)
	}
	return Path{Model: model, Op: op}, nil
}

// converseUsage is Converse's usage object. The legacy *Count names carry
// the same numbers as the current ones on responses that send both, so they
// are read only when the current name is absent: counting both would charge
// the cache twice.
type converseUsage struct {
	InputTokens      wire.Count `json:"inputTokens"`
	OutputTokens     wire.Count `json:"outputTokens"`
	CacheRead        wire.Count `json:"cacheReadInputTokens"`
	CacheWrite       wire.Count `json:"cacheWriteInputTokens"`
	LegacyCacheRead  wire.Count `json:"cacheReadInputTokenCount"`
	LegacyCacheWrite wire.Count `json:"cacheWriteInputTokenCount"`
}

// tokens maps Converse usage to the counting rules: Bedrock's inputTokens
// excludes the cache reads and writes, the tracker's Input includes them.
// Thinking is inside outputTokens and is not reported apart, so it stays in
// Output.
func (u *converseUsage) tokens() (wire.Tokens, bool) {
	if !u.InputTokens.OK && !u.OutputTokens.OK {
		return wire.Tokens{}, false
	}
	cr, cw := u.CacheRead, u.CacheWrite
	if !cr.OK {
		cr = u.LegacyCacheRead
	}
	if !cw.OK {
		cw = u.LegacyCacheWrite
	}
	return wire.Tokens{
		Input:      u.InputTokens.V + cr.V + cw.V,
		Output:     u.OutputTokens.V,
		CacheRead:  cr.V,
		CacheWrite: cw.V,
	}, true
}

// ConverseUsage returns the usage of a Converse response body. found is
// false when the body has no top-level usage with token counts. Only the
// top-level usage is read: guardrail traces hold other objects named usage
// (policy units), which are not tokens.
func ConverseUsage(body []byte) (t wire.Tokens, found bool, err error) {
	var r struct {
		Usage *converseUsage `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return wire.Tokens{}, false, fmt.Errorf("bedrock converse response: %w", err)
	}
	if r.Usage == nil {
		return wire.Tokens{}, false, nil
	}
	t, found = r.Usage.tokens()
	return t, found, nil
}
