package sqlrow

import (
	"github.com/tokenbudget/tokenbudget/budget"
)

// RollupCols are the columns of a rollups row, in order: its dimensions,
// model_norm, then its sums.
const RollupCols = `day, key, team, org, end_user, provider, model, tags, model_norm, requests, input, output, reasoning, cache_read, cache_write, cost, no_price`

// RollupDims are the rollups primary key's columns.
const RollupDims = `day, key, team, org, end_user, provider, model, tags`

// RollupNCols is how many columns RollupCols names.
const RollupNCols = 17

// DimColumn is the column of rollups and usage holding dimension d (one
// of budget.AllDims).
func DimColumn(d budget.Dim) string {
	if d == budget.DimUser {
		return "end_user"
	}
	return string(d)
}

// Rollup is a rollups row, or a group of usage rows summed like one.
type Rollup struct {
	Day        int64  `db:"day"`
	Key        string `db:"key"`
	Team       string `db:"team"`
	Org        string `db:"org"`
	User       string `db:"end_user"`
	Provider   string `db:"provider"`
	Model      string `db:"model"`
	Tags       string `db:"tags"`
	Requests   int64  `db:"requests"`
	Input      int64  `db:"input"`
	Output     int64  `db:"output"`
	Reasoning  int64  `db:"reasoning"`
	CacheRead  int64  `db:"cache_read"`
	CacheWrite int64  `db:"cache_write"`
	Cost       int64  `db:"cost"`
	NoPrice    int64  `db:"no_price"`
}

// RollupSelect are the columns a Rollup scans (all but model_norm).
const RollupSelect = `day, key, team, org, end_user, provider, model, tags, requests, input, output, reasoning, cache_read, cache_write, cost, no_price`

// Decode is the row as a budget.Rollup.
func (r *Rollup) Decode() budget.Rollup {
	return budget.Rollup{Day: FromNs(r.Day), Key: r.Key, Team: r.Team, Org: r.Org, User: r.User, Provider: r.Provider, Model: r.Model, Tags: budget.Tags(r.Tags),
		Totals: budget.Totals{Requests: r.Requests, Input: r.Input, Output: r.Output, Reasoning: r.Reasoning,
			CacheRead: r.CacheRead, CacheWrite: r.CacheWrite, Cost: r.Cost, NoPrice: r.NoPrice}}
}

// DecodeRollups decodes rows.
func DecodeRollups(rows []Rollup) []budget.Rollup {
	out := make([]budget.Rollup, len(rows))
	for i := range rows {
		out[i] = rows[i].Decode()
	}
	return out
}

// RollupArgs appends r's values in RollupCols order to a.
func RollupArgs(a []any, r *budget.Rollup) []any {
	return append(a, Ns(r.Day), r.Key, r.Team, r.Org, r.User, r.Provider, r.Model, string(r.Tags), budget.NormalizeModel(r.Model),
		r.Requests, r.Input, r.Output, r.Reasoning, r.CacheRead, r.CacheWrite, r.Cost, r.NoPrice)
}

// Event is a usage row as Tx.Events reads it.
type Event struct {
	Key        string `db:"key"`
	RequestID  string `db:"request_id"`
	Provider   string `db:"provider"`
	Model      string `db:"model"`
	Input      int64  `db:"input"`
	Output     int64  `db:"output"`
	Reasoning  int64  `db:"reasoning"`
	CacheRead  int64  `db:"cache_read"`
	CacheWrite int64  `db:"cache_write"`
	At         int64  `db:"at"`
	Cost       int64  `db:"cost"`
	Unpriced   bool   `db:"unpriced"`
	NoPrice    bool   `db:"no_price"`
	Team       string `db:"team"`
	Org        string `db:"org"`
	User       string `db:"end_user"`
	Tags       string `db:"tags"`
}

// EventCols are the columns an Event scans.
const EventCols = `key, request_id, provider, model, input, output, reasoning, cache_read, cache_write, at, cost, unpriced, no_price, team, org, end_user, tags`

// Decode is the row as a budget.Usage: its cost and placement as
// written.
func (e *Event) Decode() budget.Usage {
	return budget.Usage{RequestID: e.RequestID, Key: e.Key, Provider: e.Provider, Model: e.Model, Input: e.Input, Output: e.Output,
		Reasoning: e.Reasoning, CacheRead: e.CacheRead, CacheWrite: e.CacheWrite, At: FromNs(e.At), Cost: e.Cost,
		Unpriced: e.Unpriced, CostKnown: true, NoPrice: e.NoPrice, Placed: true, Team: e.Team, Org: e.Org, User: e.User, Tags: budget.Tags(e.Tags)}
}

// Horizon splits [start, end) at the prune horizon h (zero: none) into
// the whole UTC days before it, which rollups sum, and the rest, which
// events sum; empty parts have from >= to.
func Horizon(start, end, h int64) (rollFrom, rollTo, evFrom int64) {
	if h == 0 || start >= h {
		return 0, 0, start
	}
	const day = 86400_000_000_000
	rollFrom = start - ((start%day)+day)%day
	if rollFrom < start {
		rollFrom += day // a partial first day: its pruned part is gone
	}
	return rollFrom, min(end, h), max(start, h)
}
