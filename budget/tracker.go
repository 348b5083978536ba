package budget

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenbudget/tokenbudget/cache"
)

// Defaults for Config fields.
const (
	DefaultRefreshInterval = time.Second
	// DefaultQueueSize: a batch's worth queued while one is written keeps
	// the writer busy; beyond that a queue only postpones Record's
	// backpressure while it holds memory (~400 bytes an event: 26 MB at
	// 65,536, the default until issue 29, most of it live whenever a
	// load outran the writer). 16,384 still absorbs 16 seconds of a
	// stalled store at 1,000 events a second.
	DefaultQueueSize = 16384
	// DefaultBatchSize: a batch holds what queued while the one before was
	// written, so it reaches this bound only when the writer is behind, and
	// then its cost is mostly the leaf pages of the keys it touches, however
	// many events each has: 16,384 events over 1,000 keys write about a
	// quarter of the pages per event that 4,096 did (BENCHMARKS.md,
	// RecordSustained).
	DefaultBatchSize        = 16384
	DefaultBatchInterval    = 2 * time.Millisecond
	DefaultCounterCacheSize = 200_000
	DefaultLimitCacheSize   = 100_000
	DefaultFlushFailures    = 5
	DefaultReservationTTL   = 2 * time.Minute
	DefaultSettledRetention = 24 * time.Hour
	DefaultSweepInterval    = 15 * time.Second
	DefaultParkRetryAfter   = 60 * time.Second
	DefaultMaxProbeBackoff  = 10 * time.Minute
	DefaultMaxRetryBackoff  = 5 * time.Second
)

// Config tunes a Tracker. Start from DefaultConfig; zero sizes and
// intervals other than RefreshInterval fall back to their defaults.
type Config struct {
	// Now is the clock. (Optional; default time.Now; tests inject one.)
	Now func() time.Time
	// Elapsed is the time since any fixed origin on a clock that cannot
	// jump: how long an expired reservation stays committable is measured
	// on it, so a wall clock set days ahead does not delete reservations
	// whose commits are still to come. (Optional; default Go's monotonic
	// clock when Now is nil, else Now's readings, so a test that moves Now
	// moves both unless it injects Elapsed too.)
	Elapsed func() time.Duration
	// RefreshInterval is how long a cached counter or definition is trusted
	// before it is re-read from the store, so other processes' writes and
	// CLI changes are seen. 0 reads the store on every check.
	RefreshInterval time.Duration
	// QueueSize bounds the events queued for the writer; Record blocks when
	// it is full (about 400 bytes each are held while queued). (Optional;
	// default DefaultQueueSize.)
	QueueSize int
	// BatchSize and BatchInterval bound one write transaction: the writer
	// commits when it holds BatchSize operations or BatchInterval after the
	// first one arrived. (Optional; defaults DefaultBatchSize, DefaultBatchInterval.)
	BatchSize     int
	BatchInterval time.Duration
	// CounterCacheSize and LimitCacheSize bound the caches: counters are
	// (limit, window) pairs, limit entries are API keys. (Optional.)
	CounterCacheSize int
	LimitCacheSize   int
	// Durable makes Record return only once its event is committed (pair it
	// with a store opened with fsync on every commit). (Optional; default false.)
	Durable bool
	// FlushFailures is how many failed attempts at a batch make Flush
	// return the error; the writer keeps retrying. (Optional; default 5.)
	FlushFailures int
	// MaxRetryBackoff caps the writer's wait between attempts at a batch
	// that failed (it starts at 10ms and doubles). Tests of failures lower
	// it so that they do not wait out real seconds. (Optional; default 5s.)
	MaxRetryBackoff time.Duration
	// OnError is called from the writer goroutine for every failed write.
	// (Optional.)
	OnError func(error)
	// ReservationTTL is the default lifetime of a reservation.
	ReservationTTL time.Duration
	// SettledRetention is how long an expired reservation stays committable
	// before recovery deletes it, with settled ones.
	SettledRetention time.Duration
	// SweepInterval is how often the background sweep recovers expired
	// reservations. Negative disables both the sweep and the recovery New
	// runs at start, as read-only tools must. (Optional; default 15s.)
	SweepInterval time.Duration
	// ParkRetryAfter is the parking time when the upstream names none.
	ParkRetryAfter time.Duration
	// MaxProbeBackoff caps how far failed probes push resume-at.
	MaxProbeBackoff time.Duration
	// Leases lets reservations be decided in memory, carved from room the
	// Tracker holds in the store per route (see the package doc). In
	// Durable mode each journal record is on disk (fdatasync) before its
	// Reserve, Commit or Release returns. (Optional; default false.)
	Leases bool
	// LeaseJournal is the directory of the leases' journals (one name per
	// lease), which every process sharing the database must be given: a
	// process that recovers an expired lease reads its journal there.
	// Required with Leases. (tokenbudget.Open puts it beside a SQLite
	// file, FILE.leases; on PostgreSQL the replicas of one machine share
	// one.)
	LeaseJournal string
	// Backfill is for loading history (budget import): an event whose
	// window had ended before the batch that writes it adds to the
	// window's counter row only if the row exists, and creates none, so
	// no rollover is logged into it (contract section 8 logs one when a
	// write creates a row). The window's total is the history's, which a
	// later check, inspect or write of that window seeds its row from, as
	// for any window without a row. Counters of windows that have not
	// ended, and of limits with alert thresholds, are written as always.
	// (Optional; default false.)
	Backfill bool
}

