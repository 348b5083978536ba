package sqlite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlq"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// tx implements budget.Tx on one SQLite transaction.
type tx struct {
	sqlq.Tx  // the statements both stores share, run through execer
	db       *DB
	tx       *sqlx.Tx
	ro       bool
	keysOnly bool // it writes gateway keys only: not counted in Mark
	// horizon is the prune horizon once read (Unix nanos), for the rest
	// of the transaction: every seed and forecast needs it.
	horizon *int64
}

// Every role, the optional ones included (budget/roles.go).
var (
	_ budget.Tx         = (*tx)(nil)
	_ budget.HistoryTx  = (*tx)(nil)
	_ budget.AlertTx    = (*tx)(nil)
	_ budget.ProviderTx = (*tx)(nil)
	_ budget.AuditTx    = (*tx)(nil)
	_ budget.OutboxTx   = (*tx)(nil)
)

// ns and fromNs store instants as every SQL store does.
var ns, fromNs = sqlrow.Ns, sqlrow.FromNs

var errReadOnly = errors.New("store: write inside a read-only transaction")

const (
	// Multi-row statements: %s stands for the VALUES rows.
	qInsertUsageN = `INSERT OR IGNORE INTO usage (key, request_id, provider, model, input, output, reasoning, cache_read, cache_write, at, model_norm, cost, unpriced, team, org, end_user, no_price, tags)
		VALUES %s`
	// qInsertUsageLeanN leaves the levels, the end user and the tags to
	// their default, '': a chunk of events that carry none binds 14
	// values a row, not 18 (a string bound is a copy into C memory).
	qInsertUsageLeanN = `INSERT OR IGNORE INTO usage (key, request_id, provider, model, input, output, reasoning, cache_read, cache_write, at, model_norm, cost, unpriced, no_price)
		VALUES %s`
	qReturning    = ` RETURNING key, request_id`
	qAddCountersN = `WITH v(lid, sub, ws, d) AS (VALUES %s)
		UPDATE counters SET used = MIN(used + v.d, 9007199254740991) FROM v
		WHERE counters.limit_id = v.lid AND counters.subject = v.sub AND counters.window_start = v.ws`
	qLimitsVersion = `SELECT value FROM meta WHERE name = 'limits_version'`
)

// chunk is the rows per multi-row statement; full chunks run prepared.
const chunk = 64

var hotStatements = []string{qLimitsVersion, `PRAGMA data_version`,
	multiRow(qInsertUsageN, usageCols, chunk), multiRow(qInsertUsageN, usageCols, 1),
	multiRow(qInsertUsageN+qReturning, usageCols, chunk), multiRow(qInsertUsageN+qReturning, usageCols, 1),
	multiRow(qInsertUsageLeanN, usageLeanCols, chunk), multiRow(qInsertUsageLeanN, usageLeanCols, 1), multiRow(qAddCountersN, 4, chunk)}

// usageCols and usageLeanCols are the numbers of columns qInsertUsageN
// and qInsertUsageLeanN write.
const usageCols, usageLeanCols = 18, 14

var multiRows sync.Map // multiRowKey -> string

type multiRowKey struct {
	q          string
	cols, rows int
}

// multiRow expands q's %s into rows VALUES tuples of cols placeholders.
func multiRow(q string, cols, rows int) string {
	k := multiRowKey{q, cols, rows}
	if s, ok := multiRows.Load(k); ok {
		return s.(string)
	}
	tuple := "(" + strings.Repeat("?, ", cols-1) + "?)"
	s := fmt.Sprintf(q, strings.Repeat(tuple+", ", rows-1)+tuple)
	multiRows.Store(k, s)
	return s
}

func (t *tx) write() error {
	if t.ro {
		return errReadOnly
	}
	return nil
}

func (t *tx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	if err := t.write(); err != nil {
		return 0, err
	}
	return t.db.exec(ctx, t.tx, q, args...)
}

