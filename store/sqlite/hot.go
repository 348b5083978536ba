package sqlite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// The hot path: set-shaped reads and one Apply per writer batch. Every
// statement here takes a whole set (chunks of up to chunk rows), so a batch
// costs a handful of statements however many operations it holds.

// Mark is PRAGMA data_version (it moves when another connection commits,
// in any process) and this handle's count of committed write transactions
// (every in-process write shares the one writer connection, which
// data_version does not count).
func (t *tx) Mark(ctx context.Context) (budget.Mark, error) {
	var v int64
	if err := t.get(ctx, &v, `PRAGMA data_version`); err != nil {
		return budget.Mark{}, fmt.Errorf("read data version: %w", err)
	}
	return budget.Mark{External: uint64(v), Local: t.db.commits.Load()}, nil
}

// LockReservations and LockLimits: BEGIN IMMEDIATE already serialises every
// write transaction on the file, across processes.
func (t *tx) LockReservations(context.Context, []string) error { return t.write() }
func (t *tx) LockLimits(context.Context, []string) error       { return t.write() }

// holdKeys matches n holds by their whole primary key, as an OR of
// equalities: SQLite searches the key once per hold, where a row-value IN
// over VALUES would scan the table.
func holdKeys(n int) string {
	return strings.TrimSuffix(strings.Repeat("(limit_id = ? AND subject = ? AND window_start = ? AND reservation_id = ?) OR ", n), " OR ")
}

// inList is "(?, ?, ...)" with n placeholders.
func inList(n int) string {
	return "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
}

const (
	qWindowCountersN = `WITH v(i, lid, sub, ws) AS (VALUES %s)
		SELECT v.i, c.used FROM v JOIN counters c ON c.limit_id = v.lid AND c.subject = v.sub AND c.window_start = v.ws`
	qWindowHoldsN = `WITH v(i, lid, sub, ws) AS (VALUES %s)
		SELECT v.i, h.reservation_id, h.amount, h.expires_at FROM v
		JOIN holds h ON h.limit_id = v.lid AND h.subject = v.sub AND h.window_start = v.ws
		WHERE h.expires_at > ?`
)

