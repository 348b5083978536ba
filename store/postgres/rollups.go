package postgres

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlq"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// Daily rollups, reports, export and prune.
//
// Reads of the events by time go key by key: the keys that have rollups
// in the range's days (every event adds to its day's rollup in its own
// transaction), each read from the covering index (key, at), so a range
// costs its events and its keys, not the whole history, and no index on
// at alone costs every write. (A BRIN index on at would be cheap to write
// and faster while the table is in time order, but once prunes free pages
// for new events its ranges widen (nothing narrows them again) until a
// read of one day scans most of the table.)

// qAddRollups adds the rollups of a batch's inserted events (parallel
// arrays in sqlrow.RollupCols order) to the stored ones, saturating.
const qAddRollups = `INSERT INTO rollups (` + sqlrow.RollupCols + `)
	SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
		$10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[])
	ON CONFLICT (` + sqlrow.RollupDims + `) DO UPDATE SET
		requests = LEAST(rollups.requests + excluded.requests, 9007199254740991),
		input = LEAST(rollups.input + excluded.input, 9007199254740991),
		output = LEAST(rollups.output + excluded.output, 9007199254740991),
		reasoning = LEAST(rollups.reasoning + excluded.reasoning, 9007199254740991),
		cache_read = LEAST(rollups.cache_read + excluded.cache_read, 9007199254740991),
		cache_write = LEAST(rollups.cache_write + excluded.cache_write, 9007199254740991),
		cost = LEAST(rollups.cost + excluded.cost, 9007199254740991),
		no_price = LEAST(rollups.no_price + excluded.no_price, 9007199254740991)`

// addRollups writes rs in one statement, in primary-key order, so two
// batches adding to the same rows wait on each other in one order.
func (t *tx) addRollups(ctx context.Context, rs []budget.Rollup) error {
	n := len(rs)
	if n == 0 {
		return nil
	}
	slices.SortFunc(rs, func(a, b budget.Rollup) int {
		return cmp.Or(a.Day.Compare(b.Day), strings.Compare(a.Key, b.Key), strings.Compare(a.Team, b.Team), strings.Compare(a.Org, b.Org),
			strings.Compare(a.User, b.User), strings.Compare(a.Provider, b.Provider), strings.Compare(a.Model, b.Model),
			strings.Compare(string(a.Tags), string(b.Tags)))
	})
	days, keys, teams, orgs, users, provs, models, norms := make([]int64, n), make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	tags := make([]string, n)
	req, in, out, reas, cr, cw, cost, np := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n),
		make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i := range rs {
		r := &rs[i]
		days[i], keys[i], teams[i], orgs[i], users[i], provs[i], models[i], norms[i] = ns(r.Day), r.Key, r.Team, r.Org, r.User, r.Provider, r.Model, budget.NormalizeModel(r.Model)
		tags[i] = string(r.Tags)
		req[i], in[i], out[i], reas[i], cr[i], cw[i], cost[i], np[i] = r.Requests, r.Input, r.Output, r.Reasoning, r.CacheRead, r.CacheWrite, r.Cost, r.NoPrice
	}
	if _, err := t.exec(ctx, qAddRollups, days, keys, teams, orgs, users, provs, models, tags, norms, req, in, out, reas, cr, cw, cost, np); err != nil {
		return fmt.Errorf("add daily rollups: %w", err)
	}
	return nil
}

// The sums of a group of rollups rows, and of a group of events summed
// like one, in sqlrow.RollupCols order after the dimensions.
const (
	qRollupTotals = `LEAST(SUM(requests), 9007199254740991)::bigint, LEAST(SUM(input), 9007199254740991)::bigint,
		LEAST(SUM(output), 9007199254740991)::bigint, LEAST(SUM(reasoning), 9007199254740991)::bigint,
		LEAST(SUM(cache_read), 9007199254740991)::bigint, LEAST(SUM(cache_write), 9007199254740991)::bigint,
		LEAST(SUM(cost), 9007199254740991)::bigint, LEAST(SUM(no_price), 9007199254740991)::bigint`
	qEventTotals = `COUNT(*) FILTER (WHERE right(request_id, 5) <> ':late'), LEAST(SUM(input), 9007199254740991)::bigint,
		LEAST(SUM(output), 9007199254740991)::bigint, LEAST(SUM(reasoning), 9007199254740991)::bigint,
		LEAST(SUM(cache_read), 9007199254740991)::bigint, LEAST(SUM(cache_write), 9007199254740991)::bigint,
		LEAST(SUM(cost), 9007199254740991)::bigint, COUNT(*) FILTER (WHERE no_price)`
)

