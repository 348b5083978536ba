package budget

import (
	"context"
	"math"
	"time"
)

// Store is the durable state behind a Tracker: SQLite by default,
// PostgreSQL for several replicas. It knows no budget rules: the Tracker runs
// them inside the transactions a Store opens, so every backend enforces the
// same contract.
//
// Implementations MUST be safe for concurrent use by several goroutines and
// by several processes sharing the database, and MUST retry transient
// conflicts (SQLITE_BUSY, serialization failures, deadlocks) themselves.
type Store interface {
	// Update runs fn in one write transaction and commits it when fn returns
	// nil. fn may run more than once (after a transient conflict), so it
	// must have no effects outside tx until Update returns.
	Update(ctx context.Context, fn func(Tx) error) error
	// View runs fn in a read-only transaction over one consistent snapshot.
	// Write methods of tx fail inside View.
	View(ctx context.Context, fn func(Tx) error) error
	// Stats reports the store's retries and failures so far.
	Stats() StoreStats
	Close() error
}

// StoreStats counts what a Store retried and what it gave up on.
type StoreStats struct {
	Retries  int64 // transient conflicts retried (SQLITE_BUSY, serialization)
	Failures int64 // transactions that returned an error
}

// CounterRow is one limit's usage in one window, as stored.
type CounterRow struct {
	LimitID     string
	Subject     string // the key of a default limit's counter; "" otherwise
	WindowStart time.Time
	WindowEnd   time.Time
	Used        int64
}

// CounterDelta is an amount to add to one limit window's counter.
type CounterDelta struct {
	LimitID     string
	Subject     string
	WindowStart time.Time
	Delta       int64
}

// Rollover records that a limit entered a new window while the one before had
// usage (contract section 8).
type Rollover struct {
	LimitID         string
	Subject         string
	PrevWindowStart time.Time
	PrevUsed        int64
	WindowStart     time.Time
	LoggedAt        time.Time
}

// Hold is what one reservation holds against one limit. A concurrent limit's
// hold is its lease: Amount 1, no window.
type Hold struct {
	ReservationID string
	LimitID       string
	Subject       string    // the reservation's key when the limit is a default; "" otherwise
	WindowStart   time.Time // zero for leases
	Amount        int64
	ExpiresAt     time.Time
}

// ReservationState is where a reservation is in its life.
type ReservationState string

const (
	ReservationLive      ReservationState = "live"
	ReservationCommitted ReservationState = "committed"
	ReservationReleased  ReservationState = "released"
	ReservationExpired   ReservationState = "expired" // recovered; still committable for a while
)

// ReservationRow is a reservation as stored.
type ReservationRow struct {
	ID        string
	Key       string
	Provider  string
	Model     string
	Estimate  Estimate
	At        time.Time // the instant that picks the windows it counts in
	ExpiresAt time.Time
	State     ReservationState
	SettledAt time.Time // when committed, released or recovered
	// OnExpiry is what recovery does with it; "" is stored as ExpireRelease.
	// A recovered (ReservationExpired) ExpireCharge reservation has been
	// charged its estimate.
	OnExpiry ExpiryPolicy
}

// NoExpiry is the ExpiresAt of a hold that counts until its reservation is
// settled: the window holds of an ExpireCharge reservation. It is the
// largest instant Unix nanoseconds hold, so every "expires after now"
// comparison keeps it.
var NoExpiry = time.Unix(0, math.MaxInt64).UTC()

// GatewayKey is a proxy credential; only the SHA-256 of its secret is stored.
type GatewayKey struct {
	Name      string
	Hash      string // hex SHA-256 of the secret
	CreatedAt time.Time
	RevokedAt time.Time // zero while usable
	// PrevHash is the hash of the secret a rotation replaced, still
	// accepted until PrevUntil (the grace period); "" when none.
	PrevHash  string
	PrevUntil time.Time
	// LastUsedAt is when the key was last seen, to within a minute
	// (zero: never).
	LastUsedAt time.Time
}

// Accepts reports whether a secret with hash hash opens this key at now:
// the key is not revoked and hash is its secret's, or its previous
// secret's within the grace period of a rotation.
func (k *GatewayKey) Accepts(hash string, now time.Time) bool {
	if !k.RevokedAt.IsZero() || hash == "" {
		return false
	}
	return hash == k.Hash || hash == k.PrevHash && now.Before(k.PrevUntil)
}

