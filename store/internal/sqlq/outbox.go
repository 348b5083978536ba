package sqlq

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// The usage outbox (budget.OutboxTx) but its one write-path statement,
// EnqueueUsage, which each store writes its own way (VALUES rows or
// arrays).
//
// A claim takes a destination's rows in seq order, skipping every key
// that has a row, at or before the one considered, that is not due or is
// held by another owner's live claim: a key's rows go out from its oldest
// one, one deliverer at a time. On PostgreSQL the claim first locks the
// destination's row, so two deliverers' claims on it run one after the
// other and the second (a new statement, a new snapshot under READ
// COMMITTED) sees the first's; the writers that queue rows never take
// that lock.

// claimable selects the seq of dest's rows a claim may take (arguments:
// dest, now, now, owner): due, and no row of its key up to it waiting or
// held by another owner's live claim.
const claimable = `SELECT o.seq FROM usage_outbox o WHERE o.dest = ? AND NOT EXISTS (
		SELECT 1 FROM usage_outbox p WHERE p.dest = o.dest AND p.key = o.key AND p.seq <= o.seq
			AND (p.next_attempt > ? OR (p.claim_until > ? AND p.claim_owner <> ?)))`

var (
	qUsageHooks  = New(`SELECT name FROM usage_hooks ORDER BY name COLLATE "C"`)
	qHasHook     = New(`SELECT COUNT(*) FROM usage_hooks WHERE name = ?`)
	qAddHook     = New(`INSERT INTO usage_hooks (name, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING`)
	qDeleteHook  = New(`DELETE FROM usage_hooks WHERE name = ?`)
	qDropOutbox  = New(`DELETE FROM usage_outbox WHERE dest = ?`)
	qOutboxAhead = New(`SELECT COUNT(*) FROM usage_outbox WHERE at < ?`)
	qLockHook    = New(`SELECT name FROM usage_hooks WHERE name = ? FOR UPDATE`)
	qClaimUsage  = New(`UPDATE usage_outbox SET claim_owner = ?, claim_until = ?
		WHERE seq IN (` + claimable + ` ORDER BY o.seq LIMIT ?)
		RETURNING seq, key, request_id, at, queued_at, attempts`)
	qUsageDue = New(`SELECT (SELECT COUNT(*) FROM (` + claimable + ` LIMIT 1) AS d) AS due,
		(SELECT COUNT(*) FROM (SELECT 1 FROM usage_outbox WHERE dest = ? LIMIT 1) AS p) AS pending`)
	qUsageBacklog = New(`SELECT dest, COUNT(*) AS pending, MIN(queued_at) AS oldest, MAX(attempts) AS attempts,
			COALESCE(MIN(CASE WHEN attempts > 0 THEN next_attempt END), 0) AS next_attempt,
			COALESCE((SELECT l.last_error FROM usage_outbox l WHERE l.dest = o.dest AND l.attempts > 0
				ORDER BY l.next_attempt DESC, l.seq DESC LIMIT 1), '') AS last_error
		FROM usage_outbox o GROUP BY dest`)
	qAlertBacklog = New(`SELECT COUNT(*) AS pending, COALESCE(MIN(at), 0) AS oldest, COALESCE(MAX(attempts), 0) AS attempts,
			COALESCE(MIN(CASE WHEN attempts > 0 THEN next_attempt END), 0) AS next_attempt
		FROM alerts WHERE delivered_at = 0`)
)

func (t Tx) UsageHooks(ctx context.Context) ([]string, error) {
	var out []string
	if err := t.sel(ctx, &out, &qUsageHooks); err != nil {
		return nil, fmt.Errorf("read usage hooks: %w", err)
	}
	return out, nil
}

// AddUsageHook inserts only what is new: on PostgreSQL every statement on
// usage_hooks, even one that changes nothing, takes the definitions lock
// and moves the limits version, which makes every writer reload limits.
func (t Tx) AddUsageHook(ctx context.Context, dest string, at time.Time) (bool, error) {
	var n int64
	if err := t.get(ctx, &n, &qHasHook, dest); err != nil {
		return false, fmt.Errorf("read usage hook %s: %w", dest, err)
	}
	if n > 0 {
		return false, nil
	}
	n, err := t.exec(ctx, &qAddHook, dest, sqlrow.Ns(at))
	if err != nil {
		return false, fmt.Errorf("add usage hook %s: %w", dest, err)
	}
	return n > 0, nil
}

