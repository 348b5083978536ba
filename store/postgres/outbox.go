package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// qEnqueueUsage queues, for each destination of $1, the events given as
// arrays $2-$4 in order: the SELECT's order is the order the rows take
// their seq in.
const qEnqueueUsage = `INSERT INTO usage_outbox (dest, key, request_id, at, queued_at, next_attempt)
	SELECT d.d, e.k, e.r, e.a, $5, $5
	FROM unnest($1::text[]) WITH ORDINALITY AS d(d, j), unnest($2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS e(k, r, a, i)
	ORDER BY d.j, e.i`

// EnqueueUsage is the write path's outbox statement (budget.OutboxTx):
// one INSERT of every destination's rows, none without destinations.
func (t *tx) EnqueueUsage(ctx context.Context, dests []string, evs []budget.OutboxEvent, queued time.Time) error {
	if err := t.write(); err != nil {
		return err
	}
	if len(dests) == 0 || len(evs) == 0 {
		return nil
	}
	keys, ids, ats := make([]string, len(evs)), make([]string, len(evs)), make([]int64, len(evs))
	for i := range evs {
		keys[i], ids[i], ats[i] = evs[i].Key, evs[i].RequestID, ns(evs[i].At)
	}
	if _, err := t.tx.ExecContext(ctx, qEnqueueUsage, dests, keys, ids, ats, ns(queued)); err != nil {
		return fmt.Errorf("queue usage for the usage hooks: %w", err)
	}
	return nil
}
