package sqlq

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// LimitCols are a limit's columns in sqlrow.LimitArgs order ("window" is a
// keyword in both dialects).
const LimitCols = `id, key, team, org, scope, scope_value, metric, max, "window", window_seconds, reset_time, timezone, enabled, alerts`

// limitsWhere reads the limits where its condition holds, each with its
// raises, in one statement: a row per limit and raise, or per limit without
// any.
func limitsWhere(where string) Query {
	return New(`SELECT l.*, r.id AS raise_id, r.amount AS raise_amount, r.until AS raise_until, r.created_at AS raised_at
		FROM (SELECT ` + LimitCols + `, created_at FROM limits WHERE ` + where + `) l LEFT JOIN raises r ON r.limit_id = l.id`)
}

var (
	qAllLimits   = limitsWhere(`TRUE`)
	qKeyLimits   = limitsWhere(`key = ? OR key = '' AND team = '' AND org = ''`)
	qLimitByID   = limitsWhere(`id = ?`)
	qOwnedLimits = map[string]Query{ // by sqlrow.OwnerColumn
		"team": limitsWhere(`team = ? AND team <> ''`),
		"org":  limitsWhere(`org = ? AND org <> ''`),
	}

	qInsertLimit = New(`INSERT INTO limits (` + LimitCols + `, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qUpdateLimit = New(`UPDATE limits SET max = ?, reset_time = ?, timezone = ?, enabled = ?, alerts = ?, updated_at = ? WHERE id = ?`)
	qDeleteLimit = New(`DELETE FROM limits WHERE id = ?`)

	qPricesVersion = New(`SELECT value FROM meta WHERE name = 'prices_version'`)
)

func (t Tx) Limits(ctx context.Context, key string) ([]budget.Limit, error) {
	if key == "" {
		return t.limits(ctx, &qAllLimits)
	}
	return t.limits(ctx, &qKeyLimits, key)
}

func (t Tx) OwnedLimits(ctx context.Context, level budget.Level, owner string) ([]budget.Limit, error) {
	col, err := sqlrow.OwnerColumn(level)
	if err != nil {
		return nil, err
	}
	q := qOwnedLimits[col]
	return t.limits(ctx, &q, owner)
}

func (t Tx) Limit(ctx context.Context, id string) (budget.Limit, error) {
	ls, err := t.limits(ctx, &qLimitByID, id)
	if err != nil {
		return budget.Limit{}, fmt.Errorf("read limit %s: %w", id, err)
	}
	if len(ls) == 0 {
		return budget.Limit{}, fmt.Errorf("limit %q: %w", id, budget.ErrNotFound)
	}
	return ls[0], nil
}

// limits reads the limits of q (a limitsWhere) with their raises.
func (t Tx) limits(ctx context.Context, q *Query, args ...any) ([]budget.Limit, error) {
	rows, err := t.query(ctx, q, args...)
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

func (t Tx) InsertLimit(ctx context.Context, l budget.Limit, now time.Time) error {
	args := append(sqlrow.LimitArgs(l), sqlrow.Ns(now), sqlrow.Ns(now))
	if _, err := t.exec(ctx, &qInsertLimit, args...); err != nil {
		return fmt.Errorf("insert limit %s: %w", l.ID, err)
	}
	return nil
}

func (t Tx) UpdateLimit(ctx context.Context, l budget.Limit, now time.Time) error {
	n, err := t.exec(ctx, &qUpdateLimit, l.Max, l.Window.ResetTime, l.Window.ZoneName(), l.Enabled, sqlrow.AlertsText(l.Alerts), sqlrow.Ns(now), l.ID)
	if err != nil {
		return fmt.Errorf("update limit %s: %w", l.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("limit %q: %w", l.ID, budget.ErrNotFound)
	}
	return nil
}

func (t Tx) DeleteLimit(ctx context.Context, id string) error {
	n, err := t.exec(ctx, &qDeleteLimit, id)
	if err != nil {
		return fmt.Errorf("delete limit %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("limit %q: %w", id, budget.ErrNotFound)
	}
	return nil
}

func (t Tx) PricesVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := t.get(ctx, &v, &qPricesVersion); err != nil {
		return 0, fmt.Errorf("read prices version: %w", err)
	}
	return v, nil
}
