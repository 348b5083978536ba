package budget

import (
	"context"
	"math"
	"time"
)

// Forecasts: where a limit window is heading at its current pace.
//
// The pace is the usage of the most recent quarter of the window's elapsed
// time (at least its last minute, at most all of it) divided by that span:
// recent enough to follow a burst, long enough not to jump at every
// request. ForecastUsed is used + reserved + pace x time left until the
// reset; ExhaustsAt is when the room left runs out at that pace, zero when
// that is not before the reset (or the pace is zero). A window that never
// resets (once) has no ForecastUsed; a concurrent limit has no forecast.

// minForecastSpan is the shortest span a pace is measured over.
const minForecastSpan = time.Minute

// Forecast is a limit window's forecast at an instant.
type Forecast struct {
	// Rate is the pace in the limit's unit per second.
	Rate float64
	// Since is where the span the pace was measured over starts.
	Since time.Time
	// ForecastUsed is what the window will hold at its reset at this
	// pace, saturating at MaxTokens; -1 for a window that never resets.
	ForecastUsed int64
	// ExhaustsAt is when the room left runs out at this pace, rounded up
	// to a whole second; zero when it will not before the reset, or the
	// pace is zero.
	ExhaustsAt time.Time
}

// ForecastSpan is the span [since, now) a window starting at start is
// paced over at now: the most recent quarter of the elapsed time, at
// least minForecastSpan, at most the elapsed time.
func ForecastSpan(start, now time.Time) (since time.Time) {
	elapsed := now.Sub(start)
	if elapsed <= 0 {
		return now
	}
	span := max(elapsed/4, minForecastSpan)
	return now.Add(-min(span, elapsed))
}

// ForecastOf is st's forecast at now, given the usage recent of the span
// [since, now) (ForecastSpan).
func ForecastOf(st *Status, recent int64, since, now time.Time) Forecast {
	f := Forecast{Since: since, ForecastUsed: -1}
	if span := now.Sub(since).Seconds(); span > 0 && recent > 0 {
		f.Rate = float64(recent) / span
	}
	held := float64(st.Used + st.Reserved)
	resets := st.Limit.Window.Resets() && !st.ResetAt.IsZero()
	var left float64
	if resets {
		left = max(st.ResetAt.Sub(now).Seconds(), 0)
		f.ForecastUsed = int64(min(held+f.Rate*left, MaxTokens))
	}
	room := float64(st.Max) - held
	switch {
	case room <= 0:
		f.ExhaustsAt = now // already out
	case f.Rate > 0:
		secs := room / f.Rate
		if resets && secs >= left {
			break // not before the reset
		}
		if secs > float64(math.MaxInt64/int64(time.Second))-float64(now.Unix()) {
			break // beyond any representable instant: never
		}
		// Whole seconds, rounded up, as every instant is shown.
		f.ExhaustsAt = ceilSecond(now.Add(time.Duration(math.Ceil(secs * float64(time.Second)))))
	}
	return f
}

// Forecasts computes the forecast of each status at now (nil for a
// concurrent limit), reading each window's recent usage from the store in
// one snapshot.
func (t *Tracker) Forecasts(ctx context.Context, sts []Status, now time.Time) ([]*Forecast, error) {
	out := make([]*Forecast, len(sts))
	err := t.store.View(ctx, func(tx Tx) error {
		return forecasts(ctx, tx, sts, now, out)
	})
	return out, err
}

// On a store without HistoryTx there is no history to forecast from: out
// stays nil throughout.
func forecasts(ctx context.Context, tx Tx, sts []Status, now time.Time, out []*Forecast) error {
	h, ok := tx.(HistoryTx)
	if !ok {
		return nil
	}
	for i := range sts {
		st := &sts[i]
		if st.Limit.Metric == MetricConcurrent || st.WindowStart.IsZero() || st.Limit.userless() {
			out[i] = nil
			continue
		}
		since := ForecastSpan(st.WindowStart, now)
		var recent int64
		if since.Before(now) {
			var err error
			if recent, err = h.SumUsage(ctx, &st.Limit, since, now); err != nil {
				return err
			}
		}
		f := ForecastOf(st, recent, since, now)
		out[i] = &f
	}
	return nil
}

// ceilSecond rounds t up to a whole second.
func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}
