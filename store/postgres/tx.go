package postgres

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// tx implements budget.Tx on one PostgreSQL transaction.
type tx struct {
	db *DB
	tx *sqlx.Tx
	ro bool
}

var _ budget.Tx = (*tx)(nil)

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

// ---- limits

const limitCols = `id, key, team, org, scope, scope_value, metric, max, "window", window_seconds, reset_time, timezone, enabled, alerts`

// limitSelect is what a limit is read with: its columns and its creation,
// a once window's anchor.
const limitSelect = limitCols + `, created_at`

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

func (t *tx) PricesVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := t.tx.GetContext(ctx, &v, `SELECT value FROM meta WHERE name = 'prices_version'`); err != nil {
		return 0, fmt.Errorf("read prices version: %w", err)
	}
	return v, nil
}

func (t *tx) UnpricedEvents(ctx context.Context) (int64, error) {
	var n int64
	if err := t.tx.GetContext(ctx, &n, `SELECT COUNT(*) FROM usage WHERE unpriced`); err != nil {
		return 0, fmt.Errorf("count unpriced events: %w", err)
	}
	return n, nil
}

func (t *tx) Prices(ctx context.Context) ([]budget.Price, error) {
	return sqlrow.Prices(ctx, t.tx)
}

func (t *tx) PutPrices(ctx context.Context, ps []budget.Price) error {
	if err := t.write(); err != nil {
		return err
	}
	return sqlrow.PutPrices(ctx, t.tx, ps)
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

func (t *tx) Limits(ctx context.Context, key string) ([]budget.Limit, error) {
	if key == "" {
		return t.limits(ctx, `TRUE`)
	}
	return t.limits(ctx, `key = $1 OR key = '' AND team = '' AND org = ''`, key)
}

func (t *tx) OwnedLimits(ctx context.Context, level budget.Level, owner string) ([]budget.Limit, error) {
	col, err := sqlrow.OwnerColumn(level)
	if err != nil {
		return nil, err
	}
	return t.limits(ctx, col+` = $1 AND `+col+` <> ''`, owner)
}

func (t *tx) Limit(ctx context.Context, id string) (budget.Limit, error) {
	ls, err := t.limits(ctx, `id = $1`, id)
	if err != nil {
		return budget.Limit{}, fmt.Errorf("read limit %s: %w", id, err)
	}
	if len(ls) == 0 {
		return budget.Limit{}, fmt.Errorf("limit %q: %w", id, budget.ErrNotFound)
	}
	return ls[0], nil
}

// limits reads the limits where holds (with args), each with its raises,
// in one round trip: a row per limit and raise, or per limit without any.
func (t *tx) limits(ctx context.Context, where string, args ...any) ([]budget.Limit, error) {
	rows, err := t.tx.QueryxContext(ctx, `SELECT l.*, r.id AS raise_id, r.amount AS raise_amount, r.until AS raise_until, r.created_at AS raised_at
		FROM (SELECT `+limitSelect+` FROM limits WHERE `+where+`) l LEFT JOIN raises r ON r.limit_id = l.id`, args...)
	if err != nil {
		return nil, fmt.Errorf("read limits: %w", err)
	}
	defer rows.Close()
	var ls []sqlrow.Limit
	var raises []sqlrow.Raise
	seen := make(map[string]bool)
	for rows.Next() {
		var r struct {
			sqlrow.Limit
			RaiseID  sql.NullString `db:"raise_id"`
			Amount   sql.NullInt64  `db:"raise_amount"`
			Until    sql.NullInt64  `db:"raise_until"`
			RaisedAt sql.NullInt64  `db:"raised_at"`
		}
		if err := rows.StructScan(&r); err != nil {
			return nil, fmt.Errorf("read limits: %w", err)
		}
		if !seen[r.ID] {
			seen[r.ID] = true
			ls = append(ls, r.Limit)
		}
		if r.RaiseID.Valid {
			raises = append(raises, sqlrow.Raise{ID: r.RaiseID.String, LimitID: r.ID, Amount: r.Amount.Int64, Until: r.Until.Int64, CreatedAt: r.RaisedAt.Int64})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read limits: %w", err)
	}
	out, err := sqlrow.DecodeLimits(ls)
	if err != nil {
		return nil, err
	}
	sqlrow.AttachRaises(out, raises)
	return out, nil
}

func (t *tx) InsertLimit(ctx context.Context, l budget.Limit, now time.Time) error {
	args := append(sqlrow.LimitArgs(l), ns(now), ns(now))
	_, err := t.exec(ctx, `INSERT INTO limits (`+limitCols+`, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`, args...)
	if err != nil {
		return fmt.Errorf("insert limit %s: %w", l.ID, err)
	}
	return nil
}

func (t *tx) UpdateLimit(ctx context.Context, l budget.Limit, now time.Time) error {
	n, err := t.exec(ctx, `UPDATE limits SET max = $1, reset_time = $2, timezone = $3, enabled = $4, alerts = $5, updated_at = $6 WHERE id = $7`,
		l.Max, l.Window.ResetTime, l.Window.ZoneName(), l.Enabled, sqlrow.AlertsText(l.Alerts), ns(now), l.ID)
	if err != nil {
		return fmt.Errorf("update limit %s: %w", l.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("limit %q: %w", l.ID, budget.ErrNotFound)
	}
	return nil
}

func (t *tx) DeleteLimit(ctx context.Context, id string) error {
	n, err := t.exec(ctx, `DELETE FROM limits WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete limit %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("limit %q: %w", id, budget.ErrNotFound)
	}
	return nil
}

// ---- usage and counters

// qInsertUsage inserts a batch given as parallel arrays and returns the
// rows it inserted (duplicates are skipped).
const qInsertUsage = `INSERT INTO usage (key, request_id, provider, model, input, output, reasoning, cache_read, cache_write, at, model_norm, cost, unpriced, team, org, end_user, no_price)
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::text[], $12::bigint[], $13::boolean[],
		$14::text[], $15::text[], $16::text[], $17::boolean[])
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
	teams, orgs, users := make([]string, n), make([]string, n), make([]string, n)
	for j, i := range order {
		e := &events[i]
		keys[j], ids[j], provs[j], models[j], norms[j] = e.Key, e.RequestID, e.Provider, e.Model, budget.NormalizeModel(e.Model)
		in[j], out[j], reas[j], cr[j], cw[j], at[j] = e.Input, e.Output, e.Reasoning, e.CacheRead, e.CacheWrite, ns(e.At)
		costs[j], unpriced[j], noPrice[j] = e.Cost, e.Unpriced, evs[i].NoPrice
		teams[j], orgs[j], users[j] = e.Team, e.Org, e.User
	}
	rows, err := t.tx.QueryContext(ctx, qInsertUsage, keys, ids, provs, models, in, out, reas, cr, cw, at, norms, costs, unpriced, teams, orgs, users, noPrice)
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

func (t *tx) CounterRows(ctx context.Context) ([]budget.CounterRow, error) {
	var rows []struct {
		LimitID string `db:"limit_id"`
		Subject string `db:"subject"`
		Start   int64  `db:"window_start"`
		End     int64  `db:"window_end"`
		Used    int64  `db:"used"`
	}
	if err := t.tx.SelectContext(ctx, &rows, `SELECT limit_id, subject, window_start, window_end, used FROM counters
		ORDER BY limit_id COLLATE "C", subject COLLATE "C", window_start`); err != nil {
		return nil, fmt.Errorf("read counters: %w", err)
	}
	out := make([]budget.CounterRow, len(rows))
	for i, r := range rows {
		out[i] = budget.CounterRow{LimitID: r.LimitID, Subject: r.Subject, WindowStart: time.Unix(0, r.Start).UTC(), WindowEnd: time.Unix(0, r.End).UTC(), Used: r.Used}
	}
	return out, nil
}

func (t *tx) Rollovers(ctx context.Context, key string, n int) ([]budget.Rollover, error) {
	var rows []struct {
		LimitID   string `db:"limit_id"`
		Subject   string `db:"subject"`
		Start     int64  `db:"window_start"`
		PrevStart int64  `db:"prev_window_start"`
		PrevUsed  int64  `db:"prev_used"`
		LoggedAt  int64  `db:"logged_at"`
	}
	q := `SELECT r.limit_id, r.subject, r.window_start, r.prev_window_start, r.prev_used, r.logged_at FROM rollovers r`
	args := []any{n}
	if key != "" {
		// Its own limits', and the defaults' counters for it (per user too:
		// key, budget.SubjectSep, user).
		q += ` JOIN limits l ON l.id = r.limit_id WHERE l.key = $2 OR l.key = '' AND l.team = '' AND l.org = ''
			AND (r.subject = $2 OR starts_with(r.subject, $3))`
		args = append(args, key, key+budget.SubjectSep)
	}
	q += ` ORDER BY r.logged_at DESC, r.window_start DESC, r.limit_id COLLATE "C" LIMIT $1`
	if err := t.tx.SelectContext(ctx, &rows, q, args...); err != nil {
		return nil, fmt.Errorf("read rollovers: %w", err)
	}
	out := make([]budget.Rollover, len(rows))
	for i, r := range rows {
		out[i] = budget.Rollover{LimitID: r.LimitID, Subject: r.Subject, WindowStart: time.Unix(0, r.Start).UTC(),
			PrevWindowStart: time.Unix(0, r.PrevStart).UTC(), PrevUsed: r.PrevUsed, LoggedAt: fromNs(r.LoggedAt)}
	}
	return out, nil
}
