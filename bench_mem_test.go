package tokenbudget_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
)

// The test binary doubles as the memory benchmark's subprocess, so its RSS
// is the tracker's alone.
func TestMain(m *testing.M) {
	if path := os.Getenv("TB_MEM_CHILD"); path != "" {
		if os.Getenv("TB_MEM_HEAPPROFILE")+os.Getenv("TB_MEM_PEAKPROFILE") != "" {
			runtime.MemProfileRate = 4096 // a sample every 4 KiB, not 512: per-key costs of tens of bytes show
		}
		keys, _ := strconv.Atoi(os.Getenv("TB_MEM_KEYS"))
		if err := memChild(path, keys); err != nil {
			fmt.Fprintln(os.Stderr, "mem child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// memChild runs the memory target's load over keys keys (3 limits each):
// each key checked and recorded twice, in the same windows (the previous
// minute), then flushed. It prints the live heap per key after that load
// (HeapAlloc after GC, less the heap before it, over keys) and the peak RSS,
// no GC forced before the load ends, with the largest RSS sampled split
// into the Go runtime's memory and the rest (peak_go_MiB, peak_other_MiB).
// TB_MEM_PEAKPROFILE names a heap profile written as the live heap peaks
// during the load; TB_MEM_HEAPPROFILE one written after it. Then, outside that load, it checks
// every key in the windows of the day before, which adds 3 counters per
// key and nothing else, and prints the live heap per cached counter.
func memChild(path string, keys int) error {
	ctx := context.Background()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	cfg.RefreshInterval = time.Hour
	bounded := os.Getenv("TB_MEM_DEFAULT_CACHES") != ""
	if !bounded { // every key's definitions and counters stay: the cost of a key
		cfg.CounterCacheSize = 8 * keys
		cfg.LimitCacheSize = 2 * keys
	}
	db, err := tokenbudget.Open(ctx, path, tokenbudget.Options{Config: &cfg})
	if err != nil {
		return err
	}
	defer db.Close(ctx)
	// Two instants in one minute, in the past, so both rounds fall in the
	// same windows of all three limits.
	at := time.Now().UTC().Truncate(time.Minute).Add(-50 * time.Second)
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	check := func(k int, at time.Time) error {
		d, err := db.CheckAt(ctx, budget.Request{Key: "key-" + strconv.Itoa(k), Provider: "openai", Model: "gpt-4o"}, at)
		if err != nil || len(d.Limits) != 3 {
			return fmt.Errorf("check %d: %v (%d limits)", k, err, len(d.Limits))
		}
		return nil
	}
	h0 := heap()
	split := sampleRSS()
	if pp := os.Getenv("TB_MEM_PEAKPROFILE"); pp != "" {
		stop := peakProfile(pp)
		defer stop()
	}
	for round := range 2 {
		at := at.Add(time.Duration(round) * 20 * time.Second)
		for k := range keys {
			if err := check(k, at); err != nil {
				return err
			}
			u := budget.Usage{Key: "key-" + strconv.Itoa(k), Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5, At: at}
			if err := db.Record(ctx, u); err != nil {
				return err
			}
		}
	}
	if _, err := db.Flush(ctx); err != nil {
		return err
	}
	rss := peakRSS()
	goPeak, otherPeak := split()
	fmt.Printf("peak_go_MiB %d\npeak_other_MiB %d\n", goPeak>>20, otherPeak>>20)
	h1 := heap()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	// Where the RSS beyond the live heap is: the heap's spans (live heap,
	// garbage not yet returned) and the goroutine stacks.
	fmt.Printf("heap_sys_MiB %d\nstack_sys_MiB %d\ngoroutines %d\n", ms.HeapSys>>20, ms.StackSys>>20, runtime.NumGoroutine())
	if hp := os.Getenv("TB_MEM_HEAPPROFILE"); hp != "" {
		f, _ := os.Create(hp)
		pprof.WriteHeapProfile(f)
		f.Close()
	}
	if bounded { // the caches are full and evicting: no cost of one counter to take
		fmt.Printf("bytes/key %.0f\npeak_rss_MiB %d\n", float64(int64(h1)-int64(h0))/float64(keys), rss>>10)
		return nil
	}
	for k := range keys {
		if err := check(k, at.Add(-24*time.Hour)); err != nil {
			return err
		}
	}
	h2 := heap()
	fmt.Printf("bytes/key %.0f\npeak_rss_MiB %d\nbytes/counter %.0f\n",
		float64(int64(h1)-int64(h0))/float64(keys), rss>>10, float64(int64(h2)-int64(h1))/float64(3*keys))
	return nil
}

// peakProfile writes a heap profile to path each time the live heap (as
// of the last GC) passes its largest so far by 5%, until stop: the last
// one written is what was live at the load's peak.
func peakProfile(path string) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		var best uint64
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				fmt.Fprintf(os.Stderr, "peak live heap %d MiB\n", best>>20)
				return
			case <-tk.C:
			}
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > best+best/20 {
				best = v
				if f, err := os.Create(path); err == nil {
					pprof.WriteHeapProfile(f)
					f.Close()
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// sampleRSS samples the RSS every 50 ms until the returned function is
// called, which reports the largest sample split in two: the memory the
// Go runtime holds (mapped, not released to the OS: the heap, its
// metadata, stacks) and the rest (SQLite's page caches, allocated by
// modernc.org/libc outside the Go heap, and the binary).
func sampleRSS() func() (goBytes, other int64) {
	done := make(chan struct{})
	var goAt, otherAt, best int64
	finished := make(chan struct{})
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	sample := func() {
		rss := procStatus("VmRSS:") << 10
		metrics.Read(s)
		g := int64(s[0].Value.Uint64() - s[1].Value.Uint64())
		if rss > best {
			best, goAt, otherAt = rss, g, rss-g
		}
	}
	go func() {
		defer close(finished)
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				sample()
				return
			case <-tk.C:
				sample()
			}
		}
	}()
	return func() (int64, int64) { close(done); <-finished; return goAt, otherAt }
}

func peakRSS() int64 { return procStatus("VmHWM:") }

func procStatus(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return -1
}

// BenchmarkMemory100kKeys runs memChild in a subprocess over 100,000 keys
// with 3 limits each (global, provider, model), so the RSS is the tracker's:
//
//	go test -run '^$' -bench Memory -benchtime 1x .
//
// bytes/key and peak_rss_MiB are the target's (each key checked and
// recorded twice); bytes/counter is measured after it.
func BenchmarkMemory100kKeys(b *testing.B) {
	const keys = 100_000
	path := memDB(b, keys)
	// "default" runs with Go's default GC settings; "memlimit" sets
	// GOMEMLIMIT, the knob that bounds a gateway's RSS at some GC cost.
	// The memlimit run doubles the time: it runs only with TB_BENCH_MEMLIMIT=1.
	runs := []struct{ name, env string }{{"default", ""}}
	if os.Getenv("TB_BENCH_MEMLIMIT") != "" {
		runs = append(runs, struct{ name, env string }{"memlimit", "GOMEMLIMIT=160MiB"})
	}
	for _, run := range runs {
		b.Run(run.name, func(b *testing.B) { runMemChild(b, path, keys, run.env) })
	}
}

// BenchmarkMemoryBounded is memChild's load through one Tracker with
// Config's default cache sizes, over 100,000 keys and, with
// TB_BENCH_1M=1 (a long run), 1,000,000: the memory is bounded by the
// caches, so the 1,000,000-key run's peak RSS stays near the other's.
//
//	TB_BENCH_1M=1 go test -run '^$' -bench MemoryBounded -benchtime 1x -timeout 3h .
func BenchmarkMemoryBounded(b *testing.B) {
	sizes := []int{100_000}
	if os.Getenv("TB_BENCH_1M") != "" {
		sizes = append(sizes, 1_000_000)
	}
	for _, keys := range sizes {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			runMemChild(b, memDB(b, keys), keys, "TB_MEM_DEFAULT_CACHES=1")
		})
	}
}

// memDB is a database of keys keys with 3 limits each (global, provider,
// model), written in three statements.
func memDB(b *testing.B, keys int) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "mem.db")
	ctx := context.Background()
	db, err := tokenbudget.Open(ctx, path, tokenbudget.Options{Create: true})
	if err != nil {
		b.Fatal(err)
	}
	db.Close(ctx)
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	for i, l := range []struct{ scope, value, window string }{{"global", "", "daily"}, {"provider", "openai", "1h"}, {"model", "gpt-4o", "1m"}} {
		_, err := raw.Exec(fmt.Sprintf(`WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < %d)
			INSERT INTO limits (id, key, scope, scope_value, metric, max, window, window_seconds, reset_time, timezone, enabled, created_at, updated_at)
			SELECT 'lim-%d-' || x, 'key-' || x, '%s', '%s', 'tokens', %d, '%s', %d, 0, '%s', 1, 0, 0 FROM c`,
			keys-1, i, l.scope, l.value, int64(1)<<50, l.window, map[string]int{"daily": 0, "1h": 3600, "1m": 60}[l.window],
			map[string]string{"daily": "UTC"}[l.window]))
		if err != nil {
			b.Fatal(err)
		}
	}
	return path
}

// runMemChild runs memChild over the database at path in a subprocess,
// with env added, and reports what it prints.
func runMemChild(b *testing.B, path string, keys int, env string) {
	b.Helper()
	for b.Loop() {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "TB_MEM_CHILD="+path, "TB_MEM_KEYS="+strconv.Itoa(keys))
		if env != "" {
			cmd.Env = append(cmd.Env, env)
		}
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			name, v, _ := strings.Cut(line, " ")
			f, _ := strconv.ParseFloat(v, 64)
			b.ReportMetric(f, name)
		}
	}
}
