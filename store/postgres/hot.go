package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// The hot path: set-shaped reads and one Apply per writer batch, each a
// statement over arrays (unnest), so a batch costs a few round trips
// however many operations it holds.
//
// Locks. A write transaction that decides on counters and holds locks the
// reservations it settles or renews (FOR NO KEY UPDATE, ascending), then
// the limits whose windows it reads or writes (FOR NO KEY UPDATE,
// ascending), each once, before it reads them. Every such transaction
// takes its locks in that one order, so they cannot deadlock; and because
// every writer of a limit's counters and holds holds its limit lock, the
// separate statements that read a window's counter and its holds see one
// state, though READ COMMITTED gives each statement its own snapshot.
// Counter rows are updated in (limit, subject, window) order (the writer
// sorts them), under their limits' locks, so they never contend. Deleting a
// limit takes its row lock exclusively, waiting for all of the above.

// marks makes every PostgreSQL mark unique: other replicas' writes are
// invisible to a handle, so the writer must read what it decides on in
// every transaction.
var marks atomic.Uint64

func (t *tx) Mark(context.Context) (budget.Mark, error) {
	return budget.Mark{External: marks.Add(1) << 1}, nil
}

func (t *tx) LockReservations(ctx context.Context, ids []string) error {
	return t.lock(ctx, `SELECT id FROM reservations WHERE id = ANY($1) ORDER BY id COLLATE "C" FOR NO KEY UPDATE`, ids, "reservations")
}

func (t *tx) LockLimits(ctx context.Context, ids []string) error {
	return t.lock(ctx, `SELECT id FROM limits WHERE id = ANY($1) ORDER BY id COLLATE "C" FOR NO KEY UPDATE`, ids, "limits")
}

func (t *tx) lock(ctx context.Context, q string, ids []string, what string) error {
	if err := t.write(); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := t.tx.ExecContext(ctx, q, ids); err != nil {
		return fmt.Errorf("lock %s: %w", what, err)
	}
	return nil
}

