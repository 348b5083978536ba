package budget

import (
	"context"
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

// Team is a group of keys that share the team's limits, inside an
// organisation ("" for none) whose keys share the organisation's limits.
type Team struct {
	Name string
	Org  string
	Keys []string
}

// HotTx is what the writer's batch needs on every commit: the locks, the
// windows and reservations it decides on, and one call that applies what
// it decided. A backend implements it (with DefinitionsTx) before anything
// else; the locking contract on Tx is about these methods.
type HotTx interface {
	// The hot path: reads over sets, one explicit lock, one write (see
	// the locking contract above).
	// Mark identifies the database state this transaction started from,
	// as seen through this store handle. See Mark.
	Mark(ctx context.Context) (Mark, error)
	// LockReservations locks the reservations ids (ascending) until the
	// transaction ends. Ids that do not exist are skipped.
	LockReservations(ctx context.Context, ids []string) error
	// LockLimits locks the limits ids (ascending) until the transaction
	// ends, so decisions on one limit's windows are made one at a time.
	LockLimits(ctx context.Context, ids []string) error
	// Windows reads the counters of refs, with their holds expiring after
	// now: WindowState i answers refs[i].
	// One statement per kind of row however many refs.
	Windows(ctx context.Context, refs []WindowRef, now time.Time) ([]WindowState, error)
	// Reservations reads the reservations ids with their holds; an id with
	// no row is left out.
	Reservations(ctx context.Context, ids []string) ([]ReservationRow, error)
	// ExpiredReservations lists, with their holds, live reservations whose
	// expiry is at or before now, oldest first, at most max.
	ExpiredReservations(ctx context.Context, now time.Time, max int) ([]ReservationRow, error)
	// Apply writes w, in this order: the events (duplicates of a stored
	// (key, request_id) skipped) with their daily rollups (w.Rollups of
	// the events inserted), the counters (missing rows created from
	// the history, which then holds w's events; existing rows gain the sum
	// of their inserted events' contributions), the rollovers (existing ones
	// kept), the new reservations with their holds, the settlements (their
	// holds dropped), the renewals, and the deletion of reservations settled
	// before w.DeleteSettledBefore. inserted[i] reports whether w.Events[i]
	// was new. A counter w expects to exist that has no row fails Apply
	// with ErrConflict, as does a reservation to settle that is not live or
	// expired: the caller's view was stale; it re-reads and plans again.
	Apply(ctx context.Context, w *WriteSet) (inserted []bool, deleted int64, err error)
}

// DefinitionsTx reads and changes what limits say: limits, raises,
// teams, organisations and key placements, and the price table, each with
// a version that tells a cache it is stale.
type DefinitionsTx interface {
	// LimitsVersion changes whenever any limit is created, changed or
	// deleted, by any process. In a write transaction a store may also lock
	// the limit definitions shared from here until the transaction ends, so
	// that what the transaction resolved from the version stays true
	// (PostgreSQL does; limit changes take that lock exclusively). It is
	// the one read that may lock.
	LimitsVersion(ctx context.Context) (int64, error)
	// LockDefinitions takes, until the transaction ends, the lock every
	// change to limits, raises, teams, organisations and placements takes,
	// exclusively: an admin write calls it first, so the checks it makes
	// before writing (a team exists, no org has its name) still hold when
	// it writes. A store whose write transactions are serialised already
	// (SQLite) does nothing.
	LockDefinitions(ctx context.Context) error
	// Limits lists the limits of key and the default limits, or every
	// limit when key is "", unordered, each with its raises that have not
	// ended (Until zero or after now is the caller's to judge: the store
	// may keep ended ones).
	Limits(ctx context.Context, key string) ([]Limit, error)
	// OwnedLimits lists the limits of one team (level LevelTeam) or
	// organisation (LevelOrg), unordered, with their raises.
	OwnedLimits(ctx context.Context, level Level, owner string) ([]Limit, error)
	// Placement is key's team and that team's organisation ("" for none).
	Placement(ctx context.Context, key string) (team, org string, err error)
	// Teams lists every team with its organisation and its keys (each
	// list sorted), sorted by name.
	Teams(ctx context.Context) ([]Team, error)
	// Orgs lists every organisation named so far, sorted.
	Orgs(ctx context.Context) ([]string, error)
	// PutTeam creates team t, or moves it to t.Org ("" for none), creating
	// the organisation when it is new; t.Keys is ignored. The caller has
	// checked that no organisation is named t.Name and no team t.Org.
	// Like every change to limits it moves LimitsVersion.
	PutTeam(ctx context.Context, t Team) error
	// DeleteTeam removes a team; its keys are left in no team. It moves
	// LimitsVersion.
	DeleteTeam(ctx context.Context, name string) error
	// SetKeyTeam places key in team ("" for none; the team exists). It
	// moves LimitsVersion.
	SetKeyTeam(ctx context.Context, key, team string) error
	// AddRaise adds r to limit limitID. It moves LimitsVersion.
	AddRaise(ctx context.Context, limitID string, r Raise) error
	Limit(ctx context.Context, id string) (Limit, error)
	InsertLimit(ctx context.Context, l Limit, now time.Time) error
	// UpdateLimit replaces the mutable attributes of the limit with l.ID.
	UpdateLimit(ctx context.Context, l Limit, now time.Time) error
	// DeleteLimit removes a limit with its counters, rollovers and holds.
	DeleteLimit(ctx context.Context, id string) error
	// PricesVersion changes whenever a price is added or replaced, by any
	// process.
	PricesVersion(ctx context.Context) (int64, error)
	// Versions is LimitsVersion (with its lock) and PricesVersion in one
	// read.
	Versions(ctx context.Context) (limits, prices int64, err error)
	// Prices lists every price version, unordered.
	Prices(ctx context.Context) ([]Price, error)
	// UnpricedEvents counts the history's events written with no price.
	UnpricedEvents(ctx context.Context) (int64, error)
	// PutPrices stores prices, replacing any with the same provider, model
	// and From, and moves PricesVersion.
	PutPrices(ctx context.Context, ps []Price) error
	// DeletePrice removes the price version with p's provider, model,
	// tier, threshold and From (none: no error), and moves PricesVersion.
	DeletePrice(ctx context.Context, p Price) error
}

// HistoryTx reads the usage history and what is derived from it (sums that
// seed counters, rollups, reports, verify's counters, rollovers) and prunes
// it.
type HistoryTx interface {
	// SumUsage is the history's total over [start, end) of the events
	// l.History() selects, in l's metric. The part of the range before
	// the prune horizon (PrunedBefore, a UTC midnight) is summed from the
	// daily rollups of the whole days in it: exact when start is a UTC
	// midnight; otherwise the pruned part of start's day is missing (Prune
	// refuses to cut into a limit's current window, so only a limit
	// created after a prune with a window unaligned to UTC days can meet
	// that).
	SumUsage(ctx context.Context, l *Limit, start, end time.Time) (int64, error)
	// Rollups sums the daily rollups of the days in [from, to) (UTC
	// midnights), key's only unless key is "", per day and the columns of
	// by (RollupColumns: the dimensions but day, week and month; the
	// others are left empty in the result). Unordered.
	Rollups(ctx context.Context, from, to time.Time, key string, by []Dim) ([]Rollup, error)
	// EventTotals sums the events in [from, to) as Rollups sums rollups:
	// what the rollups of those events hold. Unordered.
	EventTotals(ctx context.Context, from, to time.Time, key string, by []Dim) ([]Rollup, error)
	// Events calls fn with every event in [from, to), key's only unless
	// key is "", ordered by instant, key and request id, as stored: Cost,
	// Unpriced, NoPrice and the team and org it was charged to (CostKnown
	// and Placed set). fn's error stops it and is returned.
	Events(ctx context.Context, from, to time.Time, key string, fn func(Usage) error) error
	// PrunedBefore is the prune horizon: the events before it were
	// deleted, their rollups kept. Zero when nothing was pruned.
	PrunedBefore(ctx context.Context) (time.Time, error)
	// Prune deletes the events before before (a UTC midnight later than
	// the horizon) and moves the horizon there. It returns the events
	// deleted, holding from then on the lock LockDefinitions takes, so
	// the checks its caller makes next see every definition committed.
	Prune(ctx context.Context, before time.Time) (int64, error)
	// OpenReservationsBefore lists up to max reservations whose instant
	// is before before and that are live, or expired and settled at or
	// after committable (still committable).
	OpenReservationsBefore(ctx context.Context, before, committable time.Time, max int) ([]ReservationRow, error)
	// Subjects lists, sorted, the subjects that limit id has a counter row
	// or a hold for in the window starting at start (zero: its leases).
	Subjects(ctx context.Context, id string, start time.Time) ([]string, error)
	// CounterRows lists every counter row, for verify.
	CounterRows(ctx context.Context) ([]CounterRow, error)
	// Rollovers lists the newest n rollovers of key's limits, its default
	// limits' counters included ("" for all).
	Rollovers(ctx context.Context, key string, n int) ([]Rollover, error)
}

// AlertTx is the alerts outbox: logged alerts, claimed by one deliverer at
// a time and settled when delivered or rescheduled.
type AlertTx interface {
	// LogAlerts logs alerts; one the store already has for its (limit,
	// subject, window, threshold) is skipped, so each is logged once.
	LogAlerts(ctx context.Context, as []Alert) error
	// Alerts lists the newest n alerts, newest first.
	Alerts(ctx context.Context, n int) ([]Alert, error)
	// ClaimAlerts claims for owner until until up to max undelivered
	// alerts whose next attempt is due at now and that no other owner's
	// live claim holds, oldest first.
	ClaimAlerts(ctx context.Context, owner string, now, until time.Time, max int) ([]Alert, error)
	// SettleAlert reports on alert id, claimed by owner: delivered at
	// deliveredAt when that is not zero, else failed, to be tried again
	// from next (its attempts counted). Either way the claim ends. An
	// alert whose claim is no longer owner's (or that is delivered) fails
	// with ClaimLost.
	SettleAlert(ctx context.Context, id, owner string, deliveredAt, next time.Time) error
}

// ProviderTx is the parking state of providers and the claim on their
// probes.
type ProviderTx interface {
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
}

// Tx is one transaction of a Store: the two roles every backend
// implements, HotTx (what the writer decides on and writes) and
// DefinitionsTx (what limits, teams and prices say). HistoryTx, AlertTx,
// ProviderTx, AuditTx and OutboxTx are optional: a backend offers them by implementing them
// on the same transaction value, and the Tracker finds them by type
// assertion (roles.go says what works without each), so a new backend
// runs the writer once it has the two required roles. Times are stored
// with nanosecond precision. Methods that find nothing return ErrNotFound
// unless they say otherwise.
//
// Locking contract. No read takes a lock but LimitsVersion (see there). A
// write transaction that decides
// on counters and holds (reservations, commits, releases, renewals,
// recovery, and events, which change counters) first calls
// LockReservations with every reservation it will settle or renew, then
// LockLimits with every limit whose windows it reads or writes, each at
// most once and with ids in ascending order; only then does it read them.
// Writers that all follow that order cannot deadlock, and while one holds
// its locks no other transaction can change those reservations, or the
// counters and holds of those limits, so its separate reads of a window
// (the counter, then the holds) agree even under READ COMMITTED. Admin
// writes take the same rows' locks implicitly (updating or deleting a
// limit row). A store whose write transactions are already serialised
// (SQLite's BEGIN IMMEDIATE) implements both locks as no-ops.
type Tx interface {
	HotTx
	DefinitionsTx
}