// get, sel and query read through the prepared statements of the
// transaction's pool: the writer's in a write transaction, the read pool's
// in a read one, so a check that misses the cache does not parse its SQL
// again on every read.
func (t *tx) stmt(ctx context.Context, q string) *sqlx.Stmt {
	if t.ro {
		return t.db.rs.get(ctx, t.tx, q)
	}
	return t.db.ws.get(ctx, t.tx, q)
}

func (t *tx) get(ctx context.Context, dest any, q string, args ...any) error {
	if st := t.stmt(ctx, q); st != nil {
		return st.GetContext(ctx, dest, args...)
	}
	return t.tx.GetContext(ctx, dest, q, args...)
}

func (t *tx) sel(ctx context.Context, dest any, q string, args ...any) error {
	if st := t.stmt(ctx, q); st != nil {
		return st.SelectContext(ctx, dest, args...)
	}
	return t.tx.SelectContext(ctx, dest, q, args...)
}

func (t *tx) query(ctx context.Context, q string, args ...any) (*sqlx.Rows, error) {
	if st := t.stmt(ctx, q); st != nil {
		return st.QueryxContext(ctx, args...)
	}
	return t.tx.QueryxContext(ctx, q, args...)
}

// execer runs the shared statements through t's prepared statements.
type execer struct{ t *tx }

func (e execer) Get(ctx context.Context, dest any, q string, args ...any) error {
	return e.t.get(ctx, dest, q, args...)
}

func (e execer) Select(ctx context.Context, dest any, q string, args ...any) error {
	return e.t.sel(ctx, dest, q, args...)
}

func (e execer) Query(ctx context.Context, q string, args ...any) (*sqlx.Rows, error) {
	return e.t.query(ctx, q, args...)
}

func (e execer) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return e.t.exec(ctx, q, args...)
}

// ---- limits

func (t *tx) LimitsVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := t.get(ctx, &v, qLimitsVersion); err != nil {
		return 0, fmt.Errorf("read limits version: %w", err)
	}
	return v, nil
}

func (t *tx) Versions(ctx context.Context) (limits, prices int64, err error) {
	err = t.scan(ctx, `SELECT (SELECT value FROM meta WHERE name = 'limits_version'), (SELECT value FROM meta WHERE name = 'prices_version')`,
		nil, func(s scanner) error { return s.Scan(&limits, &prices) })
	if err != nil {
		return 0, 0, fmt.Errorf("read versions: %w", err)
	}
	return limits, prices, nil
}

func (t *tx) UnpricedEvents(ctx context.Context) (int64, error) {
	var n int64
	if err := t.tx.GetContext(ctx, &n, `SELECT COUNT(*) FROM usage WHERE unpriced <> 0`); err != nil {
		return 0, fmt.Errorf("count unpriced events: %w", err)
	}
	return n, nil
}

// ---- usage and counters

