package postgres

import (
	"context"
	"fmt"
	"time"
)

// Subjects implements budget.Tx.
func (t *tx) Subjects(ctx context.Context, id string, start time.Time) ([]string, error) {
	var out []string
	// Sorted bytewise, as every store sorts, whatever the database's
	// collation.
	if err := t.tx.SelectContext(ctx, &out, `SELECT subject FROM (SELECT subject FROM counters WHERE limit_id = $1 AND window_start = $2
		UNION SELECT subject FROM holds WHERE limit_id = $1 AND window_start = $2) s ORDER BY subject COLLATE "C"`, id, ns(start)); err != nil {
		return nil, fmt.Errorf("read subjects of limit %s: %w", id, err)
	}
	return out, nil
}
