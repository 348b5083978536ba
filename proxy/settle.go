package proxy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// The cost headers of a forwarded request's answer (canonical form). See
// setCost.
const (
	costHeader          = "X-Tokenbudget-Cost"
	chargedTokensHeader = "X-Tokenbudget-Charged-Tokens"
)

// settlement is what the middleware charged for a request it forwarded,
// decided in memory once the upstream's answer ended and before the
// client's response did: the cost headers (or trailers) say it, the store
// write follows the response (Middleware.Close waits for it), and the
// Observer's End (Observation.Charged) and the access log see it once
// written.
type settlement struct {
	Info *Info
	// Status is the upstream's status (0: none, the client left first).
	Status int
	// Outcome is the request's outcome (OutcomeOK, OutcomeClientClosed,
	// OutcomeUpstreamError).
	Outcome string
	// Charged says Usage was charged (committed, or recorded in check
	// mode); false when the answer was an upstream error: the reservation
	// is released, nothing is recorded.
	Charged bool
	// Usage is what was charged, priced by the tracker's price table
	// (budget.Tracker.PriceUsage): Cost in micro-dollars, the cost its
	// event is stored at; NoPrice when no price matched. CostKnown is false
	// only when the price table could not be read: the writer prices it.
	Usage budget.Usage
	// Streamed says the answer was a stream: its cost went out in
	// trailers.
	Streamed bool
	// Err is the store's answer to the settlement (the commit, release or
	// record), once it is done.
	Err error
}

// Tokens is the billable tokens charged: input, output and reasoning.
func (s *settlement) Tokens() int64 {
	if !s.Charged {
		return 0
	}
	return s.Usage.Billable()
}

// cost is the cost charged in dollars (FormatCost), and whether it is
// known: not when no price matched or the price table was unreadable.
func (s *settlement) cost() (string, bool) {
	if s == nil || !s.Charged {
		return FormatCost(0), true
	}
	if !s.Usage.CostKnown || s.Usage.NoPrice {
		return "", false
	}
	return FormatCost(s.Usage.Cost), true
}

// FormatCost writes micro-dollars as X-Tokenbudget-Cost does: dollars as a
// plain decimal with exactly six places, the tracker's exact unit
// ("0.001250", "12.000000"); never exponent notation.
func FormatCost(micros int64) string {
	var b [24]byte
	out := b[:0]
	if micros < 0 {
		out = append(out, '-')
		micros = -micros
	}
	out = strconv.AppendInt(out, micros/budget.MicrosPerUSD, 10)
	frac := micros % budget.MicrosPerUSD
	out = append(out, '.')
	for d := int64(budget.MicrosPerUSD / 10); d > 0; d /= 10 {
		out = append(out, byte('0'+frac/d%10))
	}
	return string(out)
}

// setCost sets the cost headers of s on h: X-Tokenbudget-Cost (absent when
// the cost is unknown) and X-Tokenbudget-Charged-Tokens; nil s charged
// nothing.
func setCost(h http.Header, s *settlement) {
	if c, ok := s.cost(); ok {
		h[costHeader] = []string{c}
	}
	var n int64
	if s != nil {
		n = s.Tokens()
	}
	h[chargedTokensHeader] = []string{strconv.FormatInt(n, 10)}
}

// settle decides what the request is charged once the handler returned
// (or panicked: ReverseProxy aborts that way when the client goes away),
// prices it, queues the settlement in the tracker (in memory, journaled
// for a leased reservation: the client's next request is decided after
// it) and then ends the client's response with its cost; waiting for its store write is left to x.write,
// which Wrap runs after the response.
func (m *Middleware) settle(x *exchange, r *http.Request, rc *recorder, info *Info, route Route, res *budget.Reservation, panicked bool) {
	parked := m.observe(route.Provider, rc, info.RequestID)
	if !panicked {
		rc.endStream() // its held end may carry the usage
	}
	s := m.charge(r, rc, info, route, panicked)
	// Not cancelled with the request: the client leaving (or having its
	// answer) must not cut the settlement short.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), settleTimeout)
	if s.Charged {
		if err := m.t.PriceUsage(ctx, &s.Usage); err != nil {
			// The writer prices it; the client gets no cost.
			m.log.Error("proxy: reading the price table failed; the response carries no cost",
				"request_id", info.RequestID, "err", err)
		}
	}
	// Queued before the last bytes go out: a leased settlement is then in
	// its lease's journal (Commit's record, written before CommitQueued
	// returns) before the client can have its whole answer, so a crash
	// after the client heard of it charges it exactly. Its store write
	// follows, and the client never waits for it.
	wait := m.queue(ctx, s, res)
	if !panicked {
		rc.finish(route.Provider, parked, s)
	}
	m.outcome(x, s.Outcome)
	x.settled = s
	x.write = func() {
		defer cancel()
		m.written(res, s, wait(ctx))
	}
}

