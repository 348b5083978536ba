package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// TestEventsStoredColumnForColumnWhateverTheirRuns writes a batch whose
// events, in key order, form full runs of one key, provider and model (the
// insert binds those once per 64 rows), runs with columns zero in every
// row (left out of its statement once it is prepared), a run no price
// matched (its no_price flag set, unpriced not: a swap shows), runs broken by a model, and rows
// with levels, an end user and tags, with one request id the history
// already holds in the middle of a run; every column of every event must
// read back as written; a second batch of the run's ids again (the history
// holds them, so the insert falls back to RETURNING) is all duplicates and
// changes nothing.
func TestEventsStoredColumnForColumnWhateverTheirRuns(t *testing.T) {
	ctx := context.Background()
	path := tmpDB(t)
	tr := newTracker(t, openStore(t, path), nil)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ev := func(key, id, model string, i int) budget.Usage {
		return budget.Usage{RequestID: id, Key: key, Provider: "openai", Model: model, Input: int64(100 + i), Output: int64(i % 7),
			Reasoning: int64(i % 3), CacheRead: int64(i % 5), CacheWrite: int64(i % 2), At: at.Add(time.Duration(i) * time.Second),
			Cost: int64(1000 + i), CostKnown: true}
	}
	var evs []budget.Usage
	for i := range 200 { // 200 of one key, provider and model: 3 full runs
		evs = append(evs, ev("run-a", fmt.Sprintf("id-%04d", i), "GPT-4o", i))
	}
	for i := range 64 { // a run zero in some columns, which its statement leaves out
		e := ev("run-z", fmt.Sprintf("id-%04d", i), "GPT-4o", i)
		e.Reasoning, e.CacheWrite, e.Cost, e.CacheRead = 0, 0, 0, int64(1+i%5)
		evs = append(evs, e)
	}
	for i := range 64 { // a run no price matched: its flags are bound, its cost is not
		e := ev("run-n", fmt.Sprintf("id-%04d", i), "GPT-4o", i)
		e.Cost, e.NoPrice = 0, true
		evs = append(evs, e)
	}
	for i := range 100 { // the model changes every 10 events: no full run
		evs = append(evs, ev("run-b", fmt.Sprintf("id-%04d", i), fmt.Sprintf("gpt-4o-%d", i/10), i))
	}
	for i := range 70 { // levels, an end user and tags: the full row
		e := ev("run-c", fmt.Sprintf("id-%04d", i), "GPT-4o", i)
		e.Team, e.Org, e.Placed, e.User = "t1", "o1", true, fmt.Sprintf("u%d", i%3)
		e.Tags = "project=atlas"
		evs = append(evs, e)
	}
	dups, err := tr.RecordSync(ctx, evs...)
	if err != nil {
		t.Fatal(err)
	}
	// The masked run's statement is prepared after the first batch that
	// needed it (which bound every column): a second run of its mask uses it.
	var more []budget.Usage
	for i := 64; i < 128; i++ {
		e := ev("run-z", fmt.Sprintf("id-%04d", i), "GPT-4o", i)
		e.Reasoning, e.CacheWrite, e.Cost, e.CacheRead = 0, 0, 0, int64(1+i%5)
		more = append(more, e)
		n := ev("run-n", fmt.Sprintf("id-%04d", i), "GPT-4o", i)
		n.Cost, n.NoPrice = 0, true
		more = append(more, n)
	}
	d2, err := tr.RecordSync(ctx, more...)
	if err != nil {
		t.Fatal(err)
	}
	evs, dups = append(evs, more...), append(dups, d2...)
	for i, d := range dups {
		if d {
			t.Errorf("event %d (%s %s): a duplicate in an empty history", i, evs[i].Key, evs[i].RequestID)
		}
	}
	again := make([]budget.Usage, 128)
	for i := range again {
		again[i] = evs[i]
		again[i].Input = 999_999
	}
	if dups, err = tr.RecordSync(ctx, again...); err != nil {
		t.Fatal(err)
	}
	for i, d := range dups {
		if !d {
			t.Errorf("event %d again (%s): not a duplicate", i, again[i].RequestID)
		}
	}

	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	type row struct {
		provider, model, norm, team, org, user, tags              string
		input, output, reasoning, cacheRead, cacheWrite, at, cost int64
		unpriced, noPrice                                         bool
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM usage`).Scan(&n); err != nil || n != len(evs) {
		t.Fatalf("usage holds %d rows (%v), want %d", n, err, len(evs))
	}
	for _, e := range evs {
		var got row
		err := db.QueryRow(`SELECT provider, model, model_norm, team, org, end_user, tags, input, output, reasoning, cache_read, cache_write, at, cost, unpriced, no_price
			FROM usage WHERE key = ? AND request_id = ?`, e.Key, e.RequestID).Scan(&got.provider, &got.model, &got.norm, &got.team, &got.org, &got.user, &got.tags,
			&got.input, &got.output, &got.reasoning, &got.cacheRead, &got.cacheWrite, &got.at, &got.cost, &got.unpriced, &got.noPrice)
		if err != nil {
			t.Fatalf("%s %s: %v", e.Key, e.RequestID, err)
		}
		tags := ""
		if len(e.Tags) > 0 {
			tags = "project=atlas"
		}
		want := row{e.Provider, e.Model, budget.NormalizeModel(e.Model), e.Team, e.Org, e.User, tags,
			e.Input, e.Output, e.Reasoning, e.CacheRead, e.CacheWrite, e.At.UnixNano(), e.Cost, false, e.NoPrice}
		if got != want {
			t.Errorf("%s %s: stored %+v, want %+v", e.Key, e.RequestID, got, want)
		}
	}
}