// DefaultConfig returns the configuration Open uses.
func DefaultConfig() Config {
	return Config{RefreshInterval: DefaultRefreshInterval}
}

func (c *Config) fill() {
	if c.Elapsed == nil {
		// Go's monotonic reading (time.Since) when the clock is time.Now;
		// an injected clock stands for both.
		now, origin := c.Now, time.Now()
		if now == nil {
			now = time.Now
		} else {
			origin = now()
		}
		c.Elapsed = func() time.Duration { return now().Sub(origin) }
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.RefreshInterval < 0 {
		c.RefreshInterval = 0
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.QueueSize, DefaultQueueSize)
	def(&c.BatchSize, DefaultBatchSize)
	def(&c.CounterCacheSize, DefaultCounterCacheSize)
	def(&c.LimitCacheSize, DefaultLimitCacheSize)
	def(&c.FlushFailures, DefaultFlushFailures)
	defd(&c.BatchInterval, DefaultBatchInterval)
	defd(&c.ReservationTTL, DefaultReservationTTL)
	defd(&c.SettledRetention, DefaultSettledRetention)
	defd(&c.ParkRetryAfter, DefaultParkRetryAfter)
	defd(&c.MaxProbeBackoff, DefaultMaxProbeBackoff)
	defd(&c.MaxRetryBackoff, DefaultMaxRetryBackoff)
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
}

// Tracker answers whether a key may spend tokens and records what it spent.
//
// Check reads from memory when the cache is warm; Record only queues, and
// one writer goroutine per Tracker commits the queue to the Store in
// batches. Reservations give exact limits under concurrency. A Tracker is
// safe for concurrent use; Close it to flush and stop the writer.
type Tracker struct {
	store    Store
	cfg      Config
	now      func() time.Time
	limits   *cache.Defs[string, *keyLimits]
	counters *cache.Counters
	parked   *cache.Defs[string, *ProviderState] // nil value: not parked
	interned interner                            // what the keys' cache entries share
	prices   atomic.Pointer[priceSnap]           // for checks; nil: load

	queue     chan *op
	closeMu   sync.RWMutex // held for reading while sending on queue
	closed    bool
	stop      chan struct{}
	closingCh chan struct{} // closed as Close starts, so blocked senders give way
	closeOnce sync.Once
	done      chan struct{}
	closeCx   atomic.Pointer[context.Context]

	sweepWG   sync.WaitGroup
	retention retentionClock // what expired reservations' retention is measured on

	stats  trackerStats
	w      writerState // owned by the writer goroutine
	hooks  usageHooks  // the usage outbox's destinations (outbox.go); the writer's
	leases leaseTable
	// horizon is the prune horizon as last read (Unix nanos, 0: none):
	// Record refuses events before it.
	horizon atomic.Int64
	// batchHook, when a test sets it (SetBatchHook), is called on the
	// writer goroutine as a try is about to write its plan and once it
	// has: what the batch holds then is what a memory test measures.
	batchHook atomic.Pointer[func()]
	// planFault, when a test sets it (SetPlanFault), makes needWindow skip
	// a per-user or per-tag window whatever its value, as a wrong skip rule
	// would: the writer must recover (batch.plain).
	planFault atomic.Bool
}

// New starts a Tracker over store. It recovers expired reservations once
// and starts the writer and the background sweep.
func New(ctx context.Context, store Store, cfg Config) (*Tracker, error) {
	if store == nil {
		return nil, errors.New("budget: New needs a Store")
	}
	if cfg.Leases && cfg.LeaseJournal == "" {
		return nil, invalid("lease_journal", "", "must name a directory when leases are on")
	}
	if cfg.Leases {
		if err := os.MkdirAll(cfg.LeaseJournal, 0o700); err != nil {
			return nil, fmt.Errorf("budget: lease journal: %w", err)
		}
	}
	cfg.fill()
	t := &Tracker{
		store:     store,
		cfg:       cfg,
		now:       cfg.Now,
		limits:    cache.NewDefs[string, *keyLimits](cfg.LimitCacheSize),
		counters:  cache.NewCounters(cfg.CounterCacheSize),
		parked:    cache.NewDefs[string, *ProviderState](cfg.LimitCacheSize),
		queue:     make(chan *op, cfg.QueueSize),
		stop:      make(chan struct{}),
		closingCh: make(chan struct{}),
		done:      make(chan struct{}),
	}
	t.w.init()
	t.interned.init()
	t.leases.init()
	if cfg.LeaseJournal != "" {
		t.leases.journals = newJournals(cfg.LeaseJournal, cfg.Durable)
	}
	t.startRetention()
	go t.writeLoop() // recovery runs on the writer
	// Record refuses events before the prune horizon from the start; if the
	// store cannot say yet, the writer's first batch reads it (its limits
	// version starts unknown).
	_, _ = t.PrunedBefore(ctx)
	if cfg.SweepInterval > 0 {
		if _, err := t.Recover(ctx, t.now()); err != nil {
			_ = t.Close(context.Background())
			return nil, fmt.Errorf("budget: recover expired reservations: %w", err)
		}
		t.sweepWG.Add(1)
		go t.sweep()
	}
	if t.leasesOn() {
		t.sweepWG.Add(1)
		go t.leaseTicker()
	}
	return t, nil
}

// sweep recovers expired reservations every Config.SweepInterval until Close.
func (t *Tracker) sweep() {
	defer t.sweepWG.Done()
	tk := time.NewTicker(t.cfg.SweepInterval)
	defer tk.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tk.C:
			if _, err := t.Recover(context.Background(), t.now()); err != nil && t.cfg.OnError != nil {
				t.cfg.OnError(fmt.Errorf("budget: sweep: %w", err))
			}
		}
	}
}

// Now is the tracker's clock.
func (t *Tracker) Now() time.Time { return t.now() }

// fresh reports whether something loaded at loadedAt may still be trusted
// at clock (both Unix nanos of the tracker's clock). The readings are wall
// time (the monotonic one is gone once in Unix nanos, and an injected clock
// has none), so a negative age means the clock stepped back: it counts as
// stale, or the cache would be frozen for the size of the step. The re-read
// stamps the new reading, so the cache serves again at once.
func (t *Tracker) fresh(loadedAt, clock int64) bool {
	age := clock - loadedAt
	return loadedAt != 0 && t.cfg.RefreshInterval > 0 && age >= 0 && age < int64(t.cfg.RefreshInterval)
}
