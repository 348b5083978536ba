package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// ---- reservations and holds
//
// A reservation's holds change only under its row lock (Reservation and
// ExpiredReservations take it in write transactions; Settle and Renew
// update the row). Settling or renewing also locks the reservation's
// limits, which waits for any reservation deciding on those limits and
// makes new ones wait: a Reserve that reads a counter and then its holds
// never sees a commit's usage without its freed hold, or the reverse.

func (t *tx) Holds(ctx context.Context, limitID, subject string, start, now time.Time) ([]budget.Hold, error) {
	rows, err := t.tx.QueryContext(ctx, `SELECT reservation_id, amount, expires_at FROM holds
		WHERE limit_id = $1 AND subject = $2 AND window_start = $3 AND expires_at > $4`, limitID, subject, ns(start), now.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("read holds of %s: %w", limitID, err)
	}
	defer rows.Close()
	var out []budget.Hold
	for rows.Next() {
		var id string
		var amount, exp int64
		if err := rows.Scan(&id, &amount, &exp); err != nil {
			return nil, fmt.Errorf("read holds of %s: %w", limitID, err)
		}
		out = append(out, budget.Hold{ReservationID: id, LimitID: limitID, Subject: subject, WindowStart: start, Amount: amount, ExpiresAt: fromNs(exp)})
	}
	return out, rows.Err()
}