// insertUsage inserts the events in (key, request id) order, the history's
// own: consecutive rows land on the same leaf page of the table and of the
// covering index, each page read and written once for its run of rows
// rather than once per event. OR IGNORE, not an upsert: a statement that
// cannot abort needs no statement journal (a copy of every page it
// touches). It would also skip a row failing a NOT NULL or CHECK
// constraint: the table has no CHECK and every column is bound to a
// non-NULL value, so only the key's uniqueness can fail (a CHECK added to
// usage needs ON CONFLICT DO NOTHING back, or events would be dropped).
//
// Which rows went in: nearly always every row but the batch's own repeats
// of an id, and the insert's count of rows says so. RETURNING each row
// that went in cost the writer about 1.7 µs an event (the rows' strings
// scanned, the statement's table of them); a read of the stored ids
// before the insert, as much. So a batch inserts with neither, and if the
// count falls short (the history held one of its ids) the batch fails
// with ErrConflict, which the writer plans again at once, and this
// handle's next exactBatches batches insert with RETURNING: a client
// sending its events twice, or an import run again, pays one wasted try
// in exactBatches + 1 batches. A retry (WriteSet.Retry: a try before may
// have written some of the events) inserts with RETURNING at once.
func (t *tx) insertUsage(ctx context.Context, evs []budget.EventWrite, retry bool) ([]bool, error) {
	if err := t.write(); err != nil {
		return nil, err
	}
	inserted := make([]bool, len(evs))
	order := make([]int, len(evs))
	for i := range order {
		order[i] = i
	}
	// Stable: of two rows with one id, the first in the batch goes in.
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := &evs[a].Usage, &evs[b].Usage
		return cmp.Or(strings.Compare(x.Key, y.Key), strings.Compare(x.RequestID, y.RequestID))
	})
	exact := retry
	if t.db.exact.Load() > 0 {
		exact = true
		t.db.exact.Add(-1)
	}
	args := make([]any, 0, min(len(order), chunk)*usageCols)
	var box boxes
	var first map[[2]string]int
	var last *budget.Usage // the row before in order: a repeat of its id is ignored
	for lo := 0; lo < len(order); lo += chunk {
		part := order[lo:min(lo+chunk, len(order))]
		args = args[:0]
		var news int64
		q, cols := qInsertUsageLeanN, usageLeanCols
		for _, i := range part {
			if e := &evs[i].Usage; e.Team != "" || e.Org != "" || e.User != "" || e.Tags != "" {
				q, cols = qInsertUsageN, usageCols
				break
			}
		}
		for _, i := range part {
			e := &evs[i].Usage
			args = append(args, box.str(0, e.Key), e.RequestID, box.str(1, e.Provider), box.str(2, e.Model), e.Input, e.Output, e.Reasoning, e.CacheRead, e.CacheWrite, ns(e.At),
				box.str(3, budget.NormalizeModel(e.Model)), e.Cost, e.Unpriced)
			if cols == usageCols {
				args = append(args, box.str(4, e.Team), box.str(5, e.Org), box.str(6, e.User), evs[i].NoPrice, box.str(7, string(e.Tags)))
			} else {
				args = append(args, evs[i].NoPrice)
			}
			if last == nil || last.Key != e.Key || last.RequestID != e.RequestID {
				inserted[i] = !exact
				news++
			}
			last = e
		}
		if !exact {
			n, err := t.exec(ctx, multiRow(q, cols, len(part)), args...)
			if err != nil {
				return nil, fmt.Errorf("insert usage: %w", err)
			}
			if n != news {
				t.db.exact.Store(exactBatches)
				return nil, fmt.Errorf("%w: insert usage: the history holds %d of the batch's request ids", budget.ErrConflict, news-n)
			}
			continue
		}
		// The rows that went in come back (a duplicate of a stored row,
		// or of an earlier row, does not): one statement either way.
		if first == nil {
			first = make(map[[2]string]int, min(len(order), chunk))
		}
		clear(first)
		for _, i := range slices.Backward(part) {
			first[[2]string{evs[i].Usage.Key, evs[i].Usage.RequestID}] = i
		}
		err := t.scan(ctx, multiRow(q+qReturning, cols, len(part)), args, func(s scanner) error {
			var k [2]string
			if err := s.Scan(&k[0], &k[1]); err != nil {
				return err
			}
			inserted[first[k]] = true
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("insert usage: %w", err)
		}
	}
	return inserted, nil
}

// boxes keeps the last string each of a few columns was boxed as an
// argument: rows in key order repeat their key, provider, model and levels,
// and a string put in an interface is an allocation each time.
type boxes [8]struct {
	s string
	v any
}

func (b *boxes) str(col int, s string) any {
	if c := &b[col]; c.v != nil && c.s == s {
		return c.v
	}
	b[col].s, b[col].v = s, s
	return b[col].v
}

// exactBatches is how many batches insert with RETURNING after one found
// an id the history held (see insertUsage).
const exactBatches = 16