func (t *tx) Windows(ctx context.Context, refs []budget.WindowRef, now time.Time) ([]budget.WindowState, error) {
	out := make([]budget.WindowState, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	idx, ids, subs, starts := make([]int64, len(refs)), make([]string, len(refs)), make([]string, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		idx[i], ids[i], subs[i], starts[i] = int64(i), r.Limit.ID, r.Limit.Subject, ns(r.Start)
	}
	// Counters and holds in one round trip: a row per counter (kind 0)
	// and per live hold (kind 1).
	rows, err := t.tx.QueryContext(ctx, `WITH v AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS v(i, lid, sub, ws))
		SELECT 0, v.i, c.used, '', 0::bigint FROM v JOIN counters c ON c.limit_id = v.lid AND c.subject = v.sub AND c.window_start = v.ws
		UNION ALL
		SELECT 1, v.i, h.amount, h.reservation_id, h.expires_at FROM v
		JOIN holds h ON h.limit_id = v.lid AND h.subject = v.sub AND h.window_start = v.ws AND h.expires_at > $5`,
		idx, ids, subs, starts, now.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("read counters and holds: %w", err)
	}
	for rows.Next() {
		var kind int
		var i, n, exp int64
		var rid string
		if err := rows.Scan(&kind, &i, &n, &rid, &exp); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read counters and holds: %w", err)
		}
		if kind == 0 {
			out[i].Used, out[i].Stored = n, true
			continue
		}
		r := refs[i]
		out[i].Holds = append(out[i].Holds, budget.Hold{ReservationID: rid, LimitID: r.Limit.ID, Subject: r.Limit.Subject,
			WindowStart: r.Start, Amount: n, ExpiresAt: fromNs(exp)})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read counters and holds: %w", err)
	}
	err = sqlrow.CompleteWindows(refs, out, func(ss []sqlrow.Sum) ([]int64, error) { return t.sums(ctx, ss) },
		func(refs []budget.WindowRef) ([]sqlrow.Before, error) { return t.befores(ctx, refs) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// befores reads sqlrow.CompleteWindows' Before of each ref, in one round
// trip.
func (t *tx) befores(ctx context.Context, refs []budget.WindowRef) ([]sqlrow.Before, error) {
	idx, ids, subs, prevs := make([]int64, len(refs)), make([]string, len(refs)), make([]string, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		idx[i], ids[i], subs[i], prevs[i] = int64(i), r.Limit.ID, r.Limit.Subject, ns(r.PrevStart)
	}
	out := make([]sqlrow.Before, len(refs))
	err := t.each(ctx, `SELECT v.i, (SELECT MAX(window_start) FROM counters c WHERE c.limit_id = v.lid AND c.subject = v.sub),
		(SELECT used FROM counters c WHERE c.limit_id = v.lid AND c.subject = v.sub AND c.window_start = v.ps)
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS v(i, lid, sub, ps)`, []any{idx, ids, subs, prevs}, func(s scanner) error {
		var i int64
		var b sqlrow.Before
		if err := s.Scan(&i, &b.Latest, &b.Prev); err != nil {
			return err
		}
		out[i] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read counters before windows: %w", err)
	}
	return out, nil
}

func (t *tx) Reservations(ctx context.Context, ids []string) ([]budget.ReservationRow, error) {
	var rows []sqlrow.Reservation
	if err := t.tx.SelectContext(ctx, &rows, `SELECT `+sqlrow.ReservationCols+` FROM reservations WHERE id = ANY($1)`, ids); err != nil {
		return nil, fmt.Errorf("read reservations: %w", err)
	}
	out := make([]budget.ReservationRow, len(rows))
	for i := range rows {
		out[i] = rows[i].Decode()
	}
	return out, nil
}

func (t *tx) Apply(ctx context.Context, w *budget.WriteSet) ([]bool, int64, error) {
	if err := t.write(); err != nil {
		return nil, 0, err
	}
	inserted, err := t.insertUsage(ctx, w.Events)
	if err != nil {
		return nil, 0, err
	}
	if err := t.addRollups(ctx, w.Rollups(inserted)); err != nil {
		return nil, 0, err
	}
	if err := t.applyCounters(ctx, w, inserted); err != nil {
		return nil, 0, err
	}
	if n := len(w.Rollovers); n > 0 {
		lids, subs, starts, prevs, used, logged := make([]string, n), make([]string, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		for i, r := range w.Rollovers {
			lids[i], subs[i], starts[i], prevs[i], used[i], logged[i] = r.LimitID, r.Subject, ns(r.WindowStart), ns(r.PrevWindowStart), r.PrevUsed, ns(r.LoggedAt)
		}
		if _, err := t.tx.ExecContext(ctx, `INSERT INTO rollovers (limit_id, subject, window_start, prev_window_start, prev_used, logged_at)
			SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[]) ON CONFLICT DO NOTHING`,
			lids, subs, starts, prevs, used, logged); err != nil {
			return nil, 0, fmt.Errorf("log rollovers: %w", err)
		}
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

func (t *tx) insertReservations(ctx context.Context, rs []budget.ReservationRow) error {
	n := len(rs)
	if n == 0 {
		return nil
	}
	ids, keys, provs, models, states, pols, copies := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	teams, orgs, users, tags := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	tok, in, out, at, exp, settled := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	var hr, hl, hs []string
	var hw, ha, he []int64
	for i := range rs {
		r := &rs[i]
		ids[i], keys[i], provs[i], models[i], states[i], pols[i] = r.ID, r.Key, r.Provider, r.Model, string(r.State), sqlrow.OnExpiry(r.OnExpiry)
		teams[i], orgs[i], users[i], tags[i] = r.Team, r.Org, r.User, string(r.Tags)
		tok[i], in[i], out[i], at[i], exp[i], settled[i] = r.Estimate.Tokens, r.Estimate.Input, r.Estimate.Output, ns(r.At), ns(r.ExpiresAt), ns(r.SettledAt)
		copies[i] = sqlrow.EncodeHolds(r.Holds)
		for _, h := range r.Holds {
			hr, hl, hs = append(hr, r.ID), append(hl, h.LimitID), append(hs, h.Subject)
			hw, ha, he = append(hw, ns(h.WindowStart)), append(ha, h.Amount), append(he, ns(h.ExpiresAt))
		}
	}
	if _, err := t.tx.ExecContext(ctx, `INSERT INTO reservations (`+sqlrow.ReservationCols+`)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::bigint[], $10::bigint[],
			$11::bigint[], $12::bigint[], $13::text[], $14::bigint[], $15::text[], $16::text[], $17::text[])`,
		ids, keys, teams, orgs, users, provs, models, tok, in, out, at, exp, states, settled, pols, copies, tags); err != nil {
		return fmt.Errorf("insert reservations: %w", err)
	}
	if len(hr) == 0 {
		return nil
	}
	if _, err := t.tx.ExecContext(ctx, `INSERT INTO holds (reservation_id, limit_id, subject, window_start, amount, expires_at)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[]) AS v(rid, lid, sub, ws, amt, exp)
		ORDER BY lid COLLATE "C", sub COLLATE "C", ws, rid COLLATE "C"`, hr, hl, hs, hw, ha, he); err != nil {
		return fmt.Errorf("insert holds: %w", err)
	}
	return nil
}

// settle sets the reservations' states, refusing (ErrConflict) one that is
// already committed or released, and drops their holds.
func (t *tx) settle(ctx context.Context, ss []budget.Settle) error {
	if len(ss) == 0 {
		return nil
	}
	ids, states, ats := make([]string, len(ss)), make([]string, len(ss)), make([]int64, len(ss))
	for i, s := range ss {
		ids[i], states[i], ats[i] = s.ID, string(s.State), ns(s.At)
	}
	n, err := t.exec(ctx, `UPDATE reservations r SET state = v.state, settled_at = v.at, holds = ''
		FROM unnest($1::text[], $2::text[], $3::bigint[]) AS v(id, state, at)
		WHERE r.id = v.id AND (r.state = 'live' OR r.state = 'expired' AND v.state <> 'expired')`, ids, states, ats)
	if err != nil {
		return fmt.Errorf("settle reservations: %w", err)
	}
	if n != int64(len(ss)) {
		return fmt.Errorf("%w: settle reservations: %d of %d were no longer unsettled", budget.ErrConflict, int64(len(ss))-n, len(ss))
	}
	var hl, hs, hr []string
	var hw []int64
	for _, st := range ss {
		for _, h := range st.Holds {
			hl, hs, hw, hr = append(hl, h.LimitID), append(hs, h.Subject), append(hw, ns(h.WindowStart)), append(hr, h.ReservationID)
		}
	}
	if _, err := t.exec(ctx, `DELETE FROM holds h USING unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS v(lid, sub, ws, rid)
		WHERE h.limit_id = v.lid AND h.subject = v.sub AND h.window_start = v.ws AND h.reservation_id = v.rid`, hl, hs, hw, hr); err != nil {
		return fmt.Errorf("drop holds: %w", err)
	}
	return nil
}

// applyCounters creates the counters w creates, then adds to the others
// (and to any it found created already) what their inserted events
// contribute, in w's order.
func (t *tx) applyCounters(ctx context.Context, w *budget.WriteSet, inserted []bool) error {
	return sqlrow.ApplyCounters(w, inserted, func(cs []*budget.CounterWrite) ([]bool, error) { return t.createCounters(ctx, cs) },
		func(cs []*budget.CounterWrite, ds []int64, ifStored bool) error {
			ids, subs, starts := make([]string, len(cs)), make([]string, len(cs)), make([]int64, len(cs))
			for i, c := range cs {
				ids[i], subs[i], starts[i] = c.Ref.Limit.ID, c.Ref.Limit.Subject, ns(c.Ref.Start)
			}
			n, err := t.exec(ctx, `UPDATE counters c SET used = LEAST(c.used + d.delta, 9007199254740991)
				FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS d(limit_id, subject, window_start, delta)
				WHERE c.limit_id = d.limit_id AND c.subject = d.subject AND c.window_start = d.window_start`, ids, subs, starts, ds)
			if err != nil {
				return fmt.Errorf("add to counters: %w", err)
			}
			if n != int64(len(ids)) && !ifStored {
				return fmt.Errorf("%w: add to counters: %d of %d rows are gone", budget.ErrConflict, int64(len(ids))-n, len(ids))
			}
			return nil
		})
}