func (t *tx) HoldsSummary(ctx context.Context, limitID, subject string, start, now time.Time) (int64, int64, time.Time, error) {
	var sum, n, first int64
	err := t.tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(amount), 0)::bigint, COUNT(*), COALESCE(MIN(expires_at), 0)
		FROM holds WHERE limit_id = $1 AND subject = $2 AND window_start = $3 AND expires_at > $4`, limitID, subject, ns(start), now.UnixNano()).Scan(&sum, &n, &first)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("sum holds of %s: %w", limitID, err)
	}
	return sum, n, fromNs(first), nil
}

// InsertReservation writes the reservation and its holds in one statement.
func (t *tx) InsertReservation(ctx context.Context, r budget.ReservationRow, holds []budget.Hold) error {
	lids, subjects := make([]string, len(holds)), make([]string, len(holds))
	starts, amounts, exps := make([]int64, len(holds)), make([]int64, len(holds)), make([]int64, len(holds))
	for i, h := range holds {
		lids[i], subjects[i], starts[i], amounts[i], exps[i] = h.LimitID, h.Subject, ns(h.WindowStart), h.Amount, ns(h.ExpiresAt)
	}
	_, err := t.exec(ctx, `WITH r AS (
			INSERT INTO reservations (id, key, provider, model, est_tokens, est_input, est_output, at, expires_at, state, settled_at, on_expiry)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $16) RETURNING id
		)
		INSERT INTO holds (reservation_id, limit_id, window_start, amount, expires_at, subject)
		SELECT r.id, h.* FROM r, unnest($12::text[], $13::bigint[], $14::bigint[], $15::bigint[], $17::text[]) AS h`,
		r.ID, r.Key, r.Provider, r.Model, r.Estimate.Tokens, r.Estimate.Input, r.Estimate.Output,
		ns(r.At), ns(r.ExpiresAt), string(r.State), ns(r.SettledAt), lids, starts, amounts, exps, sqlrow.OnExpiry(r.OnExpiry), subjects)
	if err != nil {
		return fmt.Errorf("insert reservation %s: %w", r.ID, err)
	}
	return nil
}

// qReservationLocked reads a reservation in a write transaction holding
// no limit lock yet: it locks the row (a second commit or release of it
// waits, then sees it settled) and then its holds' limits in order, before
// the caller touches any counter, and returns the greatest limit locked.
const qReservationLocked = `WITH r AS MATERIALIZED (
		SELECT ` + sqlrow.ReservationCols + ` FROM reservations WHERE id = $1 FOR NO KEY UPDATE
	), l AS MATERIALIZED (
		SELECT m.id FROM limits m WHERE m.id IN (SELECT h.limit_id FROM holds h JOIN r ON h.reservation_id = r.id)
		ORDER BY m.id COLLATE "C" FOR NO KEY UPDATE OF m
	)
	SELECT r.*, (SELECT max(id COLLATE "C") FROM l) AS max_lock FROM r`

// qReservationHolds reads and locks a reservation with its holds' limit
// ids, one row per hold (one row with a NULL id when it has none).
var qReservationHolds = `SELECT ` + prefixed("r.", sqlrow.ReservationCols) + `, h.limit_id FROM reservations r
	LEFT JOIN holds h ON h.reservation_id = r.id WHERE r.id = $1 FOR NO KEY UPDATE OF r`

func prefixed(p, cols string) string {
	parts := strings.Split(cols, ", ")
	for i := range parts {
		parts[i] = p + parts[i]
	}
	return strings.Join(parts, ", ")
}

func (t *tx) Reservation(ctx context.Context, id string) (budget.ReservationRow, error) {
	var r sqlrow.Reservation
	var err error
	switch {
	case t.ro:
		err = t.tx.GetContext(ctx, &r, `SELECT `+sqlrow.ReservationCols+` FROM reservations WHERE id = $1`, id)
	case !t.hasLock:
		var x struct {
			sqlrow.Reservation
			MaxLock sql.NullString `db:"max_lock"`
		}
		if err = t.tx.GetContext(ctx, &x, qReservationLocked, id); err == nil {
			r = x.Reservation
			if x.MaxLock.Valid {
				t.noteLocked(x.MaxLock.String)
			}
			t.markLocked(id)
		}
	default:
		var rows []struct {
			sqlrow.Reservation
			LimitID sql.NullString `db:"limit_id"`
		}
		if err = t.tx.SelectContext(ctx, &rows, qReservationHolds, id); err == nil {
			if len(rows) == 0 {
				err = sql.ErrNoRows
				break
			}
			r = rows[0].Reservation
			var ids []string
			for _, x := range rows {
				if x.LimitID.Valid {
					ids = append(ids, x.LimitID.String)
				}
			}
			if err := t.lockLimits(ctx, ids); err != nil {
				return budget.ReservationRow{}, err
			}
			t.markLocked(id)
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return budget.ReservationRow{}, fmt.Errorf("reservation %q: %w", id, budget.ErrNotFound)
	}
	if err != nil {
		return budget.ReservationRow{}, fmt.Errorf("read reservation %s: %w", id, err)
	}
	return r.Decode(), nil
}

// qSettle sets the state and drops the holds in one statement: one row per
// dropped hold, or a single row of NULLs when there were none, or no row
// when there is no such reservation.
const qSettle = `WITH u AS (
		UPDATE reservations SET state = $1, settled_at = $2 WHERE id = $3 RETURNING id
	), d AS (
		DELETE FROM holds WHERE reservation_id = $3 AND EXISTS (SELECT 1 FROM u)
		RETURNING limit_id, window_start, amount, expires_at, subject
	)
	SELECT d.limit_id, d.window_start, d.amount, d.expires_at, d.subject FROM u LEFT JOIN d ON TRUE`

func (t *tx) SettleReservation(ctx context.Context, id string, state budget.ReservationState, at time.Time) ([]budget.Hold, error) {
	if err := t.write(); err != nil {
		return nil, err
	}
	if err := t.lockHoldLimits(ctx, id); err != nil {
		return nil, err
	}
	rows, err := t.tx.QueryContext(ctx, qSettle, string(state), ns(at), id)
	if err != nil {
		return nil, fmt.Errorf("settle reservation %s: %w", id, err)
	}
	defer rows.Close()
	found := false
	holds := []budget.Hold{}
	for rows.Next() {
		found = true
		var lid, subject sql.NullString
		var start, amount, exp sql.NullInt64
		if err := rows.Scan(&lid, &start, &amount, &exp, &subject); err != nil {
			return nil, fmt.Errorf("settle reservation %s: %w", id, err)
		}
		if lid.Valid {
			holds = append(holds, budget.Hold{ReservationID: id, LimitID: lid.String, Subject: subject.String, WindowStart: fromNs(start.Int64),
				Amount: amount.Int64, ExpiresAt: fromNs(exp.Int64)})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("settle reservation %s: %w", id, err)
	}
	if !found {
		return nil, fmt.Errorf("reservation %q: %w", id, budget.ErrNotFound)
	}
	slices.SortFunc(holds, func(a, b budget.Hold) int { return strings.Compare(a.LimitID, b.LimitID) })
	return holds, nil
}

func (t *tx) ReservationHolds(ctx context.Context, id string) ([]budget.Hold, error) {
	holds, err := t.scanHolds(ctx, id, `SELECT limit_id, window_start, amount, expires_at, subject FROM holds WHERE reservation_id = $1`)
	if err != nil {
		return nil, fmt.Errorf("read holds of %s: %w", id, err)
	}
	return holds, nil
}

// scanHolds runs q (selecting or returning limit_id, window_start, amount,
// expires_at of reservation id's holds) and returns the holds by limit id.
func (t *tx) scanHolds(ctx context.Context, id, q string) ([]budget.Hold, error) {
	rows, err := t.tx.QueryContext(ctx, q, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	holds := []budget.Hold{}
	for rows.Next() {
		var lid, subject string
		var start, amount, exp int64
		if err := rows.Scan(&lid, &start, &amount, &exp, &subject); err != nil {
			return nil, err
		}
		holds = append(holds, budget.Hold{ReservationID: id, LimitID: lid, Subject: subject, WindowStart: fromNs(start), Amount: amount, ExpiresAt: fromNs(exp)})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(holds, func(a, b budget.Hold) int { return strings.Compare(a.LimitID, b.LimitID) })
	return holds, nil
}

func (t *tx) RenewReservation(ctx context.Context, id string, expiresAt time.Time) error {
	n, err := t.exec(ctx, `UPDATE reservations SET expires_at = $1 WHERE id = $2`, ns(expiresAt), id)
	if err != nil {
		return fmt.Errorf("renew reservation %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("reservation %q: %w", id, budget.ErrNotFound)
	}
	if err := t.lockHoldLimits(ctx, id); err != nil {
		return err
	}
	if _, err := t.exec(ctx, `UPDATE holds SET expires_at = $1 WHERE reservation_id = $2 AND expires_at <> $3`, ns(expiresAt), id, ns(budget.NoExpiry)); err != nil {
		return fmt.Errorf("renew holds of %s: %w", id, err)
	}
	return nil
}

// ExpiredReservations lists live reservations expired at now. In a write
// transaction it locks them, skipping any another transaction holds (being
// committed, released or recovered elsewhere), so concurrent recoveries
// take disjoint sets and each reservation is recovered once; holding no
// limit lock yet, it also locks their limits in order for the settlements
// to come.
func (t *tx) ExpiredReservations(ctx context.Context, now time.Time, max int) ([]budget.ReservationRow, error) {
	q := `SELECT ` + sqlrow.ReservationCols + ` FROM reservations
		WHERE state = 'live' AND expires_at <= $1 ORDER BY expires_at, id COLLATE "C" LIMIT $2`
	var rows []struct {
		sqlrow.Reservation
		MaxLock sql.NullString `db:"max_lock"`
	}
	var err error
	pre := !t.ro && !t.hasLock
	switch {
	case t.ro:
		err = t.tx.SelectContext(ctx, &rows, `SELECT *, NULL AS max_lock FROM (`+q+`) r ORDER BY expires_at, id COLLATE "C"`, now.UnixNano(), max)
	case pre:
		err = t.tx.SelectContext(ctx, &rows, `WITH r AS MATERIALIZED (`+q+` FOR NO KEY UPDATE SKIP LOCKED
			), l AS MATERIALIZED (
				SELECT m.id FROM limits m WHERE m.id IN (SELECT h.limit_id FROM holds h JOIN r ON h.reservation_id = r.id)
				ORDER BY m.id COLLATE "C" FOR NO KEY UPDATE OF m
			)
			SELECT r.*, (SELECT max(id COLLATE "C") FROM l) AS max_lock FROM r ORDER BY r.expires_at, r.id COLLATE "C"`, now.UnixNano(), max)
	default:
		err = t.tx.SelectContext(ctx, &rows, `SELECT *, NULL AS max_lock FROM (`+q+` FOR NO KEY UPDATE SKIP LOCKED) r
			ORDER BY expires_at, id COLLATE "C"`, now.UnixNano(), max)
	}
	if err != nil {
		return nil, fmt.Errorf("read expired reservations: %w", err)
	}
	out := make([]budget.ReservationRow, len(rows))
	for i := range rows {
		out[i] = rows[i].Decode()
		if rows[i].MaxLock.Valid {
			t.noteLocked(rows[i].MaxLock.String)
		}
		if pre {
			t.markLocked(out[i].ID)
		}
	}
	return out, nil
}

func (t *tx) DeleteSettledBefore(ctx context.Context, before time.Time) (int64, error) {
	n, err := t.exec(ctx, `DELETE FROM reservations WHERE state <> 'live' AND settled_at < $1`, before.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("delete settled reservations: %w", err)
	}
	return n, nil
}

// ---- providers

func (t *tx) Provider(ctx context.Context, name string) (budget.ProviderState, error) {
	var r sqlrow.Provider
	err := t.tx.GetContext(ctx, &r, `SELECT `+sqlrow.ProviderCols+` FROM providers WHERE provider = $1`, name)
	if errors.Is(err, sql.ErrNoRows) {
		return budget.ProviderState{}, fmt.Errorf("provider %q: %w", name, budget.ErrNotFound)
	}
	if err != nil {
		return budget.ProviderState{}, fmt.Errorf("read provider %s: %w", name, err)
	}
	return r.Decode(), nil
}

func (t *tx) Providers(ctx context.Context) ([]budget.ProviderState, error) {
	var rows []sqlrow.Provider
	if err := t.tx.SelectContext(ctx, &rows, `SELECT `+sqlrow.ProviderCols+` FROM providers ORDER BY provider COLLATE "C"`); err != nil {
		return nil, fmt.Errorf("read providers: %w", err)
	}
	out := make([]budget.ProviderState, len(rows))
	for i := range rows {
		out[i] = rows[i].Decode()
	}
	return out, nil
}

func (t *tx) ParkProvider(ctx context.Context, p budget.ProviderState) error {
	_, err := t.exec(ctx, `INSERT INTO providers (`+sqlrow.ProviderCols+`) VALUES ($1, $2, $3, $4, $5, $6, 0)
		ON CONFLICT (provider) DO UPDATE SET kind = excluded.kind, parked_at = excluded.parked_at,
		retry_after = excluded.retry_after, resume_at = excluded.resume_at, affected = excluded.affected`,
		p.Provider, string(p.Kind), ns(p.ParkedAt), int64(p.RetryAfter), ns(p.ResumeAt), strings.Join(p.Affected, "\n"))
	if err != nil {
		return fmt.Errorf("park provider %s: %w", p.Provider, err)
	}
	return nil
}

// ProbeFailed counts the failure with one atomic UPDATE, which keeps the
// row locked until the transaction ends, so the resume-at it then writes is
// computed from this transaction's own count.
func (t *tx) ProbeFailed(ctx context.Context, name string, next func(budget.ProviderState) time.Time) (budget.ProviderState, error) {
	if err := t.write(); err != nil {
		return budget.ProviderState{}, err
	}
	var r sqlrow.Provider
	err := t.tx.GetContext(ctx, &r, `UPDATE providers SET probe_failures = probe_failures + 1, probe_owner = '', probe_until = 0
		WHERE provider = $1 RETURNING `+sqlrow.ProviderCols, name)
	if errors.Is(err, sql.ErrNoRows) {
		return budget.ProviderState{}, fmt.Errorf("provider %q is not parked: %w", name, budget.ErrNotFound)
	}
	if err != nil {
		return budget.ProviderState{}, fmt.Errorf("count probe failure of %s: %w", name, err)
	}
	p := r.Decode()
	p.ResumeAt = next(p)
	if _, err := t.exec(ctx, `UPDATE providers SET resume_at = $1 WHERE provider = $2`, ns(p.ResumeAt), name); err != nil {
		return p, fmt.Errorf("back off provider %s: %w", name, err)
	}
	return p, nil
}

func (t *tx) DeleteProvider(ctx context.Context, name string) (bool, error) {
	n, err := t.exec(ctx, `DELETE FROM providers WHERE provider = $1`, name)
	if err != nil {
		return false, fmt.Errorf("unpark provider %s: %w", name, err)
	}
	return n == 1, nil
}

// ClaimProbe is one conditional UPDATE: a concurrent claimer waits for the
// row, then re-checks the condition against the claim just taken.
func (t *tx) ClaimProbe(ctx context.Context, name, owner string, now, until time.Time) (bool, error) {
	n, err := t.exec(ctx, `UPDATE providers SET probe_owner = $1, probe_until = $2
		WHERE provider = $3 AND resume_at <= $4 AND (probe_owner = '' OR probe_owner = $1 OR probe_until <= $4)`,
		owner, ns(until), name, now.UnixNano())
	if err != nil {
		return false, fmt.Errorf("claim probe of %s: %w", name, err)
	}
	return n == 1, nil
}

// ---- gateway keys

// InsertKey skips a conflicting row instead of failing on it, so the
// transaction stays usable after the refusal.
func (t *tx) InsertKey(ctx context.Context, k budget.GatewayKey) error {
	n, err := t.exec(ctx, `INSERT INTO gateway_keys (name, hash, created_at, revoked_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
		k.Name, k.Hash, ns(k.CreatedAt), ns(k.RevokedAt))
	if err != nil {
		return fmt.Errorf("insert key %s: %w", k.Name, err)
	}
	if n == 0 {
		return budget.Invalid("name", k.Name, "a key with this name exists")
	}
	return nil
}

