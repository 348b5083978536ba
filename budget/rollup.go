package budget

import (
	"hash/maphash"
	"slices"
	"time"
)

// Daily rollups: the history summed per UTC day and (key, team, org, end
// user, provider, model), written by Apply in the same transaction as the
// events they sum, so they always agree with the events. Reports read them
// for whole days, and once old events are pruned (Tracker.Prune) they are
// all that remains of those days: seeding a window that starts on a UTC
// midnight before the prune horizon sums them instead of the events.

// Day is the UTC midnight starting the day that holds t.
func Day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// Totals is usage summed over events.
type Totals struct {
	Requests   int64 // events, late commits' excess not counted (see LateSuffix)
	Input      int64
	Output     int64
	Reasoning  int64
	CacheRead  int64
	CacheWrite int64
	Cost       int64 // micro-dollars
	// NoPrice counts the events no price matched (their Cost is 0 and
	// unknown, whether or not a usd limit applied).
	NoPrice int64
}

// Tokens is the billable tokens: input + output + reasoning.
func (t *Totals) Tokens() int64 { return t.Input + t.Output + t.Reasoning }

// Add adds o to t, each sum saturating at MaxTokens.
func (t *Totals) Add(o *Totals) {
	add := func(a *int64, b int64) { *a = min(*a+b, MaxTokens) }
	add(&t.Requests, o.Requests)
	add(&t.Input, o.Input)
	add(&t.Output, o.Output)
	add(&t.Reasoning, o.Reasoning)
	add(&t.CacheRead, o.CacheRead)
	add(&t.CacheWrite, o.CacheWrite)
	add(&t.Cost, o.Cost)
	add(&t.NoPrice, o.NoPrice)
}

// Rollup is one UTC day's totals of one (key, team, org, user, provider,
// model, tags); Model is the model as recorded, Tags the tags normalized.
type Rollup struct {
	Day                                   time.Time
	Key, Team, Org, User, Provider, Model string
	Tags                                  Tags
	Totals
}

// rollupKey is a Rollup's identity: its day (the UTC midnight, Unix
// nanos) and dimensions. It is the one definition Rollups groups events
// by, hashing and comparing it whole, so a dimension added here is one
// everywhere.
type rollupKey struct {
	day                                   int64
	key, team, org, user, provider, model string
	tags                                  Tags
}

// rollupKeyOf is the identity of the rollup row u adds to.
func rollupKeyOf(u *Usage) rollupKey {
	return rollupKey{Day(u.At).UnixNano(), u.Key, u.Team, u.Org, u.User, u.Provider, u.Model, u.Tags}
}

// Rollups are the rollup rows the inserted events of w add to (inserted[i]
// for w.Events[i]), one per day and dimensions, in the order first seen.
//
// The groups are found through a hash of each event's identity (rollupKey)
// to its group's index rather than a map keyed by the identities
// themselves: a batch of 8,192 keys' events (maxBatchKeys) would hold
// ~1 MB of such keys, 120 bytes each, while this holds 16 bytes a group in
// the map and sizes the rows once (issue 29's peak RSS: the batch's memory
// is live beside the caches when the collector marks, and the heap may
// grow to twice that).
func (w *WriteSet) Rollups(inserted []bool) []Rollup {
	return w.rollups(inserted, func(k rollupKey) uint64 { return maphash.Comparable(rollupSeed, k) })
}

// rollups is Rollups grouping by hash (equal identities hash equal).
func (w *WriteSet) rollups(inserted []bool, hash func(rollupKey) uint64) []Rollup {
	idx := make(map[uint64]int32)
	var first, next []int32 // per group: its first event; the next group of its hash (-1: none)
	group := make([]int32, len(w.Events))
	for i := range w.Events {
		if !inserted[i] {
			continue
		}
		k := rollupKeyOf(&w.Events[i].Usage)
		hu := hash(k)
		j, ok := idx[hu]
		g, last := int32(-1), int32(-1)
		for ok && j >= 0 {
			if k == rollupKeyOf(&w.Events[first[j]].Usage) {
				g = j
				break
			}
			last, j = j, next[j]
		}
		if g < 0 {
			g = int32(len(first))
			first = append(first, int32(i))
			next = append(next, -1)
			if ok {
				next[last] = g
			} else {
				idx[hu] = g
			}
		}
		group[i] = g
	}
	if len(first) == 0 {
		return nil
	}
	idx = nil
	out := make([]Rollup, len(first))
	for g, i := range first {
		u := &w.Events[i].Usage
		out[g] = Rollup{Day: Day(u.At), Key: u.Key, Team: u.Team, Org: u.Org, User: u.User, Provider: u.Provider, Model: u.Model, Tags: u.Tags}
	}
	for i := range w.Events {
		if !inserted[i] {
			continue
		}
		e := &w.Events[i]
		u := &e.Usage
		t := Totals{Requests: u.Amount(MetricRequests), Input: u.Input, Output: u.Output, Reasoning: u.Reasoning,
			CacheRead: u.CacheRead, CacheWrite: u.CacheWrite, Cost: u.Cost}
		if e.NoPrice {
			t.NoPrice = 1
		}
		out[group[i]].Add(&t)
	}
	return out
}

var rollupSeed = maphash.MakeSeed()

// Amount is what the totals add to a limit of metric m (as Usage.Amount).
func (t *Totals) Amount(m Metric) int64 {
	switch m {
	case MetricTokens:
		return min(t.Tokens(), MaxTokens)
	case MetricInput:
		return t.Input
	case MetricOutput:
		return min(t.Output+t.Reasoning, MaxTokens)
	case MetricRequests:
		return t.Requests
	case MetricUSD:
		return t.Cost
	}
	return 0
}

// AllDims are every dimension a rollup has: grouped by them, rollups are
// as stored.
var AllDims = []Dim{DimKey, DimTeam, DimOrg, DimUser, DimProvider, DimModel, DimTags}

// RollupColumns are the dimensions of by that rollups store as columns
// (not day, week or month: every sum is per day), in AllDims order.
func RollupColumns(by []Dim) []Dim {
	var out []Dim
	for _, d := range AllDims {
		if slices.Contains(by, d) || d == DimTags && slices.ContainsFunc(by, func(d Dim) bool { return d.TagName() != "" }) {
			out = append(out, d)
		}
	}
	return out
}

// Only clears r's dimensions that are not in cols (RollupColumns), as a
// store's grouping leaves them.
func (r *Rollup) Only(cols []Dim) {
	for _, d := range AllDims {
		if slices.Contains(cols, d) {
			continue
		}
		switch d {
		case DimKey:
			r.Key = ""
		case DimTeam:
			r.Team = ""
		case DimOrg:
			r.Org = ""
		case DimUser:
			r.User = ""
		case DimProvider:
			r.Provider = ""
		case DimModel:
			r.Model = ""
		case DimTags:
			r.Tags = ""
		}
	}
}
