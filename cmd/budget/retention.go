package main

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// retentionInterval is how often the proxy's --retain prunes.
const retentionInterval = 24 * time.Hour

// maxRetainDays keeps a --retain in days within a time.Duration.
const maxRetainDays = int64(1<<63-1) / int64(24*time.Hour)

// parseRetain parses --retain: a whole number of days ("400d") or a Go
// duration ("9600h"), at least a day (today's events are never pruned).
func parseRetain(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days < 0 || days > maxRetainDays {
			return 0, budget.Invalid("retain", s, "want a whole number of days such as 400d, or a duration such as 9600h")
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, budget.Invalid("retain", s, "want a whole number of days such as 400d, or a duration such as 9600h")
		}
	}
	if d < 24*time.Hour {
		return 0, budget.Invalid("retain", s, "must be at least 1d: today's events are never pruned")
	}
	return d, nil
}

// retention prunes the usage history older than retain: once when it
// starts, then at every tick, each time before now - retain (rounded down to
// a UTC day by Prune). A refusal (a limit's current window or a
// reservation still needs the events) is logged and the proxy carries on;
// the next tick tries again.
type retention struct {
	tracker *budget.Tracker
	retain  time.Duration
	log     *slog.Logger
	// done is called after each prune with its outcome. (Optional; tests
	// wait on it.)
	done func(budget.PruneResult, error)
}

// run prunes now and at every tick until ctx is done.
func (r *retention) run(ctx context.Context, ticks <-chan time.Time) {
	r.prune(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			r.prune(ctx)
		}
	}
}

func (r *retention) prune(ctx context.Context) {
	before := r.tracker.Now().Add(-r.retain)
	res, err := r.tracker.Prune(ctx, before)
	switch {
	case err != nil && ctx.Err() != nil:
		// Stopping: not worth a line.
	case errors.Is(err, budget.ErrInvalid):
		r.log.Warn("retention: prune refused; the history is kept and pruning is tried again in a day",
			"retain", r.retain.String(), "before", ts(budget.Day(before)), "err", err)
	case err != nil:
		r.log.Error("retention: prune failed; tried again in a day", "before", ts(budget.Day(before)), "err", err)
	case res.Deleted > 0:
		r.log.Info("retention: pruned the usage history", "before", ts(res.Before), "deleted", res.Deleted)
	}
	if r.done != nil {
		r.done(res, err)
	}
}
