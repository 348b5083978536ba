package dashboard

import (
	"context"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// SeriesFunc is the usage of l's counter (for l.Subject, in l's metric) in
// each bucket [edges[i], edges[i+1]) of its window: len(edges)-1 amounts,
// edges ascending.
type SeriesFunc func(ctx context.Context, l *budget.Limit, edges []time.Time) ([]int64, error)

// StoreSeries is the SeriesFunc that sums each bucket from t's store, in
// one read-only snapshot: what budget.Store's SumUsage sums, as `budget
// verify` compares a counter with. Usage still queued in t's writer is not
// there yet (as Inspect does not show it either).
func StoreSeries(t *budget.Tracker) SeriesFunc { return t.UsageSeries }

// bucketSteps are the bucket lengths a burn-down chart picks from: the
// shortest that cuts the window into at most maxBuckets.
var bucketSteps = []time.Duration{
	time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour, 30 * 24 * time.Hour,
}

// maxBuckets bounds the buckets of a burn-down chart (and rows of its
// table).
const maxBuckets = 60

// bucketEdges cuts [start, end) into buckets of the shortest step that
// makes at most maxBuckets of the span [start, full), stopping at end:
// the edges start, start+step, ..., end. full is where the window ends
// (its reset), end the instant the usage is known to (now).
func bucketEdges(start, end, full time.Time) []time.Time {
	if !start.Before(end) {
		return nil
	}
	whole := full.Sub(start)
	step := bucketSteps[len(bucketSteps)-1]
	for _, s := range bucketSteps {
		if whole <= s*maxBuckets {
			step = s
			break
		}
	}
	for n := end.Sub(start) / step; n > maxBuckets; n = end.Sub(start) / step { // a window longer than the steps allow
		step *= 2
	}
	edges := []time.Time{start}
	for t := start.Add(step); t.Before(end); t = t.Add(step) {
		edges = append(edges, t)
	}
	return append(edges, end)
}
