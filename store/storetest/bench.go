package storetest

import (
	"context"
	"reflect"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// The benchmarks' shapes, once, for any store: a backend's benchmark opens
// a fresh database with its BenchTracker and hands it to one of these.

// BenchTracker opens a fresh database for one benchmark and starts a
// Tracker with cfg on it; both are closed by b.Cleanup.
type BenchTracker func(b *testing.B, cfg budget.Config) *budget.Tracker

// BenchConfig is the benchmarks' tracker configuration: no sweeper, and
// warm means warm (no re-reads mid-benchmark), after mutate (may be nil).
func BenchConfig(mutate func(*budget.Config)) budget.Config {
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	cfg.RefreshInterval = time.Hour
	if mutate != nil {
		mutate(&cfg)
	}
	return cfg
}

// BenchKeys is how many keys the Reserve+Commit and sustained Record
// benchmarks spread their requests over.
const BenchKeys = 1000

// BenchKey names key k of the benchmarks: key-0, key-1, ...
func BenchKey(k int) string { return "key-" + strconv.Itoa(k) }

// BenchReq is the benchmarks' request on key-0: its three limits apply.
var BenchReq = budget.Request{Key: "key-0", Provider: "openai", Model: "gpt-4o", Estimate: budget.Estimate{Input: 500, Output: 200}}

// SetBenchLimits gives keys key-0 to key-(nKeys-1) the three limits of
// BenchReq, large enough never to refuse: global daily tokens, provider
// openai hourly tokens, model gpt-4o per-minute input tokens.
func SetBenchLimits(b testing.TB, tr *budget.Tracker, nKeys int) {
	b.Helper()
	for k := range nKeys {
		key := BenchKey(k)
		for _, s := range []budget.LimitSpec{
			{Key: key, Window: "daily"},
			{Key: key, Scope: "provider", ScopeValue: "openai", Window: "1h"},
			{Key: key, Scope: "model", ScopeValue: "gpt-4o", Window: "1m", Metric: "input"},
		} {
			SetLimit(b, tr, s, 1<<50)
		}
	}
}

// BenchCheckWarm: definitions and counters come from the cache.
func BenchCheckWarm(b *testing.B, open BenchTracker) {
	tr := open(b, BenchConfig(nil))
	SetBenchLimits(b, tr, 1)
	if d, err := tr.Check(ctx, BenchReq); err != nil || len(d.Limits) != 3 {
		b.Fatalf("warm-up check = %+v, %v; want 3 limits", d, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if d, _ := tr.Check(ctx, BenchReq); !d.Allowed {
			b.Fatal("refused")
		}
	}
}

// BenchCheckCold: RefreshInterval 0, so every check reads the key's
// definitions and its three counters (and holds) from the store, in read
// transactions.
func BenchCheckCold(b *testing.B, open BenchTracker) {
	tr := open(b, BenchConfig(func(c *budget.Config) { c.RefreshInterval = 0 }))
	SetBenchLimits(b, tr, 1)
	// Give every limit a counter row, as a live gateway's would have.
	if _, err := tr.RecordSync(ctx, budget.Usage{Key: "key-0", Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if d, err := tr.Check(ctx, BenchReq); err != nil || !d.Allowed {
			b.Fatalf("check = %+v, %v", d, err)
		}
	}
}

// BenchCheckColdSeed: a cold window with no counter row, so every check
// sums the key's 1,000 history rows of the day (RefreshInterval 0; checks
// never write, so the row is never created).
func BenchCheckColdSeed(b *testing.B, open BenchTracker) {
	tr := open(b, BenchConfig(func(c *budget.Config) { c.RefreshInterval = 0 }))
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	evs := make([]budget.Usage, 1000)
	for i := range evs {
		evs[i] = budget.Usage{RequestID: "r" + strconv.Itoa(i), Key: "key-0", Provider: "openai", Model: "gpt-4o",
			Input: 100, Output: 20, At: day.Add(time.Duration(i) * time.Minute)}
	}
	if _, err := tr.RecordSync(ctx, evs...); err != nil { // no limit yet: history only
		b.Fatal(err)
	}
	SetLimit(b, tr, budget.LimitSpec{Key: "key-0", Window: "daily"}, 1<<50)
	at := day.Add(23 * time.Hour)
	req := budget.Request{Key: "key-0"}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		d, err := tr.CheckAt(ctx, req, at)
		if err != nil || d.Limits[0].Used != 1000*120 {
			b.Fatalf("check = %+v, %v", d.Limits, err)
		}
	}
}

// BenchRecordSustained is the writer's throughput: from the first Record
// to the Flush that commits the last, over BenchKeys keys with 3 limits
// each. It reports events/s and events/batch.
func BenchRecordSustained(b *testing.B, open BenchTracker) {
	tr := open(b, BenchConfig(func(c *budget.Config) { c.QueueSize = 1 << 16 }))
	SetBenchLimits(b, tr, BenchKeys)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		u := budget.Usage{RequestID: "req-" + strconv.Itoa(i), Key: BenchKey(i % BenchKeys), Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5}
		if err := tr.Record(ctx, u); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := tr.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	if st := tr.Stats(); st.Batches > 0 {
		b.ReportMetric(float64(st.Written)/float64(st.Batches), "events/batch")
	}
}

// BenchRecordSustainedHook is BenchRecordSustained with a usage hook
// registered: every event also queues an outbox row in its transaction.
func BenchRecordSustainedHook(b *testing.B, open BenchTracker) {
	BenchRecordSustained(b, func(b *testing.B, cfg budget.Config) *budget.Tracker {
		tr := open(b, cfg)
		if _, err := tr.AddUsageHook(ctx, "https://billing.example/bench"); err != nil {
			b.Fatal(err)
		}
		return tr
	})
}

// BenchReserveCommit is exact admission: Reserve then Commit, 3 limits per
// request over BenchKeys keys (each warmed by one pair first), from
// goroutines goroutines (1: a plain loop; more: RunParallel, as a multiple
// of GOMAXPROCS). It reports pairs/s.
func BenchReserveCommit(b *testing.B, open BenchTracker, goroutines int) {
	tr := open(b, BenchConfig(nil))
	SetBenchLimits(b, tr, BenchKeys)
	reqs := make([]budget.Request, BenchKeys)
	for k := range reqs {
		reqs[k] = BenchReq
		reqs[k].Key = BenchKey(k)
	}
	pair := func(ctx context.Context, i int64) error {
		r, err := tr.Reserve(ctx, reqs[i%BenchKeys], time.Minute)
		if err != nil {
			return err
		}
		_, err = tr.Commit(ctx, r.ID, budget.Usage{Input: 400, Output: 100})
		return err
	}
	for i := range BenchKeys { // every key's limits cached, its counter rows written
		if err := pair(ctx, int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	if goroutines <= 1 {
		var i int64
		for b.Loop() {
			if err := pair(ctx, i); err != nil {
				b.Fatal(err)
			}
			i++
		}
	} else {
		var seq atomic.Int64
		b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := pair(ctx, seq.Add(1)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
}

// The report benchmark's history (issue 16's target): ReportEvents events
// of ReportKeys keys spread evenly over the ReportDays days from
// ReportStart, ReportStep apart. Each store writes it with its own SQL.
const (
	ReportKeys   = 1000
	ReportDays   = 30
	ReportEvents = 1_000_000
	ReportStep   = int64(ReportDays) * int64(24*time.Hour) / ReportEvents
)

// ReportStart is where the report benchmark's history starts.
var ReportStart = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// BenchReport runs the report benchmark on s, which holds the history
// above and its rollups: a month by key and day from the daily rollups
// (Tracker.Report over whole days, sub-benchmark "rollups") against
// summing the events in the same run (Tx.EventTotals over the same month,
// grouped the same way: "events"), once it has checked that both agree.
func BenchReport(b *testing.B, s budget.Store) {
	tr, err := budget.New(ctx, s, BenchConfig(nil))
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close(ctx)
	q := budget.ReportQuery{Since: ReportStart, Until: ReportStart.AddDate(0, 0, ReportDays), By: []budget.Dim{budget.DimKey, budget.DimDay}}
	var nRollups int
	fromEvents := func() []budget.ReportRow {
		var rows []budget.ReportRow
		if err := s.View(ctx, func(t budget.Tx) error {
			rs, err := historyRole(b, t).EventTotals(ctx, q.Since, q.Until, "", q.By)
			rows = budget.Group(rs, q.By)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		return rows
	}
	if err := s.View(ctx, func(t budget.Tx) error {
		rs, err := historyRole(b, t).Rollups(ctx, q.Since, q.Until, "", budget.AllDims)
		nRollups = len(rs)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	rolled, err := tr.Report(ctx, q)
	if err != nil {
		b.Fatal(err)
	}
	if want := fromEvents(); len(rolled) != ReportKeys*ReportDays || !reflect.DeepEqual(rolled, want) {
		b.Fatalf("the report has %d rows (want %d) and matches the events: %v", len(rolled), ReportKeys*ReportDays, reflect.DeepEqual(rolled, want))
	}
	b.Logf("%d events in %d rollup rows", ReportEvents, nRollups)
	b.Run("rollups", func(b *testing.B) {
		for b.Loop() {
			if _, err := tr.Report(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("events", func(b *testing.B) {
		for b.Loop() {
			fromEvents()
		}
	})
}