// queue queues the settlement s of reservation res (nil in check mode) in
// the tracker and returns what waits for its write.
func (m *Middleware) queue(ctx context.Context, s *settlement, res *budget.Reservation) func(context.Context) error {
	var (
		wait func(context.Context) error
		err  error
	)
	switch {
	case res != nil && s.Charged:
		var commit func(context.Context) (budget.Settlement, error)
		if commit, err = m.t.CommitQueued(ctx, res.ID, s.Usage); err == nil {
			wait = func(ctx context.Context) error {
				st, err := commit(ctx)
				if err == nil {
					m.committed(s, st)
				}
				return err
			}
		}
	case res != nil:
		wait, err = m.t.ReleaseQueued(ctx, res.ID)
	case s.Charged:
		wait, err = m.t.RecordQueued(ctx, s.Usage)
	default:
		return noWait
	}
	if err != nil {
		return func(context.Context) error { return err }
	}
	return wait
}

func noWait(context.Context) error { return nil }

// committed counts and logs a written commit.
func (m *Middleware) committed(s *settlement, st budget.Settlement) {
	// A commit writes its event on the tracker's transaction, which the
	// tracker's written count does not see (it counts what the recorder
	// writes).
	if st.Charged {
		if st.LateRequestID != "" {
			m.cfg.Metrics.committed()
		}
		m.log.Warn("proxy: the reservation had expired and was charged its estimate; recorded the excess only",
			"request_id", s.Info.RequestID, "late_request_id", st.LateRequestID)
	} else if s.Usage.Billable() > 0 {
		m.cfg.Metrics.committed()
	}
}

// written records what became of the settlement s's store write, err,
// after the response: the metrics and the error.
func (m *Middleware) written(res *budget.Reservation, s *settlement, err error) {
	u, info := &s.Usage, s.Info
	s.Err = err
	if err != nil {
		m.cfg.Metrics.settleError()
		msg := "proxy: settling a request's usage failed"
		switch {
		case errors.Is(err, budget.ErrReleaseNotRecorded):
			// Not retried: the reservation is charged its estimate when it
			// expires, unless something commits it first.
			msg = "proxy: releasing a request's reservation failed; it is charged its estimate at its expiry"
		case res != nil && !errors.Is(err, budget.ErrInvalid) && !errors.Is(err, budget.ErrNotFound) && !errors.Is(err, budget.ErrSettled):
			// A queued commit or release is never given up: the tracker
			// writes it once the database takes writes again.
			msg = "proxy: settling a request's usage is not written yet; the tracker keeps retrying it"
		}
		m.log.Error(msg, "request_id", info.RequestID, "key", info.Key,
			"charge", s.Charged, "input", u.Input, "output", u.Output, "reasoning", u.Reasoning, "err", err)
	} else if s.Charged {
		m.cfg.Metrics.recorded(info.Route.Provider, u)
	}
}

// done ends a request once its handler is over (returned or panicked):
// what is left to write and tell goes to a goroutine of its own, so that
// net/http completes the response (flushed, its last chunk sent) without
// waiting for the store. end is the Observer's End (nil: none); its
// Observation is taken here, while the response's headers may still be
// read.
func (m *Middleware) done(x *exchange, r *http.Request, end func(*Observation)) {
	x.end = time.Now()
	var o *Observation
	if end != nil {
		o = x.observation(r)
	}
	after := func() {
		if x.write != nil {
			x.write()
		}
		if end != nil {
			o.Charged = x.chargedUsage()
			if x.settled != nil {
				o.SettleErr = x.settled.Err
			}
			end(o)
		}
		if m.cfg.AccessLog != nil {
			m.logExchange(x, r)
		}
	}
	if x.write == nil {
		after()
		return
	}
	m.settling.run(after)
}

// settling counts the settlements written after their response, so that
// Close can wait for them. After close, requests settle before their
// handler returns.
type settling struct {
	mu     sync.Mutex
	n      int
	idle   chan struct{} // closed when n is back to 0; nil while it is 0
	closed bool
}

// run runs f on a goroutine of its own, counted, or here once closed.
func (s *settling) run(f func()) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		f()
		return
	}
	if s.n == 0 {
		s.idle = make(chan struct{})
	}
	s.n++
	s.mu.Unlock()
	go func() {
		defer s.done()
		f()
	}()
}

func (s *settling) done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n--; s.n == 0 {
		close(s.idle)
		s.idle = nil
	}
}

