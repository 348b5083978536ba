package budget

import (
	"reflect"
	"testing"
	"time"
)

// The write's rollups: one row per UTC day and dimensions, in the order
// first seen, summing only the events the history took, however their
// identities hash (a collision of two identities keeps two rows).
func TestRollupsSumEachDayAndDimensionsOnceWhateverTheirHash(t *testing.T) {
	day := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	ev := func(key, model string, tags Tags, at time.Time, input int64, noPrice bool) EventWrite {
		return EventWrite{Usage: Usage{Key: key, Provider: "openai", Model: model, Tags: tags, At: at, Input: input}, NoPrice: noPrice}
	}
	w := WriteSet{Events: []EventWrite{
		ev("a", "m", "", day.Add(time.Hour), 1, false),
		ev("b", "m", "", day.Add(2*time.Hour), 2, true),
		ev("a", "m", "", day.Add(23*time.Hour+59*time.Minute), 4, true), // a's first row
		ev("a", "m", "", day.Add(24*time.Hour), 8, false),               // the next day
		ev("a", "m", "t=1", day.Add(3*time.Hour), 16, false),            // other tags
		ev("a", "m", "", day.Add(5*time.Hour), 32, false),               // not inserted
		ev("a", "n", "", day.Add(-time.Nanosecond), 64, false),          // the day before, another model
		ev("b", "m", "", day.Add(6*time.Hour), 128, false),              // b's row again, second of its chain when hashes collide
		ev("a", "n", "", day.Add(-time.Hour), 256, false),               // the last row again, at its chain's end
	}}
	inserted := []bool{true, true, true, true, true, false, true, true, true}
	row := func(key, model string, tags Tags, d time.Time, requests, input, noPrice int64) Rollup {
		return Rollup{Day: d, Key: key, Provider: "openai", Model: model, Tags: tags,
			Totals: Totals{Requests: requests, Input: input, NoPrice: noPrice}}
	}
	want := []Rollup{
		row("a", "m", "", day, 2, 5, 1),
		row("b", "m", "", day, 2, 130, 1),
		row("a", "m", "", day.AddDate(0, 0, 1), 1, 8, 0),
		row("a", "m", "t=1", day, 1, 16, 0),
		row("a", "n", "", day.AddDate(0, 0, -1), 2, 320, 0),
	}
	if got := w.Rollups(inserted); !reflect.DeepEqual(got, want) {
		t.Errorf("Rollups:\n got %+v\nwant %+v", got, want)
	}
	if got := w.rollups(inserted, func(rollupKey) uint64 { return 7 }); !reflect.DeepEqual(got, want) {
		t.Errorf("rollups, every identity hashing alike:\n got %+v\nwant %+v", got, want)
	}
	if got := w.Rollups(make([]bool, len(w.Events))); got != nil {
		t.Errorf("Rollups of nothing inserted = %+v, want none", got)
	}
}