func (t *tx) Rollups(ctx context.Context, from, to time.Time, key string, by []budget.Dim) ([]budget.Rollup, error) {
	return t.ReadRollups(ctx, qRollupTotals, from, to, key, by)
}

// eventsIn is the condition (a WHERE clause, placeholders from $1) on
// usage selecting the events of [from, to), key's only unless key is "":
// key by key, the keys with rollups in the range's days.
func eventsIn(from, to time.Time, key string) (string, []any) {
	f, tn := from.UnixNano(), to.UnixNano()
	if key != "" {
		return ` WHERE key = $1 AND at >= $2 AND at < $3`, []any{key, f, tn}
	}
	return ` WHERE key = ANY(ARRAY(SELECT DISTINCT key FROM rollups WHERE day >= $1 AND day < $2)) AND at >= $3 AND at < $2`,
		[]any{floorDay(max(f, math.MinInt64+day)), tn, f} // from's day, without overflow
}

func (t *tx) EventTotals(ctx context.Context, from, to time.Time, key string, by []budget.Dim) ([]budget.Rollup, error) {
	sel, group := sqlq.GroupBy(qDayOf, by)
	where, args := eventsIn(from, to, key)
	out, err := t.ScanRollups(ctx, `SELECT `+sel+`, `+qEventTotals+` FROM usage`+where+` GROUP BY `+group, args)
	if err != nil {
		return nil, fmt.Errorf("sum events by day: %w", err)
	}
	return out, nil
}

func (t *tx) Events(ctx context.Context, from, to time.Time, key string, fn func(budget.Usage) error) error {
	where, args := eventsIn(from, to, key)
	return t.ScanEvents(ctx, `SELECT `+sqlrow.EventCols+` FROM usage`+where+` ORDER BY at, key COLLATE "C", request_id COLLATE "C"`, args, fn)
}

func (t *tx) PrunedBefore(ctx context.Context) (time.Time, error) {
	var v int64
	if err := t.tx.GetContext(ctx, &v, `SELECT value FROM meta WHERE name = 'pruned_before'`); err != nil {
		return time.Time{}, fmt.Errorf("read the prune horizon: %w", err)
	}
	return fromNs(v), nil
}

// Prune deletes in two passes: the bulk without the limits lock (writers
// go on), then, holding it exclusively (LockDefinitions: it waits for the
// writers that read the old horizon with the limits version), what they
// added meanwhile, and moves the horizon and the limits version, so every
// writer re-reads the horizon before it writes again. No one sees the
// deletions before the new horizon: they commit together.
func (t *tx) Prune(ctx context.Context, before time.Time) (int64, error) {
	if err := t.write(); err != nil {
		return 0, err
	}
	h, err := t.PrunedBefore(ctx)
	if err != nil {
		return 0, err
	}
	// The keys with rollups from the horizon's day on: no event before it
	// is left (the first prune reads every day).
	from := time.Unix(0, math.MinInt64)
	if !h.IsZero() {
		from = h
	}
	where, args := eventsIn(from, before, "")
	var deleted int64
	for pass := range 2 {
		if pass == 1 {
			if err := t.LockDefinitions(ctx); err != nil {
				return 0, err
			}
		}
		n, err := t.exec(ctx, `DELETE FROM usage`+where, args...)
		if err != nil {
			return 0, fmt.Errorf("prune events: %w", err)
		}
		deleted += n
	}
	// Writers re-read the horizon when the limits version moves.
	if _, err := t.exec(ctx, `UPDATE meta SET value = CASE name WHEN 'pruned_before' THEN $1 ELSE value + 1 END
		WHERE name IN ('pruned_before', 'limits_version')`, before.UnixNano()); err != nil {
		return 0, fmt.Errorf("move the prune horizon and the limits version: %w", err)
	}
	return deleted, nil
}
