package sqlrow

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/budget"
)

// limitColsV3 are the columns of a limits row at schema 3, which
// NormalizeModels runs against: the later columns (team, org, alerts,
// created_at) do not exist yet. A store reads today's limits with its own
// list.
const limitColsV3 = `id, key, scope, scope_value, metric, max, "window", window_seconds, reset_time, timezone, enabled`

// SumFunc is a store's history total of l over [start, end) inside x.
type SumFunc func(ctx context.Context, x *sqlx.Tx, l *budget.Limit, start, end time.Time) (int64, error)

// NormalizeModels is the migration that brings model normalisation to an
// existing database, inside the migration's transaction x: it fills the
// events' model_norm, creates the covering index (createIndex) over it,
// normalises the values of model-scope limits (a limit whose normalised
// value another limit of the same key already has keeps its value, which
// then matches nothing, rather than failing the upgrade), and recomputes
// the counters of model-scope limits from the history, which now matches
// more spellings, so that verify stays clean.
func NormalizeModels(ctx context.Context, x *sqlx.Tx, createIndex string, sum SumFunc) error {
	var models []string
	if err := x.SelectContext(ctx, &models, `SELECT DISTINCT model FROM usage`); err != nil {
		return fmt.Errorf("read models: %w", err)
	}
	for _, m := range models {
		if _, err := x.ExecContext(ctx, x.Rebind(`UPDATE usage SET model_norm = ? WHERE model = ?`), budget.NormalizeModel(m), m); err != nil {
			return fmt.Errorf("normalise model %q: %w", m, err)
		}
	}
	if _, err := x.ExecContext(ctx, createIndex); err != nil {
		return fmt.Errorf("index normalised models: %w", err)
	}
	var rows []Limit
	if err := x.SelectContext(ctx, &rows, `SELECT `+limitColsV3+` FROM limits WHERE scope = 'model'`); err != nil {
		return fmt.Errorf("read model limits: %w", err)
	}
	for i := range rows {
		l, err := rows[i].Decode()
		if err != nil {
			return err
		}
		if v := budget.NormalizeModel(l.ScopeValue); v != l.ScopeValue {
			var taken int
			if err := x.GetContext(ctx, &taken, x.Rebind(`SELECT COUNT(*) FROM limits WHERE key = ? AND scope = 'model'
				AND scope_value = ? AND metric = ? AND "window" = ?`), l.Key, v, string(l.Metric), l.Window.String()); err != nil {
				return fmt.Errorf("normalise limit %s: %w", l.ID, err)
			}
			if taken == 0 {
				if _, err := x.ExecContext(ctx, x.Rebind(`UPDATE limits SET scope_value = ? WHERE id = ?`), v, l.ID); err != nil {
					return fmt.Errorf("normalise limit %s: %w", l.ID, err)
				}
				l.ScopeValue = v
			}
		}
		var counters []struct {
			Start int64 `db:"window_start"`
			End   int64 `db:"window_end"`
		}
		if err := x.SelectContext(ctx, &counters, x.Rebind(`SELECT window_start, window_end FROM counters WHERE limit_id = ?`), l.ID); err != nil {
			return fmt.Errorf("read counters of %s: %w", l.ID, err)
		}
		for _, c := range counters {
			used, err := sum(ctx, x, &l, FromNs(c.Start), FromNs(c.End))
			if err != nil {
				return err
			}
			if _, err := x.ExecContext(ctx, x.Rebind(`UPDATE counters SET used = ? WHERE limit_id = ? AND window_start = ?`), used, l.ID, c.Start); err != nil {
				return fmt.Errorf("recount %s: %w", l.ID, err)
			}
		}
	}
	return nil
}