func (t *tx) Windows(ctx context.Context, refs []budget.WindowRef, now time.Time) ([]budget.WindowState, error) {
	out := make([]budget.WindowState, len(refs))
	for lo := 0; lo < len(refs); lo += chunk {
		part := refs[lo:min(lo+chunk, len(refs))]
		args := make([]any, 0, 4*len(part)+1)
		for i, r := range part {
			args = append(args, lo+i, r.Limit.ID, r.Limit.Subject, ns(r.Start))
		}
		if err := t.scan(ctx, multiRow(qWindowCountersN, 4, len(part)), args, func(s scanner) error {
			var i int
			var used int64
			if err := s.Scan(&i, &used); err != nil {
				return err
			}
			out[i].Used, out[i].Stored = used, true
			return nil
		}); err != nil {
			return nil, fmt.Errorf("read counters: %w", err)
		}
		args = append(args, now.UnixNano())
		if err := t.scan(ctx, multiRow(qWindowHoldsN, 4, len(part)), args, func(s scanner) error {
			var i int
			var h budget.Hold
			var exp int64
			if err := s.Scan(&i, &h.ReservationID, &h.Amount, &exp); err != nil {
				return err
			}
			r := refs[i]
			h.LimitID, h.Subject, h.WindowStart, h.ExpiresAt = r.Limit.ID, r.Limit.Subject, r.Start, fromNs(exp)
			out[i].Holds = append(out[i].Holds, h)
			return nil
		}); err != nil {
			return nil, fmt.Errorf("read holds: %w", err)
		}
	}
	err := sqlrow.CompleteWindows(refs, out, func(ss []sqlrow.Sum) ([]int64, error) { return t.sums(ctx, ss) },
		func(refs []budget.WindowRef) ([]sqlrow.Before, error) { return t.befores(ctx, refs) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// scanner is the part of a result row a scan callback needs.
type scanner = sqlrow.Scanner

// scan runs q and calls row for each result row.
func (t *tx) scan(ctx context.Context, q string, args []any, row func(scanner) error) error {
	rows, err := t.query(ctx, q, args...)
	return sqlrow.EachRow(rows, err, row)
}

func (t *tx) Reservations(ctx context.Context, ids []string) ([]budget.ReservationRow, error) {
	var out []budget.ReservationRow
	for lo := 0; lo < len(ids); lo += chunk {
		part := ids[lo:min(lo+chunk, len(ids))]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		var rows []sqlrow.Reservation
		if err := t.sel(ctx, &rows, `SELECT `+sqlrow.ReservationCols+` FROM reservations WHERE id IN `+inList(len(part)), args...); err != nil {
			return nil, fmt.Errorf("read reservations: %w", err)
		}
		for i := range rows {
			out = append(out, rows[i].Decode())
		}
	}
	return out, nil
}

const (
	qInsertReservationsN = `INSERT INTO reservations (id, key, team, org, end_user, provider, model, est_tokens, est_input, est_output, at, expires_at, state, settled_at, on_expiry, holds, tags)
		VALUES %s`
	qInsertHoldsN = `INSERT INTO holds (limit_id, subject, window_start, reservation_id, amount, expires_at) VALUES %s`

	qInsertRollovers = `INSERT INTO rollovers (limit_id, subject, window_start, prev_window_start, prev_used, logged_at)
		VALUES %s ON CONFLICT DO NOTHING`
)

func (t *tx) Apply(ctx context.Context, w *budget.WriteSet) ([]bool, int64, error) {
	if err := t.write(); err != nil {
		return nil, 0, err
	}
	inserted, err := t.insertUsage(ctx, w.Events, w.Retry)
	if err != nil {
		return nil, 0, err
	}
	if err := t.addRollups(ctx, w.Rollups(inserted)); err != nil {
		return nil, 0, err
	}
	if err := t.applyCounters(ctx, w, inserted); err != nil {
		return nil, 0, err
	}
	if err := t.insertRows(ctx, qInsertRollovers, 6, len(w.Rollovers), func(i int, a []any) []any {
		r := &w.Rollovers[i]
		return append(a, r.LimitID, r.Subject, ns(r.WindowStart), ns(r.PrevWindowStart), r.PrevUsed, ns(r.LoggedAt))
	}); err != nil {
		return nil, 0, fmt.Errorf("log rollovers: %w", err)
	}
	if err := t.insertReservations(ctx, w.NewReservations); err != nil {
		return nil, 0, err
	}
	if err := t.settle(ctx, w.Settles); err != nil {
		return nil, 0, err
	}
	if err := t.Renew(ctx, w.Renewals); err != nil {
		return nil, 0, err
	}
	deleted, err := t.DeleteSettled(ctx, w)
	if err != nil {
		return nil, 0, err
	}
	return inserted, deleted, nil
}

// insertRows inserts n rows through the multi-row statement q (cols
// columns), chunk rows per statement; row appends row i's values.
func (t *tx) insertRows(ctx context.Context, q string, cols, n int, row func(i int, args []any) []any) error {
	// One slice for every chunk: a statement is done with its arguments
	// once it returns.
	args := make([]any, 0, cols*min(chunk, n))
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		args = args[:0]
		for i := lo; i < hi; i++ {
			args = row(i, args)
		}
		if _, err := t.exec(ctx, multiRow(q, cols, hi-lo), args...); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) insertReservations(ctx context.Context, rs []budget.ReservationRow) error {
	if err := t.insertRows(ctx, qInsertReservationsN, 17, len(rs), func(i int, a []any) []any {
		r := &rs[i]
		return append(a, r.ID, r.Key, r.Team, r.Org, r.User, r.Provider, r.Model, r.Estimate.Tokens, r.Estimate.Input, r.Estimate.Output,
			ns(r.At), ns(r.ExpiresAt), string(r.State), ns(r.SettledAt), sqlrow.OnExpiry(r.OnExpiry), sqlrow.EncodeHolds(r.Holds), string(r.Tags))
	}); err != nil {
		return fmt.Errorf("insert reservations: %w", err)
	}
	var holds []budget.Hold
	for i := range rs {
		holds = append(holds, rs[i].Holds...)
	}
	if err := t.insertRows(ctx, qInsertHoldsN, 6, len(holds), func(i int, a []any) []any {
		h := &holds[i]
		return append(a, h.LimitID, h.Subject, ns(h.WindowStart), h.ReservationID, h.Amount, ns(h.ExpiresAt))
	}); err != nil {
		return fmt.Errorf("insert holds: %w", err)
	}
	return nil
}

// settle sets the reservations' states, refusing (ErrConflict) one that is
// already committed or released, and drops their holds.
func (t *tx) settle(ctx context.Context, ss []budget.Settle) error {
	var holds []budget.Hold
	for lo := 0; lo < len(ss); {
		// One statement per run of equal state and instant (a batch's
		// settlements share its instant).
		hi := lo + 1
		for hi < len(ss) && hi-lo < chunk && ss[hi].State == ss[lo].State && ss[hi].At.Equal(ss[lo].At) {
			hi++
		}
		args := []any{string(ss[lo].State), ns(ss[lo].At)}
		for i := lo; i < hi; i++ {
			args = append(args, ss[i].ID)
			holds = append(holds, ss[i].Holds...)
		}
		from := `('live', 'expired')`
		if ss[lo].State == budget.ReservationExpired {
			from = `('live')`
		}
		n, err := t.exec(ctx, `UPDATE reservations SET state = ?, settled_at = ?, holds = '' WHERE state IN `+from+` AND id IN `+inList(hi-lo), args...)
		if err != nil {
			return fmt.Errorf("settle reservations: %w", err)
		}
		if n != int64(hi-lo) {
			return fmt.Errorf("%w: settle reservations: %d of %d were no longer unsettled", budget.ErrConflict, int64(hi-lo)-n, hi-lo)
		}
		lo = hi
	}
	for lo := 0; lo < len(holds); lo += chunk {
		part := holds[lo:min(lo+chunk, len(holds))]
		args := make([]any, 0, 4*len(part))
		for _, h := range part {
			args = append(args, h.LimitID, h.Subject, ns(h.WindowStart), h.ReservationID)
		}
		if _, err := t.exec(ctx, `DELETE FROM holds WHERE `+holdKeys(len(part)), args...); err != nil {
			return fmt.Errorf("drop holds: %w", err)
		}
	}
	return nil
}

// applyCounters creates the counters w creates, then adds to the others
// (and to any it found created already) what their inserted events
// contribute.
func (t *tx) applyCounters(ctx context.Context, w *budget.WriteSet, inserted []bool) error {
	return sqlrow.ApplyCounters(w, inserted, func(cs []*budget.CounterWrite) ([]bool, error) { return t.createCounters(ctx, cs) },
		func(cs []*budget.CounterWrite, ds []int64, ifStored bool) error {
			if ifStored {
				var err error
				if cs, ds, err = t.storedCounters(ctx, cs, ds); err != nil {
					return err
				}
			}
			args := make([]any, 0, 4*min(chunk, len(cs))) // every chunk's (see insertRows)
			for lo := 0; lo < len(cs); lo += chunk {
				hi := min(lo+chunk, len(cs))
				args = args[:0]
				for i := lo; i < hi; i++ {
					r := &cs[i].Ref
					args = append(args, r.Limit.ID, r.Limit.Subject, ns(r.Start), ds[i])
				}
				n, err := t.db.exec(ctx, t.tx, multiRow(qAddCountersN, 4, hi-lo), args...)
				if err != nil {
					return fmt.Errorf("add to counters: %w", err)
				}
				if n != int64(hi-lo) && !ifStored {
					return fmt.Errorf("%w: add to counters: %d of %d rows are gone", budget.ErrConflict, int64(hi-lo)-n, hi-lo)
				}
			}
			return nil
		})
}

// qStoredCountersN reads which counter rows exist per (limit, subject)
// between two window starts, both included.
const qStoredCountersN = `WITH v(lid, sub, lo, hi) AS (VALUES %s)
	SELECT c.limit_id, c.subject, c.window_start FROM v
	JOIN counters c ON c.limit_id = v.lid AND c.subject = v.sub AND c.window_start >= v.lo AND c.window_start <= v.hi`

// storedCounters keeps of cs (and their deltas ds) the counters whose row
// exists. An import's ended windows (IfStored) are thousands a batch,
// nearly all without a row: one read per 64 (limit, subject) pairs of the
// range their windows span costs less than an UPDATE per window that
// finds nothing.
func (t *tx) storedCounters(ctx context.Context, cs []*budget.CounterWrite, ds []int64) ([]*budget.CounterWrite, []int64, error) {
	type pair struct{ lid, sub string }
	type span struct{ lo, hi int64 }
	spans := make(map[pair]span)
	var pairs []pair
	for _, c := range cs {
		p, ws := pair{c.Ref.Limit.ID, c.Ref.Limit.Subject}, ns(c.Ref.Start)
		s, ok := spans[p]
		if !ok {
			pairs = append(pairs, p)
			s = span{ws, ws}
		}
		spans[p] = span{min(s.lo, ws), max(s.hi, ws)}
	}
	type row struct {
		pair
		ws int64
	}
	stored := make(map[row]bool)
	for lo := 0; lo < len(pairs); lo += chunk {
		part := pairs[lo:min(lo+chunk, len(pairs))]
		args := make([]any, 0, 4*len(part))
		for _, p := range part {
			args = append(args, p.lid, p.sub, spans[p].lo, spans[p].hi)
		}
		err := t.scan(ctx, multiRow(qStoredCountersN, 4, len(part)), args, func(s scanner) error {
			var r row
			if err := s.Scan(&r.lid, &r.sub, &r.ws); err != nil {
				return err
			}
			stored[r] = true
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("read stored counters: %w", err)
		}
	}
	if len(stored) == 0 {
		return nil, nil, nil
	}
	var keep []*budget.CounterWrite
	var keepDs []int64
	for i, c := range cs {
		if stored[row{pair{c.Ref.Limit.ID, c.Ref.Limit.Subject}, ns(c.Ref.Start)}] {
			keep, keepDs = append(keep, c), append(keepDs, ds[i])
		}
	}
	return keep, keepDs, nil
}
