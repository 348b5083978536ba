// Package peers measures tokenbudget's exact admission with budget leases
// side by side with go-redis/redis_rate, 3 limits per request on a
// loopback Redis, in one go test run. It is a module of its own so that
// the main module does not depend on go-redis.
//
//	apt-get install -y redis-server
//	cd bench/peers && go test -run '^$' -bench . -count 6
package peers

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// keys is how many keys both spread their requests over, as the root
// package's ReserveCommit benchmarks do.
const keys = 1000

var redisAddr string

func TestMain(m *testing.M) {
	stop, err := startRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers: no redis-server:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// startRedis runs a redis-server on a free loopback port, without
// persistence (as a rate limiter's Redis usually runs).
func startRedis() (func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	redisAddr = "127.0.0.1:" + strconv.Itoa(port)
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	for i := 0; ; i++ {
		if c.Ping(context.Background()).Err() == nil {
			break
		}
		if i > 100 {
			cmd.Process.Kill()
			return nil, fmt.Errorf("redis on %s did not answer", redisAddr)
		}
		time.Sleep(20 * time.Millisecond) // waiting for a child process to listen: nothing to gate on
	}
	return func() { cmd.Process.Kill(); cmd.Wait() }, nil
}

// parallel runs b.N calls of fn from goroutines goroutines (1: a loop),
// then each of after (timed too), and reports the calls per second as
// pairs/s.
func parallel(b *testing.B, goroutines int, fn func(i int64) error, after ...func() error) {
	b.ResetTimer()
	start := time.Now()
	if goroutines <= 1 {
		var i int64
		for b.Loop() {
			if err := fn(i); err != nil {
				b.Fatal(err)
			}
			i++
		}
	} else {
		var seq atomic.Int64
		b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := fn(seq.Add(1)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	for _, f := range after {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
}

// benchRedisRate is one admission against 3 redis_rate limits (a daily,
// an hourly and a per-minute one, as storetest.SetBenchLimits), each a
// round trip, over keys keys, never refused.
func benchRedisRate(b *testing.B, goroutines int) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 128})
	b.Cleanup(func() { c.Close() })
	lim := redis_rate.NewLimiter(c)
	ctx := context.Background()
	limits := []struct {
		prefix string
		l      redis_rate.Limit
	}{
		{"day:", redis_rate.Limit{Rate: 1 << 40, Burst: 1 << 40, Period: 24 * time.Hour}},
		{"hour:", redis_rate.Limit{Rate: 1 << 40, Burst: 1 << 40, Period: time.Hour}},
		{"min:", redis_rate.Limit{Rate: 1 << 40, Burst: 1 << 40, Period: time.Minute}},
	}
	names := make([][3]string, keys)
	for k := range names {
		for j, l := range limits {
			names[k][j] = l.prefix + storetest.BenchKey(k)
		}
	}
	parallel(b, goroutines, func(i int64) error {
		for j, l := range limits {
			res, err := lim.AllowN(ctx, names[i%keys][j], l.l, 700)
			if err != nil {
				return err
			}
			if res.Allowed == 0 {
				return fmt.Errorf("refused")
			}
		}
		return nil
	})
}

// benchLeases is the root package's ReserveCommit pair with leases on:
// Reserve then Commit, 3 limits per request over keys keys (each warmed
// first), on the default SQLite store.
func benchLeases(b *testing.B, goroutines int) {
	ctx := context.Background()
	cfg := storetest.BenchConfig(func(c *budget.Config) { c.Leases = true })
	db, err := tokenbudget.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close(ctx) })
	storetest.SetBenchLimits(b, db.Tracker, keys)
	reqs := make([]budget.Request, keys)
	for k := range reqs {
		reqs[k] = storetest.BenchReq
		reqs[k].Key = storetest.BenchKey(k)
	}
	pair := func(i int64) error {
		r, err := db.Reserve(ctx, reqs[i%keys], time.Minute)
		if err != nil {
			return err
		}
		_, err = db.Commit(ctx, r.ID, budget.Usage{Input: 400, Output: 100})
		return err
	}
	for i := range keys { // every key's limits cached, its counters written
		if err := pair(int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	storetest.WarmLeases(b, db.Tracker, keys, goroutines, func(k int) error { return pair(int64(k)) })
	before := db.Stats().Leased
	// Sustained, not queued: the last commits' events are still the
	// writer's to write when the last Commit returns.
	parallel(b, goroutines, pair, func() error { _, err := db.Flush(ctx); return err })
	b.StopTimer()
	b.ReportMetric(float64(db.Stats().Leased-before)/float64(b.N), "leased/pair")
}

func BenchmarkPairs1(b *testing.B) {
	b.Run("tokenbudget-leases", func(b *testing.B) { benchLeases(b, 1) })
	b.Run("redis_rate", func(b *testing.B) { benchRedisRate(b, 1) })
}

func BenchmarkPairs64(b *testing.B) {
	b.Run("tokenbudget-leases", func(b *testing.B) { benchLeases(b, 64) })
	b.Run("redis_rate", func(b *testing.B) { benchRedisRate(b, 64) })
}