// wait waits until no settlement is in progress, or ctx ends.
func (s *settling) wait(ctx context.Context) error {
	s.mu.Lock()
	ch := s.idle
	s.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close waits until the store writes of every request already answered
// are done (each response is sent before its write: see Wrap), or ctx
// ends (its error is returned; the writes carry on). A request served
// after Close settles before its handler returns. Call it once the server
// serves no more (http.Server.Shutdown returned), before closing the
// tracker, so that no usage is dropped.
func (m *Middleware) Close(ctx context.Context) error {
	m.settling.mu.Lock()
	m.settling.closed = true
	m.settling.mu.Unlock()
	return m.settling.wait(ctx)
}

// charge decides what the request is charged from its answer: the usage
// it reported, else what streamed, else the estimate (see the package
// doc's step 6); nothing for an upstream error.
func (m *Middleware) charge(r *http.Request, rc *recorder, info *Info, route Route, panicked bool) *settlement {
	gone := panicked || rc.writeErr != nil || r.Context().Err() != nil
	stalled := info.stalled.Load()
	est := info.Estimate
	s := &settlement{Info: info, Status: rc.status, Outcome: OutcomeOK, Charged: true, Streamed: rc.parser != nil}
	// A commit takes the user from its reservation; a check-mode record
	// from here.
	u := &s.Usage
	*u = budget.Usage{RequestID: info.RequestID, Key: info.Key, User: info.User, Tags: info.Tags, Provider: route.Provider, Model: info.Request.Model, At: info.At, ServiceTier: info.Request.ServiceTier}
	switch {
	case rc.status/100 == 2:
		tok, found, final, perr := rc.usage()
		// A count the tracker cannot store (over 2^53-1, alone or summed)
		// makes the whole report untrustworthy: the estimate stands in.
		invalid := errors.Is(perr, errCount)
		if invalid {
			found = false
		}
		// A client that left mid-stream stopped the generation when the
		// proxy hung up on the upstream: it is charged what streamed, not
		// the cap it never got. An upstream that cut its own stream short
		// (or stalled) may have generated more than it sent: the estimate
		// of the rest is charged.
		cancelled := gone && !stalled && rc.parser != nil && !(found && final) && !invalid
		switch {
		case found && final:
			tok.Fill(u)
		case cancelled:
			streamed := ceilDiv(rc.parser.TextBytes(), BytesPerToken)
			if found { // what the upstream reported so far: the input is known
				tok.Output = max(tok.Output, streamed)
				tok.Fill(u)
			} else {
				u.Input, u.Output = est.Input, streamed
			}
		case found: // a stream cut short: the input is known, the output is not
			tok.Output = max(tok.Output, est.Output)
			tok.Fill(u)
		default:
			u.Input, u.Output = est.Input, est.Output
		}
		switch {
		case stalled:
			s.Outcome = OutcomeUpstreamError
			m.log.Warn("proxy: the upstream stalled mid-response past the stream idle timeout; charged the usage known so far, the estimate for the rest",
				"request_id", info.RequestID, "key", info.Key, "provider", route.Provider, "model", info.Request.Model,
				"usage_found", found, "input", u.Input, "output", u.Output)
		case cancelled:
			s.Outcome = OutcomeClientClosed
			m.log.Info("proxy: client left mid-stream; charged the usage reported so far, else the input estimate and the text streamed",
				"request_id", info.RequestID, "key", info.Key, "provider", route.Provider, "model", info.Request.Model,
				"usage_found", found, "input", u.Input, "output", u.Output)
		case gone && !(found && final) && !invalid:
			s.Outcome = OutcomeClientClosed
			m.log.Info("proxy: response cut short; charged the usage known so far, the estimate for the rest",
				"request_id", info.RequestID, "key", info.Key, "provider", route.Provider, "model", info.Request.Model,
				"usage_found", found, "input", u.Input, "output", u.Output)
		case !found:
			m.cfg.Metrics.noUsage(route.Provider)
			args := []any{"request_id", info.RequestID, "key", info.Key, "provider", route.Provider, "model", info.Request.Model,
				"status", rc.status, "stream", rc.sse, "estimate_input", est.Input, "estimate_output", est.Output}
			if perr != nil {
				args = append(args, "parse_error", perr.Error())
			}
			if rc.over {
				args = append(args, "reason", "response larger than the parse cap")
			} else if rc.encoded {
				args = append(args, "reason", "compressed response")
			} else if invalid {
				args = append(args, "reason", "invalid usage")
			}
			m.log.Warn("proxy: response without usage; recorded at the estimate", args...)
		}
	case rc.status == 0 && gone:
		// The client left before any answer: the upstream had the prompt.
		u.Input, u.Output = est.Input, est.Output
		s.Outcome = OutcomeClientClosed
	default:
		s.Charged, s.Outcome = false, OutcomeUpstreamError
		s.Usage = budget.Usage{}
	}
	return s
}
