package budget

import "time"

// The rows and plumbing a Store exchanges with the Tracker's writer and
// reports: counters, holds, reservations as stored, the write set one
// batch applies. The interfaces they serve are in store.go.

// CounterRow is one limit's usage in one window, as stored.
type CounterRow struct {
	LimitID     string
	Subject     string // see Limit.Subject
	WindowStart time.Time
	WindowEnd   time.Time
	Used        int64
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
	Subject       string    // the counter's subject (see Limit.Subject)
	WindowStart   time.Time // zero for leases
	Amount        int64
	ExpiresAt     time.Time
}

// Mark identifies the state a write transaction started from, as one store
// handle sees it. A store promises: if transaction A on this handle started
// at mark m and committed, and the next write transaction on the handle
// starts at m.Next(), nothing but A wrote in between, so what A's caller
// knew when A committed is still true. A store that cannot tell (several
// replicas over a network) returns a mark that never equals a Next.
type Mark struct {
	External uint64 // changes when another connection or process commits
	Local    uint64 // this handle's committed write transactions
}

// Next is the mark of the write transaction that follows m's, when m's
// committed and nothing else wrote.
func (m Mark) Next() Mark { return Mark{External: m.External, Local: m.Local + 1} }

// WindowRef names one counter: limit Limit's window [Start, End) for
// Limit.Subject, zero instants for a concurrent limit's leases. Prev is the
// window before it, whose usage a newly created counter's rollover logs.
type WindowRef struct {
	Limit      *Limit
	Start, End time.Time
	PrevStart  time.Time
	PrevEnd    time.Time
	// NoSeed: the caller only needs to know whether the row exists (it
	// will only add events to it), so a missing row's Used is left 0
	// instead of summing the history.
	NoSeed bool
}

// WindowState is what the store holds for one WindowRef.
type WindowState struct {
	// Used is the counter row's total, or, when Stored is false, the
	// history's sum over the window (a seed not yet stored). 0 for leases.
	Used   int64
	Stored bool
	// Holds are the holds on the window expiring after the read's instant.
	Holds []Hold
	// Only when Stored is false: the newest window start the limit has a
	// row for, for this subject (zero when none), and the usage of the
	// window before (its row, or the history's sum).
	Latest   time.Time
	PrevUsed int64
}

// WriteSet is everything one writer batch writes, applied by Tx.Apply in
// one transaction. It is also where rows that must land with the usage
// they derive from go as they are added: per-day rollups of the events
// and alert outbox rows become fields Apply writes in the same
// transaction, and an event's team, organisation and end user ride on its
// Usage; counters are already per (limit, subject, window), the subject
// being whatever a limit counts for (a key for a default limit, later a
// user for a per-user one).
type WriteSet struct {
	Events   []EventWrite
	Counters []CounterWrite
	// Rollovers to log (one per limit, subject and window start).
	Rollovers []Rollover
	// NewReservations are inserted with their Holds.
	NewReservations []ReservationRow
	Settles         []Settle
	Renewals        []Renewal
	// DeleteSettledBefore, when not zero, deletes reservations settled
	// (committed, released or expired) before it.
	DeleteSettledBefore time.Time
	// DeleteExpiredBefore, when not zero, holds back expired ones (whose
	// commit may still come) settled at or after it; they go only once
	// settled before both instants. It is measured on a clock a forward
	// step of the wall clock cannot push (see retentionClock).
	DeleteExpiredBefore time.Time
	// Retry: a try of this batch before, whose outcome was unknown, may
	// have written some of Events. A store that reports an event the
	// history held with ErrConflict (cheaper than telling which rows went
	// in, when none was held) must tell which instead: the writer learns
	// from Apply's answer which events that try wrote.
	Retry bool
}

// CounterDeltas is what each of w.Counters gains from the events that
// were inserted (inserted[i] for w.Events[i]), saturating at MaxTokens.
func (w *WriteSet) CounterDeltas(inserted []bool) []int64 {
	deltas := make([]int64, len(w.Counters))
	for i := range w.Events {
		if !inserted[i] {
			continue
		}
		for _, a := range w.Events[i].Adds {
			deltas[a.Counter] = min(deltas[a.Counter]+a.Amount, MaxTokens)
		}
	}
	return deltas
}

// EventWrite is one event and what it adds to counters when it is new.
type EventWrite struct {
	Usage Usage // Cost and Unpriced set
	Adds  []CounterAdd
	// NoPrice: no price matched the event (Usage.Unpriced says so only
	// when a usd limit applied); its rollup counts it.
	NoPrice bool
}

// CounterAdd adds Amount to WriteSet.Counters[Counter].
type CounterAdd struct {
	Counter int
	Amount  int64
}

// CounterWrite is one counter row a batch touches. Create means the row did
// not exist when read: it is created holding the history's sum over the
// window (which by then includes the batch's events), or, if another
// transaction created it first, gains the batch's additions like an
// existing row. Sums saturate at MaxTokens.
type CounterWrite struct {
	Ref    WindowRef
	Create bool
	// IfStored: the window had ended when the batch was planned and its
	// row was not read (Config.Backfill). The store adds the batch's
	// additions to the row if there is one, and creates none.
	IfStored bool
}

// Settle ends a reservation: its state and settled-at set, its holds (as
// the reservation lists them) dropped.
type Settle struct {
	ID    string
	State ReservationState
	At    time.Time
	Holds []Hold
}

// Renewal moves a live reservation's expiry and its holds' (except holds at
// Forever), and sets those holds' amounts to Holds' (a lease grows and
// shrinks this way; an ordinary renewal passes them unchanged); Holds are
// the reservation's.
type Renewal struct {
	ID        string
	ExpiresAt time.Time
	Holds     []Hold
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
	ID              string
	Key             string
	Team, Org, User string // see Reservation
	Tags            Tags
	Provider        string
	Model           string
	Estimate        Estimate
	At              time.Time // the instant that picks the windows it counts in
	ExpiresAt       time.Time
	State           ReservationState
	SettledAt       time.Time // when committed, released or recovered
	// OnExpiry is what recovery does with it; "" is stored as ExpireRelease.
	// A recovered (ReservationExpired) ExpireCharge reservation has been
	// charged its estimate.
	OnExpiry ExpiryPolicy
	// Holds are its holds while it is live (or expired unrecovered).
	Holds []Hold
}

// ExpiredBefore is the instant before which expired reservations are
// deleted: the earlier of DeleteSettledBefore and DeleteExpiredBefore.
func (w *WriteSet) ExpiredBefore() time.Time {
	if w.DeleteExpiredBefore.IsZero() || w.DeleteSettledBefore.Before(w.DeleteExpiredBefore) {
		return w.DeleteSettledBefore
	}
	return w.DeleteExpiredBefore
}
