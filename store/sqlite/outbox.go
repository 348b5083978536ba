package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// qEnqueueUsageN queues outbox rows; %s stands for the VALUES rows. Rows
// take their seq (the rowid) in the order given: one past the largest.
const qEnqueueUsageN = `INSERT INTO usage_outbox (dest, key, request_id, at, queued_at, next_attempt) VALUES %s`

// EnqueueUsage is the write path's outbox statement (budget.OutboxTx):
// one multi-row INSERT per chunk of rows, none without destinations.
func (t *tx) EnqueueUsage(ctx context.Context, dests []string, evs []budget.OutboxEvent, queued time.Time) error {
	if err := t.write(); err != nil {
		return err
	}
	q := ns(queued)
	if err := t.insertRows(ctx, qEnqueueUsageN, 6, len(dests)*len(evs), func(i int, a []any) []any {
		e := &evs[i%len(evs)]
		return append(a, dests[i/len(evs)], e.Key, e.RequestID, ns(e.At), q, q)
	}); err != nil {
		return fmt.Errorf("queue usage for the usage hooks: %w", err)
	}
	return nil
}
