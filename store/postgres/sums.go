package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// The history's totals that seed and verify counters: the daily rollups
// for the whole UTC days before the prune horizon, the events from the
// horizon on. Each total is one statement that reads the horizon itself,
// so it sees the horizon and the events of one snapshot: a prune commits
// the deletion and the new horizon together.

// Sums saturate at 2^53-1, past any limit (SUM of bigint is numeric: it
// never overflows, and LEAST keeps it in bigint range), as in SQLite. The
// COALESCE is inside because LEAST ignores NULLs.
var sumExpr = map[budget.Metric]string{
	budget.MetricTokens:   "LEAST(COALESCE(SUM(input + output + reasoning), 0), 9007199254740991)",
	budget.MetricInput:    "LEAST(COALESCE(SUM(input), 0), 9007199254740991)",
	budget.MetricOutput:   "LEAST(COALESCE(SUM(output + reasoning), 0), 9007199254740991)",
	budget.MetricRequests: "COUNT(*) FILTER (WHERE right(request_id, 5) <> ':late')", // budget.LateSuffix: no request of its own
	budget.MetricUSD:      "LEAST(COALESCE(SUM(cost), 0), 9007199254740991)",
}

// rollupExpr sums rollups rows as sumExpr sums events (numeric, or NULL
// for none: the caller saturates and defaults).
var rollupExpr = map[budget.Metric]string{
	budget.MetricTokens:   "SUM(input + output + reasoning)",
	budget.MetricInput:    "SUM(input)",
	budget.MetricOutput:   "SUM(output + reasoning)",
	budget.MetricRequests: "SUM(requests)",
	budget.MetricUSD:      "SUM(cost)",
}

// qHorizon is the prune horizon (0: nothing pruned) as a scalar subquery:
// an InitPlan, evaluated once per statement.
const qHorizon = `(SELECT value FROM meta WHERE name = 'pruned_before')`

// historySum is the SQL of the history's total of l's metric over
// [start, end) for the events l.History() selects, as a scalar expression
// whose placeholders are numbered from $first, with their arguments. As
// sqlrow.Horizon splits the range: when start is before the horizon, the
// rollups of the whole UTC days from start's (or the next, when start is
// not a midnight: the pruned part of its day is gone) to the horizon, and
// the events from the horizon to end; otherwise the events alone.
func historySum(l *budget.Limit, start, end time.Time, first int) (string, []any, error) {
	ev, ok := sumExpr[l.Metric]
	if !ok {
		return "", nil, fmt.Errorf("no usage history for metric %s", l.Metric)
	}
	rx := rollupExpr[l.Metric]
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(first+len(args)-1)
	}
	s, e, rf := arg(start.UnixNano())+`::bigint`, arg(end.UnixNano())+`::bigint`, arg(ceilDay(start.UnixNano()))+`::bigint`
	return sumOver(ev, rx, s, e, rf, historyWhere(l.History(), arg)), args, nil
}

// sumOver is historySum's expression given its SQL parts: the sums of
// events (ev) and of rollups (rx), the range's start, end and first whole
// day (s, e, rf) and the condition on the rows (where).
func sumOver(ev, rx, s, e, rf, where string) string {
	const h = qHorizon
	return `LEAST(COALESCE((SELECT ` + rx + ` FROM rollups WHERE ` + h + ` <> 0 AND ` + s + ` < ` + h +
		` AND day >= ` + rf + ` AND day < LEAST(` + e + `, ` + h + `)` + where + `), 0)
		+ (SELECT ` + ev + ` FROM usage WHERE at >= CASE WHEN ` + h + ` <> 0 AND ` + s + ` < ` + h + ` THEN ` + h + ` ELSE ` + s + ` END
			AND at < ` + e + where + `), 9007199254740991)::bigint`
}

// historyWhere is the condition (" AND ...") selecting the events or
// rollups h sums; both tables name the columns alike. Team and org sums
// name the partial indexes' condition so the planner can use them.
func historyWhere(h budget.History, arg func(any) string) string {
	var b strings.Builder
	switch {
	case h.Team != "":
		b.WriteString(` AND team = ` + arg(h.Team) + ` AND team <> ''`)
	case h.Org != "":
		b.WriteString(` AND org = ` + arg(h.Org) + ` AND org <> ''`)
	default:
		b.WriteString(` AND key = ` + arg(h.Key))
	}
	switch {
	case h.Provider != "":
		b.WriteString(` AND provider = ` + arg(h.Provider))
	case h.Model != "" && budget.IsModelPattern(h.Model):
		b.WriteString(` AND model_norm LIKE ` + arg(likePattern(h.Model)) + ` ESCAPE '\'`)
	case h.Model != "":
		b.WriteString(` AND model_norm = ` + arg(h.Model))
	case h.User != "":
		b.WriteString(` AND end_user = ` + arg(h.User))
	case h.Tag != "":
		// Stored normalized, "a=1,b=2": see the SQLite store's historyWhere.
		b.WriteString(` AND strpos(',' || tags || ',', ` + arg(","+h.Tag+",") + `) > 0`)
	}
	return b.String()
}

// likePattern is a model pattern (* and ?, as budget.MatchModel reads
// them) in LIKE's terms, with LIKE's own wildcards escaped.
var likePattern = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`, `*`, `%`, `?`, `_`).Replace

const day = int64(24 * time.Hour)

// floorDay is the UTC midnight (Unix ns) starting the day of instant n,
// before 1970 too.
func floorDay(n int64) int64 { return n - ((n%day)+day)%day }

// ceilDay is the first UTC midnight at or after instant n.
func ceilDay(n int64) int64 {
	if f := floorDay(n); f < n {
		return f + day
	}
	return n
}

// qDayOf is the SQL of floorDay for column at.
const qDayOf = `at - ((at % 86400000000000) + 86400000000000) % 86400000000000`

func (t *tx) SumUsage(ctx context.Context, l *budget.Limit, start, end time.Time) (int64, error) {
	q, args, err := historySum(l, start, end, 1)
	if err != nil {
		return 0, err
	}
	var v int64
	if err := t.tx.GetContext(ctx, &v, `SELECT `+q, args...); err != nil {
		return 0, fmt.Errorf("sum usage of limit %s: %w", l.ID, err)
	}
	return v, nil
}