func (t *tx) KeyByHash(ctx context.Context, hash string) (budget.GatewayKey, error) {
	return sqlrow.KeyByHash(ctx, t.tx, hash)
}

func (t *tx) RotateKey(ctx context.Context, name, hash string, graceUntil time.Time) error {
	if err := t.write(); err != nil {
		return err
	}
	return sqlrow.RotateKey(ctx, t.tx, name, hash, graceUntil)
}

func (t *tx) ReuseKey(ctx context.Context, k budget.GatewayKey) error {
	if err := t.write(); err != nil {
		return err
	}
	return sqlrow.ReuseKey(ctx, t.tx, k)
}

func (t *tx) TouchKey(ctx context.Context, name string, at time.Time) error {
	if err := t.write(); err != nil {
		return err
	}
	return sqlrow.TouchKey(ctx, t.tx, name, at)
}

func (t *tx) Keys(ctx context.Context) ([]budget.GatewayKey, error) {
	var rows []sqlrow.GatewayKey
	if err := t.tx.SelectContext(ctx, &rows, `SELECT `+sqlrow.KeyCols+` FROM gateway_keys ORDER BY name COLLATE "C"`); err != nil {
		return nil, fmt.Errorf("read gateway keys: %w", err)
	}
	out := make([]budget.GatewayKey, len(rows))
	for i, r := range rows {
		out[i] = r.Decode()
	}
	return out, nil
}

func (t *tx) RevokeKey(ctx context.Context, name string, at time.Time) error {
	n, err := t.exec(ctx, `UPDATE gateway_keys SET revoked_at = $1 WHERE name = $2 AND revoked_at = 0`, ns(at), name)
	if err != nil {
		return fmt.Errorf("revoke key %s: %w", name, err)
	}
	if n == 0 {
		var exists int
		if err := t.tx.GetContext(ctx, &exists, `SELECT COUNT(*) FROM gateway_keys WHERE name = $1`, name); err != nil {
			return fmt.Errorf("revoke key %s: %w", name, err)
		}
		if exists == 0 {
			return fmt.Errorf("gateway key %q: %w", name, budget.ErrNotFound)
		}
	}
	return nil
}
