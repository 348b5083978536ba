package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// ---- reservations and holds

func (t *tx) Holds(ctx context.Context, limitID, subject string, start, now time.Time) ([]budget.Hold, error) {
	rows, err := t.query(ctx, qHolds, limitID, subject, ns(start), now.UnixNano())
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
	var r struct {
		Sum   int64 `db:"s"`
		N     int64 `db:"n"`
		First int64 `db:"f"`
	}
	if err := t.get(ctx, &r, qHoldsSummary, limitID, subject, ns(start), now.UnixNano()); err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("sum holds of %s: %w", limitID, err)
	}
	return r.Sum, r.N, fromNs(r.First), nil
}

func (t *tx) InsertReservation(ctx context.Context, r budget.ReservationRow, holds []budget.Hold) error {
	_, err := t.exec(ctx, `INSERT INTO reservations (id, key, provider, model, est_tokens, est_input, est_output, at, expires_at, state, settled_at, on_expiry)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.ID, r.Key, r.Provider, r.Model, r.Estimate.Tokens, r.Estimate.Input,
		r.Estimate.Output, ns(r.At), ns(r.ExpiresAt), string(r.State), ns(r.SettledAt), sqlrow.OnExpiry(r.OnExpiry))
	if err != nil {
		return fmt.Errorf("insert reservation %s: %w", r.ID, err)
	}
	for _, h := range holds {
		if _, err := t.exec(ctx, `INSERT INTO holds (reservation_id, limit_id, subject, window_start, amount, expires_at) VALUES (?, ?, ?, ?, ?, ?)`,
			r.ID, h.LimitID, h.Subject, ns(h.WindowStart), h.Amount, ns(h.ExpiresAt)); err != nil {
			return fmt.Errorf("insert hold of %s on %s: %w", r.ID, h.LimitID, err)
		}
	}
	return nil
}

func (t *tx) Reservation(ctx context.Context, id string) (budget.ReservationRow, error) {
	var r sqlrow.Reservation
	err := t.get(ctx, &r, `SELECT `+sqlrow.ReservationCols+` FROM reservations WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return budget.ReservationRow{}, fmt.Errorf("reservation %q: %w", id, budget.ErrNotFound)
	}
	if err != nil {
		return budget.ReservationRow{}, fmt.Errorf("read reservation %s: %w", id, err)
	}
	return r.Decode(), nil
}