func (t Tx) DeleteUsageHook(ctx context.Context, dest string) (int64, error) {
	hooks, err := t.exec(ctx, &qDeleteHook, dest)
	if err != nil {
		return 0, fmt.Errorf("remove usage hook %s: %w", dest, err)
	}
	rows, err := t.exec(ctx, &qDropOutbox, dest)
	if err != nil {
		return 0, fmt.Errorf("drop the outbox of %s: %w", dest, err)
	}
	if hooks == 0 && rows == 0 {
		return 0, fmt.Errorf("usage hook %q: %w", dest, budget.ErrNotFound)
	}
	return rows, nil
}

type claimedRow struct {
	Seq       int64  `db:"seq"`
	Key       string `db:"key"`
	RequestID string `db:"request_id"`
	At        int64  `db:"at"`
	QueuedAt  int64  `db:"queued_at"`
	Attempts  int    `db:"attempts"`
}

func (t Tx) ClaimUsage(ctx context.Context, dest, owner string, now, until time.Time, max int) ([]budget.OutboxItem, error) {
	if t.D == Postgres {
		var locked []string
		if err := t.sel(ctx, &locked, &qLockHook, dest); err != nil {
			return nil, fmt.Errorf("claim usage for %s: %w", dest, err)
		}
	}
	var rows []claimedRow
	n := sqlrow.Ns(now)
	if err := t.sel(ctx, &rows, &qClaimUsage, owner, sqlrow.Ns(until), dest, n, n, owner, max); err != nil {
		return nil, fmt.Errorf("claim usage for %s: %w", dest, err)
	}
	slices.SortFunc(rows, func(a, b claimedRow) int { return cmp.Compare(a.Seq, b.Seq) })
	out := make([]budget.OutboxItem, len(rows))
	at := make(map[[2]string]int, len(rows))
	for i, r := range rows {
		out[i] = budget.OutboxItem{Seq: r.Seq, Dest: dest, QueuedAt: sqlrow.FromNs(r.QueuedAt), Attempts: r.Attempts,
			Event: budget.Usage{Key: r.Key, RequestID: r.RequestID, At: sqlrow.FromNs(r.At)}}
		at[[2]string{r.Key, r.RequestID}] = i
	}
	if len(rows) == 0 {
		return out, nil
	}
	q, args := t.eventsByID(rows)
	err := t.ScanEvents(ctx, q, args, func(u budget.Usage) error {
		i := at[[2]string{u.Key, u.RequestID}]
		out[i].Event, out[i].Found = u, true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim usage for %s: %w", dest, err)
	}
	return out, nil
}

func (t Tx) UsageDue(ctx context.Context, dest, owner string, now time.Time) (bool, bool, error) {
	var r struct {
		Due     int64 `db:"due"`
		Pending int64 `db:"pending"`
	}
	if err := t.get(ctx, &r, &qUsageDue, dest, sqlrow.Ns(now), sqlrow.Ns(now), owner, dest); err != nil {
		return false, false, fmt.Errorf("read the usage outbox of %s: %w", dest, err)
	}
	return r.Due > 0, r.Pending > 0, nil
}

// eventsByID selects the events of rows by their primary key: on SQLite
// an OR of equalities (one index search each), on PostgreSQL a join on
// arrays.
func (t Tx) eventsByID(rows []claimedRow) (string, []any) {
	if t.D == Postgres {
		keys, ids := make([]string, len(rows)), make([]string, len(rows))
		for i, r := range rows {
			keys[i], ids[i] = r.Key, r.RequestID
		}
		return `SELECT ` + sqlrow.EventCols + ` FROM usage WHERE (key, request_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`,
			[]any{keys, ids}
	}
	args := make([]any, 0, 2*len(rows))
	for _, r := range rows {
		args = append(args, r.Key, r.RequestID)
	}
	return `SELECT ` + sqlrow.EventCols + ` FROM usage WHERE ` +
		strings.TrimSuffix(strings.Repeat("(key = ? AND request_id = ?) OR ", len(rows)), " OR "), args
}

// seqIn is " AND seq IN (...)" for seqs, with its arguments appended to
// args, in t's dialect.
func (t Tx) seqIn(seqs []int64, args []any) (string, []any) {
	if t.D == Postgres {
		return fmt.Sprintf(" AND seq = ANY($%d)", len(args)+1), append(args, seqs)
	}
	for _, s := range seqs {
		args = append(args, s)
	}
	return " AND seq IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(seqs)), ", ") + ")", args
}

