package sqlq

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// Reservations, counters and their logs: the reads and the writes of Apply
// whose SQL both stores share.

const (
	rolloverSelect = `SELECT r.limit_id, r.subject, r.window_start, r.prev_window_start, r.prev_used, r.logged_at FROM rollovers r`
	rolloverOrder  = ` ORDER BY r.logged_at DESC, r.window_start DESC, r.limit_id COLLATE "C" LIMIT ?`
	// Its own limits', and the defaults' counters for it (per user too:
	// key, budget.SubjectSep, user); the subject's prefix is spelled per
	// dialect.
	keyRollovers = ` JOIN limits l ON l.id = r.limit_id WHERE l.key = ? OR l.key = '' AND l.team = '' AND l.org = '' AND `
)

var (
	qExpiredReservations = New(`SELECT ` + sqlrow.ReservationCols + ` FROM reservations
		WHERE state = 'live' AND expires_at <= ? ORDER BY expires_at, id COLLATE "C" LIMIT ?`)
	qOpenReservationsBefore = New(`SELECT ` + sqlrow.ReservationCols + ` FROM reservations
		WHERE at < ? AND (state = 'live' OR state = 'expired' AND settled_at >= ?) ORDER BY id COLLATE "C" LIMIT ?`)

	qRenewReservation = New(`UPDATE reservations SET expires_at = ?, holds = ? WHERE id = ? AND state = 'live'`)
	qRenewHold        = New(`UPDATE holds SET expires_at = ?, amount = ? WHERE limit_id = ? AND subject = ? AND window_start = ? AND reservation_id = ?`)
	qDeleteSettled    = New(`DELETE FROM reservations WHERE state <> 'live' AND settled_at < ? AND (state <> 'expired' OR settled_at < ?)`)

	qCounterRows = New(`SELECT limit_id, subject, window_start, window_end, used FROM counters
		ORDER BY limit_id COLLATE "C", subject COLLATE "C", window_start`)
	qSubjects = New(`SELECT subject FROM (SELECT subject FROM counters WHERE limit_id = ? AND window_start = ?
		UNION SELECT subject FROM holds WHERE limit_id = ? AND window_start = ?) s ORDER BY subject COLLATE "C"`)

	qRollovers    = New(rolloverSelect + rolloverOrder)
	qKeyRollovers = Each(
		rolloverSelect+keyRollovers+`(r.subject = ? OR instr(r.subject, ?) = 1)`+rolloverOrder,
		rolloverSelect+keyRollovers+`(r.subject = ? OR starts_with(r.subject, ?))`+rolloverOrder)
)

func (t Tx) ExpiredReservations(ctx context.Context, now time.Time, max int) ([]budget.ReservationRow, error) {
	out, err := t.reservations(ctx, &qExpiredReservations, now.UnixNano(), max)
	if err != nil {
		return nil, fmt.Errorf("read expired reservations: %w", err)
	}
	return out, nil
}

func (t Tx) OpenReservationsBefore(ctx context.Context, before, committable time.Time, max int) ([]budget.ReservationRow, error) {
	out, err := t.reservations(ctx, &qOpenReservationsBefore, before.UnixNano(), committable.UnixNano(), max)
	if err != nil {
		return nil, fmt.Errorf("read open reservations: %w", err)
	}
	return out, nil
}

func (t Tx) reservations(ctx context.Context, q *Query, args ...any) ([]budget.ReservationRow, error) {
	var rows []sqlrow.Reservation
	if err := t.sel(ctx, &rows, q, args...); err != nil {
		return nil, err
	}
	out := make([]budget.ReservationRow, len(rows))
	for i := range rows {
		out[i] = rows[i].Decode()
	}
	return out, nil
}

