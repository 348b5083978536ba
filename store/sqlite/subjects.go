package sqlite

import (
	"context"
	"fmt"
	"time"
)

func (t *tx) Subjects(ctx context.Context, id string, start time.Time) ([]string, error) {
	var out []string
	if err := t.sel(ctx, &out, `SELECT subject FROM counters WHERE limit_id = ? AND window_start = ?
		UNION SELECT subject FROM holds WHERE limit_id = ? AND window_start = ? ORDER BY 1`, id, ns(start), id, ns(start)); err != nil {
		return nil, fmt.Errorf("read subjects of limit %s: %w", id, err)
	}
	return out, nil
}