// Tx is one transaction of a Store. Times are stored with nanosecond
// precision. Methods that find nothing return ErrNotFound unless they say
// otherwise.
type Tx interface {
	// LimitsVersion changes whenever any limit is created, changed or
	// deleted, by any process.
	LimitsVersion(ctx context.Context) (int64, error)
	// Limits lists the limits of key and the default limits (Key ""), or
	// every limit when key is "", unordered.
	Limits(ctx context.Context, key string) ([]Limit, error)
	Limit(ctx context.Context, id string) (Limit, error)
	InsertLimit(ctx context.Context, l Limit, now time.Time) error
	// UpdateLimit replaces the mutable attributes of the limit with l.ID.
	UpdateLimit(ctx context.Context, l Limit, now time.Time) error
	// DeleteLimit removes a limit with its counters, rollovers and holds.
	DeleteLimit(ctx context.Context, id string) error
	// LockLimits blocks concurrent transactions that lock any of ids until
	// this one ends, so reservations on one limit are decided one at a time.
	// Callers pass ids in ascending order. A store whose write transactions
	// are already serialised may do nothing.
	LockLimits(ctx context.Context, ids []string) error

	// PricesVersion changes whenever a price is added or replaced, by any
	// process.
	PricesVersion(ctx context.Context) (int64, error)
	// Prices lists every price version, unordered.
	Prices(ctx context.Context) ([]Price, error)
	// UnpricedEvents counts the history's events written with no price.
	UnpricedEvents(ctx context.Context) (int64, error)
	// PutPrices stores prices, replacing any with the same provider, model
	// and From, and moves PricesVersion.
	PutPrices(ctx context.Context, ps []Price) error

	// InsertUsage appends events (with their Cost and Unpriced) to the
	// history; inserted[i] is false when (key, request_id) was already
	// stored (a duplicate).
	InsertUsage(ctx context.Context, events []Usage) (inserted []bool, err error)
	// SumUsage is the history's total for limit l's owner (l.Owner()),
	// scope and metric over [start, end).
	SumUsage(ctx context.Context, l *Limit, start, end time.Time) (int64, error)

	// Counter reads one counter row; ok is false when there is none.
	// Counters are identified by (limit, subject, window start): subject is
	// the key of a default limit's counter, "" for a key's own limit.
	Counter(ctx context.Context, limitID, subject string, start time.Time) (used int64, ok bool, err error)
	// AddCounters adds each delta to its existing row; found[i] is false
	// when deltas[i] has no row (nothing was added for it).
	AddCounters(ctx context.Context, deltas []CounterDelta) (found []bool, err error)
	// CreateCounter creates l's row (subject l.Subject) seeded from the history of [start, end)
	// as this transaction sees it. If a concurrent transaction created it
	// first, delta is added to that row instead and created is false.
	CreateCounter(ctx context.Context, l *Limit, start, end time.Time, delta int64) (created bool, err error)
	// LatestCounterStart is the newest window start the limit has a row
	// for, for subject.
	LatestCounterStart(ctx context.Context, limitID, subject string) (start time.Time, ok bool, err error)
	// CounterRows lists every counter row, for verify.
	CounterRows(ctx context.Context) ([]CounterRow, error)

	// InsertRollover logs r unless one exists for (r.LimitID, r.Subject, r.WindowStart).
	InsertRollover(ctx context.Context, r Rollover) error
	// Rollovers lists the newest n rollovers of key's limits, its default
	// limits' counters included ("" for all).
	Rollovers(ctx context.Context, key string, n int) ([]Rollover, error)

	// Holds lists the holds on a limit's window for subject (zero start
	// for leases) expiring after now.
	Holds(ctx context.Context, limitID, subject string, start, now time.Time) ([]Hold, error)
	// HoldsSummary is Holds aggregated: the amount held, the number of
	// holds, and the earliest expiry (zero when none).
	HoldsSummary(ctx context.Context, limitID, subject string, start, now time.Time) (sum, count int64, next time.Time, err error)
	InsertReservation(ctx context.Context, r ReservationRow, holds []Hold) error
	Reservation(ctx context.Context, id string) (ReservationRow, error)
	// ReservationHolds lists the holds of reservation id.
	ReservationHolds(ctx context.Context, id string) ([]Hold, error)
	// SettleReservation sets state and settled-at and drops its holds,
	// returning them.
	SettleReservation(ctx context.Context, id string, state ReservationState, at time.Time) ([]Hold, error)
	// RenewReservation moves the expiry of a reservation and of its holds,
	// except holds at NoExpiry, which stay there.
	RenewReservation(ctx context.Context, id string, expiresAt time.Time) error
	// ExpiredReservations lists live reservations whose expiry is at or before now.
	ExpiredReservations(ctx context.Context, now time.Time, max int) ([]ReservationRow, error)
	// DeleteSettledBefore removes reservations settled before t.
	DeleteSettledBefore(ctx context.Context, t time.Time) (int64, error)

	Provider(ctx context.Context, name string) (ProviderState, error)
	Providers(ctx context.Context) ([]ProviderState, error)
	// ParkProvider parks p, or refreshes the kind, times and labels of a
	// parked one while keeping its probe-failure count.
	ParkProvider(ctx context.Context, p ProviderState) error
	// DeleteProvider unparks; it reports whether the provider was parked.
	DeleteProvider(ctx context.Context, name string) (bool, error)
	// ProbeFailed atomically adds one probe failure, sets resume-at to the
	// value next computes from the new count, and drops any probe claim.
	ProbeFailed(ctx context.Context, name string, next func(ProviderState) time.Time) (ProviderState, error)
	// ClaimProbe takes the provider's probe claim until until, if it is past
	// its resume-at and no other live claim holds it (a prober working from
	// a stale list cannot probe again right after another's failure); ok
	// reports whether this caller got it.
	ClaimProbe(ctx context.Context, name, owner string, now, until time.Time) (ok bool, err error)

	InsertKey(ctx context.Context, k GatewayKey) error
	// KeyByHash finds the key whose secret, or previous secret, hashes to
	// hash, revoked or not and whatever the grace period: GatewayKey.Accepts
	// decides.
	KeyByHash(ctx context.Context, hash string) (GatewayKey, error)
	// RotateKey gives the live key name the secret hashing to hash, keeping
	// the current one as its previous secret until graceUntil. ErrNotFound
	// when there is no such key; invalid when it is revoked.
	RotateKey(ctx context.Context, name, hash string, graceUntil time.Time) error
	// ReuseKey gives a revoked key's name to k (a new secret, no use yet),
	// keeping the name's limits. ErrNotFound when there is no such key;
	// invalid when it is not revoked.
	ReuseKey(ctx context.Context, k GatewayKey) error
	// TouchKey records a use of key name at at, unless one was recorded
	// within the minute before: at most one write a minute per key.
	TouchKey(ctx context.Context, name string, at time.Time) error
	Keys(ctx context.Context) ([]GatewayKey, error)
	RevokeKey(ctx context.Context, name string, at time.Time) error
}
