package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
)

// Lock discipline.
//
// Limit rows are the only locks a write transaction waits on for long, and
// one mode is used for all of them (FOR NO KEY UPDATE: it excludes other
// reservations and settlements on the limit, not the foreign-key checks of
// counter and hold inserts). A transaction may wait only for limits above
// every limit it already holds, so waits go up one global order (byte
// order of ids, as COLLATE "C" sorts) and cannot form a cycle. The writer
// batches several operations in one transaction, each locking its own
// limits; a later operation that needs a limit below one held takes it
// with NOWAIT, and if another transaction has it the whole transaction
// fails with lock_not_available and is retried after a backoff, instead of
// waiting for PostgreSQL's deadlock detector.
//
// Counter rows are not locked until the end: AddCounters only checks that
// the rows exist (a row is never deleted while its limit's definition is
// in use: deleting a limit takes the limits lock exclusively) and buffers
// the deltas, Counter adds the buffer to what it reads, and flush applies
// everything in one statement that locks the rows in order, just before
// COMMIT.

const (
	qLockLimits       = `SELECT id FROM limits WHERE id = ANY($1) ORDER BY id COLLATE "C" FOR NO KEY UPDATE`
	qLockLimitsNoWait = `SELECT id FROM limits WHERE id = ANY($1) ORDER BY id COLLATE "C" FOR NO KEY UPDATE NOWAIT`
)

// lockLimits locks the limits ids under the discipline above.
func (t *tx) lockLimits(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	q := qLockLimits
	if t.hasLock && ids[0] <= t.maxLock {
		q = qLockLimitsNoWait
	}
	if _, err := t.tx.ExecContext(ctx, q, ids); err != nil {
		return fmt.Errorf("lock limits: %w", err)
	}
	t.noteLocked(ids[len(ids)-1])
	return nil
}

// noteLocked records that the transaction holds limit locks up to max.
func (t *tx) noteLocked(max string) {
	if !t.hasLock || max > t.maxLock {
		t.maxLock = max
	}
	t.hasLock = true
}

func (t *tx) markLocked(reservationID string) {
	if t.locked == nil {
		t.locked = make(map[string]bool)
	}
	t.locked[reservationID] = true
}

// lockHoldLimits locks the limits of reservation id's holds, unless this
// transaction did already (Reservation, ExpiredReservations).
func (t *tx) lockHoldLimits(ctx context.Context, id string) error {
	if t.locked[id] {
		return nil
	}
	var ids []string
	if err := t.tx.SelectContext(ctx, &ids, `SELECT limit_id FROM holds WHERE reservation_id = $1`, id); err != nil {
		return fmt.Errorf("lock limits of reservation %s: %w", id, err)
	}
	if err := t.lockLimits(ctx, ids); err != nil {
		return err
	}
	t.markLocked(id)
	return nil
}

// qFlushCounters locks the counter rows in (limit, window) order, whatever
// plan the update gets, then adds each delta.
const qFlushCounters = `WITH d AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS d(limit_id, subject, window_start, delta)
	), lk AS MATERIALIZED (
		SELECT c.limit_id, c.subject, c.window_start, d.delta FROM counters c
		JOIN d ON c.limit_id = d.limit_id AND c.subject = d.subject AND c.window_start = d.window_start
		ORDER BY c.limit_id COLLATE "C", c.subject COLLATE "C", c.window_start
		FOR NO KEY UPDATE OF c
	)
	UPDATE counters c SET used = LEAST(c.used + lk.delta, 9007199254740991) FROM lk
	WHERE c.limit_id = lk.limit_id AND c.subject = lk.subject AND c.window_start = lk.window_start`

// flush applies the buffered counter deltas; run calls it before COMMIT.
func (t *tx) flush(ctx context.Context) error {
	if len(t.pending) == 0 {
		return nil
	}
	keys := make([]counterKey, 0, len(t.pending))
	for k, d := range t.pending {
		if d != 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b counterKey) int {
		return cmp.Or(strings.Compare(a.id, b.id), strings.Compare(a.subject, b.subject), cmp.Compare(a.start, b.start))
	})
	ids, subjects, starts, deltas := make([]string, len(keys)), make([]string, len(keys)), make([]int64, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		ids[i], subjects[i], starts[i], deltas[i] = k.id, k.subject, k.start, t.pending[k]
	}
	if _, err := t.tx.ExecContext(ctx, qFlushCounters, ids, subjects, starts, deltas); err != nil {
		return fmt.Errorf("add to counters: %w", err)
	}
	clear(t.pending)
	return nil
}
