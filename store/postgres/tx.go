package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlq"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// tx implements budget.Tx on one PostgreSQL transaction.
type tx struct {
	sqlq.Tx // the statements both stores share, run through execer
	db      *DB
	tx      *sqlx.Tx
	ro      bool
}

// Every role, the optional ones included (budget/roles.go).
var (
	_ budget.Tx         = (*tx)(nil)
	_ budget.HistoryTx  = (*tx)(nil)
	_ budget.AlertTx    = (*tx)(nil)
	_ budget.ProviderTx = (*tx)(nil)
	_ budget.AuditTx    = (*tx)(nil)
)

// ns and fromNs store instants as every SQL store does.
var ns, fromNs = sqlrow.Ns, sqlrow.FromNs

var errReadOnly = errors.New("postgres: write inside a read-only transaction")

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
	res, err := t.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// execer runs the shared statements in t (pgx prepares and caches each
// statement per connection).
type execer struct{ t *tx }

func (e execer) Get(ctx context.Context, dest any, q string, args ...any) error {
	return e.t.tx.GetContext(ctx, dest, q, args...)
}

func (e execer) Select(ctx context.Context, dest any, q string, args ...any) error {
	return e.t.tx.SelectContext(ctx, dest, q, args...)
}

func (e execer) Query(ctx context.Context, q string, args ...any) (*sqlx.Rows, error) {
	return e.t.tx.QueryxContext(ctx, q, args...)
}

func (e execer) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return e.t.exec(ctx, q, args...)
}

// ---- limits

func (t *tx) Versions(ctx context.Context) (limits, prices int64, err error) {
	q := `SELECT (SELECT value FROM meta WHERE name = 'limits_version'), (SELECT value FROM meta WHERE name = 'prices_version')`
	if !t.ro {
		// The limits version through the function that first takes the
		// limits lock shared (see LimitsVersion).
		q = `SELECT tokenbudget_limits_version($1), (SELECT value FROM meta WHERE name = 'prices_version')`
		err = t.tx.QueryRowContext(ctx, q, t.db.lockKey).Scan(&limits, &prices)
	} else {
		err = t.tx.QueryRowContext(ctx, q).Scan(&limits, &prices)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read versions: %w", err)
	}
	return limits, prices, nil
}

func (t *tx) UnpricedEvents(ctx context.Context) (int64, error) {
	var n int64
	if err := t.tx.GetContext(ctx, &n, `SELECT COUNT(*) FROM usage WHERE unpriced`); err != nil {
		return 0, fmt.Errorf("count unpriced events: %w", err)
	}
	return n, nil
}

// LimitsVersion reads the version; in a write transaction it first takes
// the schema's limits lock shared (one call of a function doing both), so
// no limit changes until this transaction ends and what it resolves from
// the version stays true.
func (t *tx) LimitsVersion(ctx context.Context) (int64, error) {
	var v int64
	var err error
	if t.ro {
		err = t.tx.GetContext(ctx, &v, `SELECT value FROM meta WHERE name = 'limits_version'`)
	} else {
		err = t.tx.GetContext(ctx, &v, `SELECT tokenbudget_limits_version($1)`, t.db.lockKey)
	}
	if err != nil {
		return 0, fmt.Errorf("read limits version: %w", err)
	}
	return v, nil
}

// ---- usage and counters

// qInsertUsage inserts a batch given as parallel arrays and returns the
// rows it inserted (duplicates are skipped).
const qInsertUsage = `INSERT INTO usage (key, request_id, provider, model, input, output, reasoning, cache_read, cache_write, at, model_norm, cost, unpriced, team, org, end_user, no_price, tags)
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::text[], $12::bigint[], $13::boolean[],
		$14::text[], $15::text[], $16::text[], $17::boolean[], $18::text[])
	ON CONFLICT DO NOTHING RETURNING key, request_id`

type usageKey struct{ key, id string }

func (t *tx) insertUsage(ctx context.Context, evs []budget.EventWrite) ([]bool, error) {
	events := make([]budget.Usage, len(evs))
	for i := range evs {
		events[i] = evs[i].Usage
	}
	if err := t.write(); err != nil {
		return nil, err
	}
	inserted := make([]bool, len(events))
	if len(events) == 0 {
		return inserted, nil
	}
	// One row per (key, request_id): a repeat within the batch is a
	// duplicate of its first occurrence. Rows go in sorted order so two
	// transactions inserting the same ids wait on each other in one order.
	first := make(map[usageKey]int, len(events))
	order := make([]int, 0, len(events))
	for i := range events {
		k := usageKey{events[i].Key, events[i].RequestID}
		if _, dup := first[k]; !dup {
			first[k] = i
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(strings.Compare(events[a].Key, events[b].Key), strings.Compare(events[a].RequestID, events[b].RequestID))
	})
	n := len(order)
	keys, ids, provs, models, norms := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	in, out, reas, cr, cw, at := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	costs, unpriced, noPrice := make([]int64, n), make([]bool, n), make([]bool, n)
	teams, orgs, users, tags := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for j, i := range order {
		e := &events[i]
		keys[j], ids[j], provs[j], models[j], norms[j] = e.Key, e.RequestID, e.Provider, e.Model, budget.NormalizeModel(e.Model)
		in[j], out[j], reas[j], cr[j], cw[j], at[j] = e.Input, e.Output, e.Reasoning, e.CacheRead, e.CacheWrite, ns(e.At)
		costs[j], unpriced[j], noPrice[j] = e.Cost, e.Unpriced, evs[i].NoPrice
		teams[j], orgs[j], users[j], tags[j] = e.Team, e.Org, e.User, string(e.Tags)
	}
	rows, err := t.tx.QueryContext(ctx, qInsertUsage, keys, ids, provs, models, in, out, reas, cr, cw, at, norms, costs, unpriced, teams, orgs, users, noPrice, tags)
	if err != nil {
		return nil, fmt.Errorf("insert usage: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k usageKey
		if err := rows.Scan(&k.key, &k.id); err != nil {
			return nil, fmt.Errorf("insert usage: %w", err)
		}
		inserted[first[k]] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert usage: %w", err)
	}
	return inserted, nil
}