func (t Tx) SettleUsage(ctx context.Context, dest, owner string, seqs []int64, next time.Time, lastErr string) error {
	var q string
	var args []any
	if next.IsZero() {
		q, args = `DELETE FROM usage_outbox WHERE dest = `+t.ph(1)+` AND claim_owner = `+t.ph(2), []any{dest, owner}
	} else {
		q = `UPDATE usage_outbox SET attempts = attempts + 1, next_attempt = ` + t.ph(1) + `, last_error = ` + t.ph(2) +
			`, claim_owner = '', claim_until = 0 WHERE dest = ` + t.ph(3) + ` AND claim_owner = ` + t.ph(4)
		args = []any{sqlrow.Ns(next), lastErr, dest, owner}
	}
	in, args := t.seqIn(seqs, args)
	n, err := t.X.Exec(ctx, q+in, args...)
	if err != nil {
		return fmt.Errorf("settle usage for %s: %w", dest, err)
	}
	if lost := int64(len(seqs)) - n; lost > 0 {
		return budget.UsageClaimLost(dest, int(lost))
	}
	return nil
}

// ph is the n-th placeholder in t's dialect.
func (t Tx) ph(n int) string {
	if t.D == Postgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

type backlogRow struct {
	Dest        string `db:"dest"`
	Pending     int64  `db:"pending"`
	Oldest      int64  `db:"oldest"`
	Attempts    int    `db:"attempts"`
	NextAttempt int64  `db:"next_attempt"`
	LastError   string `db:"last_error"`
}

func (b *backlogRow) decode(kind string) budget.OutboxBacklog {
	return budget.OutboxBacklog{Kind: kind, Dest: b.Dest, Pending: b.Pending, Oldest: sqlrow.FromNs(b.Oldest), Attempts: b.Attempts,
		LastError: b.LastError, NextAttempt: sqlrow.FromNs(b.NextAttempt)}
}

func (t Tx) OutboxBacklog(ctx context.Context) ([]budget.OutboxBacklog, error) {
	hooks, err := t.UsageHooks(ctx)
	if err != nil {
		return nil, err
	}
	var rows []backlogRow
	if err := t.sel(ctx, &rows, &qUsageBacklog); err != nil {
		return nil, fmt.Errorf("read the usage outbox: %w", err)
	}
	by := make(map[string]budget.OutboxBacklog, len(rows)+len(hooks))
	for _, h := range hooks {
		by[h] = budget.OutboxBacklog{Kind: budget.OutboxUsage, Dest: h}
	}
	for i := range rows {
		by[rows[i].Dest] = rows[i].decode(budget.OutboxUsage)
	}
	out := make([]budget.OutboxBacklog, 0, len(by)+1)
	for _, b := range by {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b budget.OutboxBacklog) int { return strings.Compare(a.Dest, b.Dest) })
	var al backlogRow
	if err := t.get(ctx, &al, &qAlertBacklog); err != nil {
		return nil, fmt.Errorf("read the alerts outbox: %w", err)
	}
	if al.Pending > 0 {
		out = append(out, al.decode(budget.OutboxAlert))
	}
	return out, nil
}

func (t Tx) OutboxBefore(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	if err := t.get(ctx, &n, &qOutboxAhead, sqlrow.Ns(before)); err != nil {
		return 0, fmt.Errorf("read the usage outbox: %w", err)
	}
	return n, nil
}
