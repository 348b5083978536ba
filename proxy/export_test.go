package proxy

import (
	"context"
	"io"
	"time"

	"github.com/tokenbudget/tokenbudget/proxy/internal/bedrock"
	"github.com/tokenbudget/tokenbudget/proxy/internal/openai"
	"github.com/tokenbudget/tokenbudget/proxy/internal/wire"
)

// The wire layer by format, through each format's adapter, for the tests
// of the usage parsers that read the recorded responses here (and the
// external tests' use of the same).

type (
	Tokens       = wire.Tokens
	StreamParser = wire.SSE
)

var ErrEventTooLarge = wire.ErrEventTooLarge

const DefaultMaxEventSize = wire.DefaultMaxEventSize

func FormatForPath(path string) (Format, bool) { return wire.ForPath(path) }

// ParseJSON is the adapter's Body.
func ParseJSON(f Format, data []byte) (Tokens, bool, error) { return adapterOf(f).Body(data) }

// NewStreamParser is the adapter's reader of an SSE response; a format
// whose API streams no SSE (Bedrock's) gets the framing alone, with no
// usage, for the fuzz targets.
func NewStreamParser(f Format) *StreamParser {
	if s, ok := adapterOf(f).Stream("text/event-stream", true); ok {
		return s.(*wire.SSE)
	}
	return wire.NewSSE(noUsage{})
}

type noUsage struct{}

func (noUsage) Event(_, _ []byte) (bool, error) { return false, nil }
func (noUsage) Result() (Tokens, bool)          { return Tokens{}, false }
func (noUsage) Final() bool                     { return false }
func (noUsage) TextBytes() int64                { return 0 }

func StripUsageChunks(r io.Reader, p *StreamParser) io.Reader { return wire.StripUsageChunks(r, p) }

func IsUsageOnlyChunk(data []byte) bool { return openai.IsUsageOnlyChunk(data) }

func WithIncludeUsage(body []byte) ([]byte, error) { return openai.WithIncludeUsage(body) }

var hasUsageObject = wire.HasUsageObject

func newStripWriter(w io.Writer, p *StreamParser) *wire.StripWriter { return wire.NewStripWriter(w, p) }

type usageStream = wire.Stream

func newEventStream(f Format) usageStream {
	s, _ := adapterOf(f).Stream(bedrock.EventStreamType, true)
	return s
}

func newJSONStreamParser(f Format) usageStream {
	s, _ := adapterOf(f).Stream("application/json", true)
	return s
}

// WaitSettled waits until no store write of an answered request is in
// progress: the tests' signal that a request is over, store included.
func (m *Middleware) WaitSettled() { m.settling.wait(context.Background()) }

// RenewTimer is a renewal's timer, as the proxy stops and re-arms it.
type RenewTimer = renewTimer

// SetRenewTimers makes the middleware New builds from c schedule its
// reservations' renewals with after instead of time.AfterFunc.
func SetRenewTimers(c *Config, after func(d time.Duration, f func()) RenewTimer) {
	c.renewAfter = after
}