func (t *tx) SettleReservation(ctx context.Context, id string, state budget.ReservationState, at time.Time) ([]budget.Hold, error) {
	n, err := t.exec(ctx, `UPDATE reservations SET state = ?, settled_at = ? WHERE id = ?`, string(state), ns(at), id)
	if err != nil {
		return nil, fmt.Errorf("settle reservation %s: %w", id, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("reservation %q: %w", id, budget.ErrNotFound)
	}
	holds, err := t.ReservationHolds(ctx, id)
	if err != nil {
		return nil, err
	}
	if _, err := t.exec(ctx, `DELETE FROM holds WHERE reservation_id = ?`, id); err != nil {
		return nil, fmt.Errorf("drop holds of %s: %w", id, err)
	}
	return holds, nil
}

func (t *tx) ReservationHolds(ctx context.Context, id string) ([]budget.Hold, error) {
	var rows []struct {
		LimitID string `db:"limit_id"`
		Subject string `db:"subject"`
		Start   int64  `db:"window_start"`
		Amount  int64  `db:"amount"`
		Expires int64  `db:"expires_at"`
	}
	if err := t.sel(ctx, &rows, `SELECT limit_id, subject, window_start, amount, expires_at FROM holds WHERE reservation_id = ? ORDER BY limit_id`, id); err != nil {
		return nil, fmt.Errorf("read holds of %s: %w", id, err)
	}
	holds := make([]budget.Hold, len(rows))
	for i, r := range rows {
		holds[i] = budget.Hold{ReservationID: id, LimitID: r.LimitID, Subject: r.Subject, WindowStart: fromNs(r.Start), Amount: r.Amount, ExpiresAt: fromNs(r.Expires)}
	}
	return holds, nil
}

func (t *tx) RenewReservation(ctx context.Context, id string, expiresAt time.Time) error {
	n, err := t.exec(ctx, `UPDATE reservations SET expires_at = ? WHERE id = ?`, ns(expiresAt), id)
	if err != nil {
		return fmt.Errorf("renew reservation %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("reservation %q: %w", id, budget.ErrNotFound)
	}
	if _, err := t.exec(ctx, `UPDATE holds SET expires_at = ? WHERE reservation_id = ? AND expires_at <> ?`, ns(expiresAt), id, ns(budget.NoExpiry)); err != nil {
		return fmt.Errorf("renew holds of %s: %w", id, err)
	}
	return nil
}

func (t *tx) ExpiredReservations(ctx context.Context, now time.Time, max int) ([]budget.ReservationRow, error) {
	var rows []sqlrow.Reservation
	if err := t.sel(ctx, &rows, `SELECT `+sqlrow.ReservationCols+` FROM reservations
		WHERE state = 'live' AND expires_at <= ? ORDER BY expires_at, id LIMIT ?`, now.UnixNano(), max); err != nil {
		return nil, fmt.Errorf("read expired reservations: %w", err)
	}
	out := make([]budget.ReservationRow, len(rows))
	for i := range rows {
		out[i] = rows[i].Decode()
	}
	return out, nil
}

func (t *tx) DeleteSettledBefore(ctx context.Context, before time.Time) (int64, error) {
	n, err := t.exec(ctx, `DELETE FROM reservations WHERE state <> 'live' AND settled_at < ?`, before.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("delete settled reservations: %w", err)
	}
	return n, nil
}

// ---- providers

func (t *tx) Provider(ctx context.Context, name string) (budget.ProviderState, error) {
	var r sqlrow.Provider
	err := t.get(ctx, &r, `SELECT `+sqlrow.ProviderCols+` FROM providers WHERE provider = ?`, name)
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
	if err := t.sel(ctx, &rows, `SELECT `+sqlrow.ProviderCols+` FROM providers ORDER BY provider`); err != nil {
		return nil, fmt.Errorf("read providers: %w", err)
	}
	out := make([]budget.ProviderState, len(rows))
	for i := range rows {
		out[i] = rows[i].Decode()
	}
	return out, nil
}

func (t *tx) ParkProvider(ctx context.Context, p budget.ProviderState) error {
	_, err := t.exec(ctx, `INSERT INTO providers (`+sqlrow.ProviderCols+`) VALUES (?, ?, ?, ?, ?, ?, 0)
		ON CONFLICT (provider) DO UPDATE SET kind = excluded.kind, parked_at = excluded.parked_at,
		retry_after = excluded.retry_after, resume_at = excluded.resume_at, affected = excluded.affected`,
		p.Provider, string(p.Kind), ns(p.ParkedAt), int64(p.RetryAfter), ns(p.ResumeAt), strings.Join(p.Affected, "\n"))
	if err != nil {
		return fmt.Errorf("park provider %s: %w", p.Provider, err)
	}
	return nil
}

func (t *tx) ProbeFailed(ctx context.Context, name string, next func(budget.ProviderState) time.Time) (budget.ProviderState, error) {
	n, err := t.exec(ctx, `UPDATE providers SET probe_failures = probe_failures + 1, probe_owner = '', probe_until = 0 WHERE provider = ?`, name)
	if err != nil {
		return budget.ProviderState{}, fmt.Errorf("count probe failure of %s: %w", name, err)
	}
	if n == 0 {
		return budget.ProviderState{}, fmt.Errorf("provider %q is not parked: %w", name, budget.ErrNotFound)
	}
	p, err := t.Provider(ctx, name)
	if err != nil {
		return p, err
	}
	p.ResumeAt = next(p)
	if _, err := t.exec(ctx, `UPDATE providers SET resume_at = ? WHERE provider = ?`, ns(p.ResumeAt), name); err != nil {
		return p, fmt.Errorf("back off provider %s: %w", name, err)
	}
	return p, nil
}

func (t *tx) DeleteProvider(ctx context.Context, name string) (bool, error) {
	n, err := t.exec(ctx, `DELETE FROM providers WHERE provider = ?`, name)
	if err != nil {
		return false, fmt.Errorf("unpark provider %s: %w", name, err)
	}
	return n == 1, nil
}

func (t *tx) ClaimProbe(ctx context.Context, name, owner string, now, until time.Time) (bool, error) {
	n, err := t.exec(ctx, `UPDATE providers SET probe_owner = ?, probe_until = ?
		WHERE provider = ? AND resume_at <= ? AND (probe_owner = '' OR probe_owner = ? OR probe_until <= ?)`,
		owner, ns(until), name, now.UnixNano(), owner, now.UnixNano())
	if err != nil {
		return false, fmt.Errorf("claim probe of %s: %w", name, err)
	}
	return n == 1, nil
}

// ---- gateway keys

func (t *tx) InsertKey(ctx context.Context, k budget.GatewayKey) error {
	_, err := t.exec(ctx, `INSERT INTO gateway_keys (name, hash, created_at, revoked_at) VALUES (?, ?, ?, ?)`,
		k.Name, k.Hash, ns(k.CreatedAt), ns(k.RevokedAt))
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE") {
			return budget.Invalid("name", k.Name, "a key with this name exists")
		}
		return fmt.Errorf("insert key %s: %w", k.Name, err)
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
	if err := t.sel(ctx, &rows, `SELECT `+sqlrow.KeyCols+` FROM gateway_keys ORDER BY name`); err != nil {
		return nil, fmt.Errorf("read gateway keys: %w", err)
	}
	out := make([]budget.GatewayKey, len(rows))
	for i, r := range rows {
		out[i] = r.Decode()
	}
	return out, nil
}

func (t *tx) RevokeKey(ctx context.Context, name string, at time.Time) error {
	n, err := t.exec(ctx, `UPDATE gateway_keys SET revoked_at = ? WHERE name = ? AND revoked_at = 0`, ns(at), name)
	if err != nil {
		return fmt.Errorf("revoke key %s: %w", name, err)
	}
	if n == 0 {
		var exists int
		if err := t.get(ctx, &exists, `SELECT COUNT(*) FROM gateway_keys WHERE name = ?`, name); err != nil {
			return fmt.Errorf("revoke key %s: %w", name, err)
		}
		if exists == 0 {
			return fmt.Errorf("gateway key %q: %w", name, budget.ErrNotFound)
		}
	}
	return nil
}
