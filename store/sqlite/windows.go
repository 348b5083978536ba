package sqlite

import (
	"context"
	"fmt"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// Windows a batch opens, read and created as sets. A batch of imported
// events spread over a day opens a window per limit nearly every event (a
// per-minute limit): one statement per window for its seed, its rollover
// and its row cost more than the events. Here each kind of read or write
// is one statement per shape of history sum (a limit's metric, level and
// scope), chunk windows at a time, the sum a correlated subquery over the
// covering index.

// windowChunk is the windows per set-shaped statement.
const windowChunk = 128

const qBeforesN = `WITH v(i, lid, sub, ps) AS (VALUES %s)
	SELECT v.i, (SELECT MAX(window_start) FROM counters WHERE limit_id = v.lid AND subject = v.sub),
		(SELECT used FROM counters WHERE limit_id = v.lid AND subject = v.sub AND window_start = v.ps) FROM v`

// befores reads sqlrow.CompleteWindows' Before of each ref.
func (t *tx) befores(ctx context.Context, refs []budget.WindowRef) ([]sqlrow.Before, error) {
	out := make([]sqlrow.Before, len(refs))
	for lo := 0; lo < len(refs); lo += windowChunk {
		part := refs[lo:min(lo+windowChunk, len(refs))]
		args := make([]any, 0, 4*len(part))
		for i, r := range part {
			args = append(args, lo+i, r.Limit.ID, r.Limit.Subject, ns(r.PrevStart))
		}
		if err := t.scan(ctx, multiRow(qBeforesN, 4, len(part)), args, func(s scanner) error {
			var i int
			var b sqlrow.Before
			if err := s.Scan(&i, &b.Latest, &b.Prev); err != nil {
				return err
			}
			out[i] = b
			return nil
		}); err != nil {
			return nil, fmt.Errorf("read counters before windows: %w", err)
		}
	}
	return out, nil
}

// sumShape is the text of a history sum, less its values, that a set of
// sums shares: the metric's sum and the condition on who (the level's
// value) and f (the scope's) as a VALUES row's columns v.who and v.f.
type sumShape struct{ expr, cond string }

// shapeOf is l's sumShape, with the values of who and f (nil when l's
// history has no scope).
func shapeOf(l *budget.Limit) (sumShape, any, any, error) {
	expr, ok := sumExpr[l.Metric]
	if !ok {
		return sumShape{}, nil, nil, fmt.Errorf("no usage history for metric %s", l.Metric)
	}
	cond, who, f := historyCond(l.History(), true, "v.who", "v.f")
	return sumShape{expr, cond}, who, f, nil
}

// The sum of one VALUES row's events over [v.s, v.e): the correlated
// subquery every set-shaped statement here runs per row.
func (s sumShape) subquery() string {
	return `(SELECT COALESCE(` + s.expr + `, 0) FROM usage WHERE at >= v.s AND at < v.e` + s.cond + `)`
}

// sums is the history sum of each s (Tx.SumUsage), the sums of one shape
// over events read in one statement per windowChunk; a range reaching
// before the prune horizon (rare) adds its rollups first.
func (t *tx) sums(ctx context.Context, ss []sqlrow.Sum) ([]int64, error) {
	out := make([]int64, len(ss))
	groups := make(map[sumShape][]int)
	var order []sumShape
	from := make([]int64, len(ss))
	for i, s := range ss {
		rolled, f, err := t.rolledUp(ctx, s.Limit, s.Start, s.End)
		if err != nil {
			return nil, err
		}
		out[i], from[i] = rolled, ns(f)
		if !f.Before(s.End) {
			continue
		}
		sh, _, _, err := shapeOf(s.Limit)
		if err != nil {
			return nil, err
		}
		if _, ok := groups[sh]; !ok {
			order = append(order, sh)
		}
		groups[sh] = append(groups[sh], i)
	}
	for _, sh := range order {
		idx := groups[sh]
		q := `WITH v(i, s, e, who, f) AS (VALUES %s) SELECT v.i, ` + sh.subquery() + ` FROM v`
		for lo := 0; lo < len(idx); lo += windowChunk {
			part := idx[lo:min(lo+windowChunk, len(idx))]
			args := make([]any, 0, 5*len(part))
			for _, i := range part {
				_, who, f, _ := shapeOf(ss[i].Limit)
				args = append(args, i, from[i], ns(ss[i].End), who, f)
			}
			if err := t.scan(ctx, multiRow(q, 5, len(part)), args, func(s scanner) error {
				var i int
				var v int64
				if err := s.Scan(&i, &v); err != nil {
					return err
				}
				out[i] = min(out[i]+v, budget.MaxTokens)
				return nil
			}); err != nil {
				return nil, fmt.Errorf("sum usage of %d windows: %w", len(part), err)
			}
		}
	}
	return out, nil
}

// counterKey is a counter row's key.
type counterKey struct {
	limit, subject string
	start          int64
}

// createCounters creates the rows of the windows cs (WriteSet counters
// with Create), each seeded from the history, which already holds this
// transaction's events: one statement per shape and windowChunk rows. It
// reports which rows existed already (another transaction created them
// first): those gain the batch's additions like any existing row.
func (t *tx) createCounters(ctx context.Context, cs []*budget.CounterWrite) ([]bool, error) {
	type row struct {
		i           int
		rolled      int64
		from, evEnd int64
		who, f      any
	}
	groups := make(map[sumShape][]row)
	var order []sumShape
	for i, c := range cs {
		l := c.Ref.Limit
		rolled, from, err := t.rolledUp(ctx, l, c.Ref.Start, c.Ref.End)
		if err != nil {
			return nil, err
		}
		sh, who, f, err := shapeOf(l)
		if err != nil {
			return nil, err
		}
		if _, ok := groups[sh]; !ok {
			order = append(order, sh)
		}
		// A window wholly before the horizon sums no events.
		groups[sh] = append(groups[sh], row{i, rolled, ns(from), max(ns(c.Ref.End), ns(from)), who, f})
	}
	existed := make([]bool, len(cs))
	for _, sh := range order {
		rows := groups[sh]
		q := `WITH v(lid, sub, ws, we, rolled, s, e, who, f) AS (VALUES %s)
			INSERT OR IGNORE INTO counters (limit_id, subject, window_start, window_end, used)
			SELECT v.lid, v.sub, v.ws, v.we, MIN(v.rolled + ` + sh.subquery() + `, 9007199254740991) FROM v
			RETURNING limit_id, subject, window_start`
		for lo := 0; lo < len(rows); lo += windowChunk {
			part := rows[lo:min(lo+windowChunk, len(rows))]
			args := make([]any, 0, 9*len(part))
			created := make(map[counterKey]bool, len(part))
			for _, r := range part {
				c := cs[r.i]
				l := c.Ref.Limit
				args = append(args, l.ID, l.Subject, ns(c.Ref.Start), ns(c.Ref.End), r.rolled, r.from, r.evEnd, r.who, r.f)
			}
			if err := t.scan(ctx, multiRow(q, 9, len(part)), args, func(s scanner) error {
				var k counterKey
				if err := s.Scan(&k.limit, &k.subject, &k.start); err != nil {
					return err
				}
				created[k] = true
				return nil
			}); err != nil {
				return nil, fmt.Errorf("create %d counters: %w", len(part), err)
			}
			for _, r := range part {
				ref := &cs[r.i].Ref
				existed[r.i] = !created[counterKey{ref.Limit.ID, ref.Limit.Subject, ns(ref.Start)}]
			}
		}
	}
	return existed, nil
}