// Renew moves the renewed reservations' expiries and their holds' (a hold
// that never expires stays), and sets those holds' amounts (a lease's
// resize), refusing (ErrConflict) one no longer live.
func (t Tx) Renew(ctx context.Context, rs []budget.Renewal) error {
	for _, r := range rs {
		n, err := t.exec(ctx, &qRenewReservation, sqlrow.Ns(r.ExpiresAt), sqlrow.EncodeHolds(r.Holds), r.ID)
		if err != nil {
			return fmt.Errorf("renew reservation %s: %w", r.ID, err)
		}
		if n != 1 {
			return fmt.Errorf("%w: renew reservation %s: it is no longer live", budget.ErrConflict, r.ID)
		}
		for _, h := range r.Holds {
			if h.ExpiresAt.Equal(budget.Forever) {
				continue
			}
			if _, err := t.exec(ctx, &qRenewHold, sqlrow.Ns(r.ExpiresAt), h.Amount, h.LimitID, h.Subject, sqlrow.Ns(h.WindowStart), r.ID); err != nil {
				return fmt.Errorf("renew holds of %s: %w", r.ID, err)
			}
		}
	}
	return nil
}

// DeleteSettled deletes the reservations w's retention lets go, and says
// how many.
func (t Tx) DeleteSettled(ctx context.Context, w *budget.WriteSet) (int64, error) {
	if w.DeleteSettledBefore.IsZero() {
		return 0, nil
	}
	n, err := t.exec(ctx, &qDeleteSettled, w.DeleteSettledBefore.UnixNano(), w.ExpiredBefore().UnixNano())
	if err != nil {
		return 0, fmt.Errorf("delete settled reservations: %w", err)
	}
	return n, nil
}

func (t Tx) CounterRows(ctx context.Context) ([]budget.CounterRow, error) {
	var rows []struct {
		LimitID string `db:"limit_id"`
		Subject string `db:"subject"`
		Start   int64  `db:"window_start"`
		End     int64  `db:"window_end"`
		Used    int64  `db:"used"`
	}
	if err := t.sel(ctx, &rows, &qCounterRows); err != nil {
		return nil, fmt.Errorf("read counters: %w", err)
	}
	out := make([]budget.CounterRow, len(rows))
	for i, r := range rows {
		out[i] = budget.CounterRow{LimitID: r.LimitID, Subject: r.Subject, WindowStart: time.Unix(0, r.Start).UTC(), WindowEnd: time.Unix(0, r.End).UTC(), Used: r.Used}
	}
	return out, nil
}

func (t Tx) Subjects(ctx context.Context, id string, start time.Time) ([]string, error) {
	var out []string
	if err := t.sel(ctx, &out, &qSubjects, id, sqlrow.Ns(start), id, sqlrow.Ns(start)); err != nil {
		return nil, fmt.Errorf("read subjects of limit %s: %w", id, err)
	}
	return out, nil
}

func (t Tx) Rollovers(ctx context.Context, key string, n int) ([]budget.Rollover, error) {
	var rows []struct {
		LimitID   string `db:"limit_id"`
		Subject   string `db:"subject"`
		Start     int64  `db:"window_start"`
		PrevStart int64  `db:"prev_window_start"`
		PrevUsed  int64  `db:"prev_used"`
		LoggedAt  int64  `db:"logged_at"`
	}
	var err error
	if key == "" {
		err = t.sel(ctx, &rows, &qRollovers, n)
	} else {
		err = t.sel(ctx, &rows, &qKeyRollovers, key, key, key+budget.SubjectSep, n)
	}
	if err != nil {
		return nil, fmt.Errorf("read rollovers: %w", err)
	}
	out := make([]budget.Rollover, len(rows))
	for i, r := range rows {
		out[i] = budget.Rollover{LimitID: r.LimitID, Subject: r.Subject, WindowStart: time.Unix(0, r.Start).UTC(),
			PrevWindowStart: time.Unix(0, r.PrevStart).UTC(), PrevUsed: r.PrevUsed, LoggedAt: sqlrow.FromNs(r.LoggedAt)}
	}
	return out, nil
}
