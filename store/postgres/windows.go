package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// Windows a batch opens, read and created as sets: one round trip per
// shape of history sum (a limit's metric, level and scope) however many
// windows, over arrays (unnest), the sum evaluated per row. A batch of
// imported events spread over a day opens a window per limit nearly every
// event; one statement each cost more than the events.

// sumShape is historySum's expression over the columns of a row v of
// windows (v.s, v.e, v.rf: start, end, first whole day; v.who, v.f: the
// level's and the scope's values), with l's values of who and f ("" when
// its history has no scope).
func sumShape(l *budget.Limit) (expr, who, f string, err error) {
	ev, ok := sumExpr[l.Metric]
	if !ok {
		return "", "", "", fmt.Errorf("no usage history for metric %s", l.Metric)
	}
	n := 0
	where := historyWhere(l.History(), func(v any) string {
		if n++; n == 1 {
			who = v.(string)
			return "v.who"
		}
		f = v.(string)
		return "v.f"
	})
	return sumOver(ev, rollupExpr[l.Metric], "v.s", "v.e", "v.rf", where), who, f, nil
}

// windowSet is the arrays of one shape's windows.
type windowSet struct {
	expr                  string
	idx, starts, ends, rf []int64
	who, f, ids, subs     []string
}

func (w *windowSet) add(i int, l *budget.Limit, start, end time.Time, who, f string) {
	w.idx, w.starts, w.ends, w.rf = append(w.idx, int64(i)), append(w.starts, ns(start)), append(w.ends, ns(end)), append(w.rf, ceilDay(ns(start)))
	w.who, w.f, w.ids, w.subs = append(w.who, who), append(w.f, f), append(w.ids, l.ID), append(w.subs, l.Subject)
}

// shapes groups n windows by the shape of their sums, in first-seen
// order; at gives window i's limit and range.
func shapes(n int, at func(i int) (*budget.Limit, time.Time, time.Time)) ([]*windowSet, error) {
	byExpr := make(map[string]*windowSet)
	var out []*windowSet
	for i := range n {
		l, start, end := at(i)
		expr, who, f, err := sumShape(l)
		if err != nil {
			return nil, err
		}
		w := byExpr[expr]
		if w == nil {
			w = &windowSet{expr: expr}
			byExpr[expr] = w
			out = append(out, w)
		}
		w.add(i, l, start, end, who, f)
	}
	return out, nil
}

// sums is the history sum of each s (Tx.SumUsage), one round trip per
// shape.
func (t *tx) sums(ctx context.Context, ss []sqlrow.Sum) ([]int64, error) {
	sets, err := shapes(len(ss), func(i int) (*budget.Limit, time.Time, time.Time) { return ss[i].Limit, ss[i].Start, ss[i].End })
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(ss))
	for _, w := range sets {
		err := t.each(ctx, `SELECT v.i, `+w.expr+`
			FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[], $6::text[]) AS v(i, s, e, rf, who, f)`,
			[]any{w.idx, w.starts, w.ends, w.rf, w.who, w.f}, func(s scanner) error {
				var i, v int64
				if err := s.Scan(&i, &v); err != nil {
					return err
				}
				out[i] = v
				return nil
			})
		if err != nil {
			return nil, fmt.Errorf("sum usage of %d windows: %w", len(w.idx), err)
		}
	}
	return out, nil
}

// createCounters inserts the rows of the windows cs (WriteSet counters
// with Create), each seeded from the history this statement sees (which
// holds this transaction's events), one round trip per shape. It reports
// which rows existed already (another transaction created them first,
// after waiting for it to commit): those gain the batch's additions like
// any existing row.
func (t *tx) createCounters(ctx context.Context, cs []*budget.CounterWrite) ([]bool, error) {
	sets, err := shapes(len(cs), func(i int) (*budget.Limit, time.Time, time.Time) {
		return cs[i].Ref.Limit, cs[i].Ref.Start, cs[i].Ref.End
	})
	if err != nil {
		return nil, err
	}
	existed := make([]bool, len(cs))
	for _, w := range sets {
		if err := t.write(); err != nil {
			return nil, err
		}
		created := make(map[counterKey]bool, len(w.ids))
		err := t.each(ctx, `INSERT INTO counters (limit_id, window_start, window_end, subject, used)
			SELECT v.lid, v.s, v.e, v.sub, `+w.expr+`
			FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::text[], $7::text[]) AS v(lid, s, e, sub, rf, who, f)
			ON CONFLICT (limit_id, subject, window_start) DO NOTHING
			RETURNING limit_id, subject, window_start`,
			[]any{w.ids, w.starts, w.ends, w.subs, w.rf, w.who, w.f}, func(s scanner) error {
				var k counterKey
				if err := s.Scan(&k.limit, &k.subject, &k.start); err != nil {
					return err
				}
				created[k] = true
				return nil
			})
		if err != nil {
			return nil, fmt.Errorf("create %d counters: %w", len(w.ids), err)
		}
		for j, i := range w.idx {
			existed[i] = !created[counterKey{w.ids[j], w.subs[j], w.starts[j]}]
		}
	}
	return existed, nil
}

// counterKey is a counter row's key.
type counterKey struct {
	limit, subject string
	start          int64
}

// scanner is the part of a result row a scan callback needs.
type scanner = sqlrow.Scanner

// each runs q in t and calls row for each result row.
func (t *tx) each(ctx context.Context, q string, args []any, row func(scanner) error) error {
	rows, err := t.tx.QueryContext(ctx, q, args...)
	return sqlrow.EachRow(rows, err, row)
}