// Sums saturate at 2^53-1, past any limit: TOTAL never overflows (SUM
// would fail the whole batch, and with it every key's usage behind it), and
// every row is at most 2^53-1, so the float sum is exact below the cap.
var sumExpr = map[budget.Metric]string{
	budget.MetricTokens:   "CAST(MIN(TOTAL(input + output + reasoning), 9007199254740991) AS INTEGER)",
	budget.MetricInput:    "CAST(MIN(TOTAL(input), 9007199254740991) AS INTEGER)",
	budget.MetricOutput:   "CAST(MIN(TOTAL(output + reasoning), 9007199254740991) AS INTEGER)",
	budget.MetricRequests: "SUM(substr(request_id, -5) <> ':late')", // budget.LateSuffix: no request of its own
	budget.MetricUSD:      "CAST(MIN(TOTAL(cost), 9007199254740991) AS INTEGER)",
}

// sumQuery is the history sum of l's metric over [start, end) for the
// events l.History() selects, with its arguments. Team and org sums name
// the partial indexes' condition so SQLite can use them.
func sumQuery(l *budget.Limit, start, end time.Time) (string, []any, error) {
	expr, ok := sumExpr[l.Metric]
	if !ok {
		return "", nil, fmt.Errorf("no usage history for metric %s", l.Metric)
	}
	q, args := historyWhere(`SELECT COALESCE(`+expr+`, 0) FROM usage WHERE at >= ? AND at < ?`, []any{start.UnixNano(), end.UnixNano()}, l.History(), true)
	return q, args, nil
}

// rollupExpr sums rollups rows as sumExpr sums events.
var rollupExpr = map[budget.Metric]string{
	budget.MetricTokens:   "CAST(MIN(TOTAL(input + output + reasoning), 9007199254740991) AS INTEGER)",
	budget.MetricInput:    "CAST(MIN(TOTAL(input), 9007199254740991) AS INTEGER)",
	budget.MetricOutput:   "CAST(MIN(TOTAL(output + reasoning), 9007199254740991) AS INTEGER)",
	budget.MetricRequests: "CAST(MIN(TOTAL(requests), 9007199254740991) AS INTEGER)",
	budget.MetricUSD:      "CAST(MIN(TOTAL(cost), 9007199254740991) AS INTEGER)",
}

// historyWhere narrows q (which ends in a WHERE clause, with args) to the
// rows h selects; partial names the partial indexes' condition (events).
func historyWhere(q string, args []any, h budget.History, partial bool) (string, []any) {
	cond, who, f := historyCond(h, partial, "?", "?")
	args = append(args, who)
	if f != nil {
		args = append(args, f)
	}
	return q + cond, args
}

// historyCond is the condition (" AND ...") selecting the rows h selects,
// comparing with the SQL who (the level: key, team or org) and f (the
// scope's value), placeholders or a VALUES row's columns, and the values
// they stand for (f nil when h has no scope: the condition has no f).
// partial names the partial indexes' condition (events).
func historyCond(h budget.History, partial bool, who, f string) (cond string, whoV, fV any) {
	switch {
	case h.Team != "":
		cond, whoV = ` AND team = `+who, h.Team
		if partial {
			cond += ` AND team <> ''`
		}
	case h.Org != "":
		cond, whoV = ` AND org = `+who, h.Org
		if partial {
			cond += ` AND org <> ''`
		}
	default:
		cond, whoV = ` AND key = `+who, h.Key
	}
	switch {
	case h.Provider != "":
		cond, fV = cond+` AND provider = `+f, h.Provider
	case h.Model != "":
		// A pattern's * and ? mean in GLOB what they mean to
		// budget.MatchModel; brackets are refused in model values.
		if budget.IsModelPattern(h.Model) {
			cond += ` AND model_norm GLOB ` + f
		} else {
			cond += ` AND model_norm = ` + f
		}
		fV = h.Model
	case h.User != "":
		cond, fV = cond+` AND end_user = `+f, h.User
	case h.Tag != "":
		// Tags are stored normalized, "a=1,b=2": the tag with a comma on
		// each side is found in the tags with one on each side. Names
		// and values hold no commas, so the match is exact.
		cond, fV = cond+` AND instr(',' || tags || ',', `+f+`) > 0`, ","+h.Tag+","
	}
	return cond, whoV, fV
}
