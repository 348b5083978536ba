package budget

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode"
)

// The usage outbox: every recorded event, queued for delivery elsewhere
// (a billing system's webhook, a library hook) exactly as the history
// holds it.
//
// A destination is registered once (AddUsageHook) and stays until it is
// removed (RemoveUsageHook), across restarts. While it is registered,
// every transaction that inserts events into the history, in any process
// and by any path (Record, Commit, lease batches and their :late events,
// RecordSync and so import), queues one outbox row per inserted event for
// it, in that same transaction: of the events written while it is
// registered, the history holds exactly those queued for it (or
// delivered). A duplicate inserts nothing and queues nothing. Events recorded while no destination is registered are never
// queued.
//
// The writer learns the destinations the way it learns limits: a change
// to them moves the limits version, which every write transaction
// confirms (on PostgreSQL under the shared definitions lock, which the
// change takes exclusively), so no transaction that commits after a
// registration can miss it. With no destination the writer issues no
// statement at all.
//
// Delivery is at least once, from any number of deliverers: each claims
// a destination's due rows (ClaimUsage) and reports them delivered (the
// rows go) or failed (tried again after UsageRetryDelay). Order is per
// key: a key's rows are claimed only from its oldest pending one, and
// not while any of them is waiting for a retry or held by another
// deliverer's live claim, so a key's events reach a destination in the
// order they were queued. (Two transactions of one key that overlap on
// PostgreSQL, neither committed when the other began, have no order
// between them to keep: either may come first.) Rows are identified by
// a sequence number, never read past by a cursor, so an event committed
// late is delivered all the same.

// OutboxEvent is what the outbox queues of an event: its identity and
// instant (the payload is read from the history when it is delivered).
type OutboxEvent struct {
	Key       string
	RequestID string
	At        time.Time
}

// OutboxItem is one claimed row: its event as the history holds it.
type OutboxItem struct {
	Seq      int64 // the row's place in the outbox: queued order
	Dest     string
	Event    Usage // as HistoryTx.Events reads it
	Found    bool  // false: the history no longer holds the event
	QueuedAt time.Time
	Attempts int // failed deliveries so far
}

// OutboxBacklog is what one destination has not received yet.
type OutboxBacklog struct {
	Kind string // OutboxUsage or OutboxAlert
	// Dest is the usage destination; "" for alerts (their webhook is
	// each deliverer's --alert-webhook).
	Dest    string
	Pending int64
	// Oldest is when the oldest pending row was queued (zero: none).
	Oldest time.Time
	// Attempts is the most failed deliveries of a pending row;
	// LastError the error of the latest one ("" when unknown).
	Attempts  int
	LastError string
	// NextAttempt is the earliest instant a failed row is tried again
	// (zero: none is waiting).
	NextAttempt time.Time
}

// The kinds of outbox backlog.
const (
	OutboxUsage = "usage"
	OutboxAlert = "alert"
)

// OutboxTx is the usage outbox: its destinations and the rows queued for
// them.
type OutboxTx interface {
	// UsageHooks lists the registered destinations, sorted bytewise.
	UsageHooks(ctx context.Context) ([]string, error)
	// AddUsageHook registers dest at at; added is false when it was
	// registered already (nothing changes then). Adding moves
	// LimitsVersion.
	AddUsageHook(ctx context.Context, dest string, at time.Time) (added bool, err error)
	// DeleteUsageHook unregisters dest and drops its pending rows
	// (dropped), moving LimitsVersion; ErrNotFound when it was not
	// registered and had no rows.
	DeleteUsageHook(ctx context.Context, dest string) (dropped int64, err error)
	// EnqueueUsage queues evs, in order, for every destination of dests,
	// at queued, each due at once.
	EnqueueUsage(ctx context.Context, dests []string, evs []OutboxEvent, queued time.Time) error
	// ClaimUsage claims for owner until until up to max rows of dest, in
	// queued order, each due at now, taking a key's rows only from its
	// oldest one and none of a key that has a row not due at now or
	// held by another owner's live claim. Each comes with its event.
	ClaimUsage(ctx context.Context, dest, owner string, now, until time.Time, max int) ([]OutboxItem, error)
	// UsageDue reports whether ClaimUsage would claim a row (due), and
	// whether dest has any row at all (pending): a read, so that a
	// deliverer with nothing to do writes nothing.
	UsageDue(ctx context.Context, dest, owner string, now time.Time) (due, pending bool, err error)
	// SettleUsage reports on the rows seqs of dest claimed by owner:
	// delivered when next is zero (the rows go), else failed, to be tried
	// again from next with lastErr kept (their attempts counted). Either
	// way their claim ends. If any row is no longer owner's, it fails with
	// ClaimLost and changes nothing.
	SettleUsage(ctx context.Context, dest, owner string, seqs []int64, next time.Time, lastErr string) error
	// OutboxBacklog sums what is pending: one OutboxBacklog per usage
	// destination with rows (or registered), and one for alerts if any
	// is undelivered; usage ones sorted by Dest, the alerts' last.
	OutboxBacklog(ctx context.Context) ([]OutboxBacklog, error)
	// OutboxBefore counts the pending rows whose event is before t.
	OutboxBefore(ctx context.Context, t time.Time) (int64, error)
}

func outboxTx(tx Tx) (OutboxTx, error) { return txRole[OutboxTx](tx, "OutboxTx") }

// CloudEvent ids: hex of the first 16 bytes of SHA-256 over key, NUL,
// request id. Keys and request ids may hold any printable character, so
// no separator could join them unambiguously; NUL is in neither.
const eventIDPrefix = "ev_"

// EventID is the stable id of the event (key, requestID): the same in
// every delivery of it, and different for any other event, so a receiver
// deduplicates on it.
func EventID(key, requestID string) string {
	h := sha256.New()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(requestID))
	return eventIDPrefix + hex.EncodeToString(h.Sum(nil)[:16])
}

// UsageRetryDelay is the wait after a row's n-th failed delivery: as
// AlertRetryDelay, 1 s doubling to at most 5 minutes.
func UsageRetryDelay(n int) time.Duration { return AlertRetryDelay(n) }

// CheckUsageHook validates a destination's name: a name (CheckName) that
// is not blank. A webhook's is its URL.
func CheckUsageHook(dest string) error {
	if strings.TrimSpace(dest) == "" {
		return invalid("destination", dest, "must not be empty")
	}
	return CheckName("destination", dest)
}

// CheckWebhookURL validates a webhook's URL, naming field in the error.
func CheckWebhookURL(field, v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid(field, v, "want an http or https URL such as https://hooks.example.com/budget")
	}
	return CheckName(field, v)
}

// usageHooks is the writer's copy of the registered destinations, valid
// at the limits version it was read at.
type usageHooks struct {
	loaded  bool
	version int64
	dests   []string
}

// enqueueUsage queues the events of w that the history took (inserted)
// for every registered destination, in tx: the write path's one outbox
// statement, and none when no destination is registered or the store has
// no outbox. The writer calls it right after Apply, with the limits
// version it confirmed in this transaction in t.w.version.
func (t *Tracker) enqueueUsage(ctx context.Context, tx Tx, w *WriteSet, inserted []bool, now time.Time) error {
	o, ok := tx.(OutboxTx)
	if !ok {
		return nil
	}
	h := &t.hooks
	if !h.loaded || h.version != t.w.version {
		dests, err := o.UsageHooks(ctx)
		if err != nil {
			return err
		}
		*h = usageHooks{loaded: true, version: t.w.version, dests: dests}
	}
	if len(h.dests) == 0 {
		return nil
	}
	evs := make([]OutboxEvent, 0, len(w.Events))
	for i := range w.Events {
		if inserted[i] {
			u := &w.Events[i].Usage
			evs = append(evs, OutboxEvent{Key: u.Key, RequestID: u.RequestID, At: u.At})
		}
	}
	if len(evs) == 0 {
		return nil
	}
	return o.EnqueueUsage(ctx, h.dests, evs, now)
}

// AddUsageHook registers dest: from when it returns, every event any
// process records is queued for it until RemoveUsageHook. added is false
// when dest was registered already.
func (t *Tracker) AddUsageHook(ctx context.Context, dest string) (added bool, err error) {
	if err := CheckUsageHook(dest); err != nil {
		return false, err
	}
	now := t.now()
	return inOutbox(ctx, t.store.Update, func(tx Tx, o OutboxTx) (bool, error) {
		if err := tx.LockDefinitions(ctx); err != nil {
			return false, err
		}
		return o.AddUsageHook(ctx, dest, now)
	})
}

// RemoveUsageHook unregisters dest and drops what was queued for it and
// not delivered (dropped). ErrNotFound when dest was unknown.
func (t *Tracker) RemoveUsageHook(ctx context.Context, dest string) (dropped int64, err error) {
	if err := CheckUsageHook(dest); err != nil {
		return 0, err
	}
	return inOutbox(ctx, t.store.Update, func(tx Tx, o OutboxTx) (int64, error) {
		if err := tx.LockDefinitions(ctx); err != nil {
			return 0, err
		}
		return o.DeleteUsageHook(ctx, dest)
	})
}

// UsageHooks lists the registered destinations.
func (t *Tracker) UsageHooks(ctx context.Context) ([]string, error) {
	return inOutbox(ctx, t.store.View, func(_ Tx, o OutboxTx) ([]string, error) { return o.UsageHooks(ctx) })
}

// ClaimUsage claims up to max rows of dest due now for owner until
// now+ttl, in queued order and key by key (OutboxTx.ClaimUsage).
func (t *Tracker) ClaimUsage(ctx context.Context, dest, owner string, ttl time.Duration, max int) ([]OutboxItem, error) {
	if strings.TrimSpace(owner) == "" {
		return nil, invalid("owner", owner, "must not be empty")
	}
	if max <= 0 {
		return nil, invalid("max", max, "must be positive")
	}
	// A read first: a write transaction, even one that claims nothing,
	// makes this process's writer re-read what it holds (Tx.Mark), and a
	// deliverer asks every second.
	if due, _, err := t.UsageDue(ctx, dest, owner); err != nil || !due {
		return nil, err
	}
	now := t.now()
	return inOutbox(ctx, t.store.Update, func(_ Tx, o OutboxTx) ([]OutboxItem, error) {
		return o.ClaimUsage(ctx, dest, owner, now, now.Add(ttl), max)
	})
}

// UsageDue reports whether a claim of dest by owner now would take a row
// (due), and whether dest has any row queued (pending): all of them
// waiting for a retry or held by other owners when pending but not due.
// A read.
func (t *Tracker) UsageDue(ctx context.Context, dest, owner string) (due, pending bool, err error) {
	now := t.now()
	err = t.store.View(ctx, inRole(outboxTx, func(_ Tx, o OutboxTx) error {
		due, pending, err = o.UsageDue(ctx, dest, owner, now)
		return err
	}))
	return due, pending, err
}

// UsageDelivered records that owner delivered the rows seqs of dest: they
// are never sent again.
func (t *Tracker) UsageDelivered(ctx context.Context, dest, owner string, seqs []int64) error {
	return t.settleUsage(ctx, dest, owner, seqs, time.Time{}, "")
}

// UsageFailed records a failed delivery of the rows seqs of dest by
// owner, after attempts failures in all: they are tried again
// UsageRetryDelay(attempts) from now, with cause kept as their last
// error.
func (t *Tracker) UsageFailed(ctx context.Context, dest, owner string, seqs []int64, attempts int, cause error) error {
	msg := "failed"
	if cause != nil {
		msg = clipError(cause.Error())
	}
	return t.settleUsage(ctx, dest, owner, seqs, t.now().Add(UsageRetryDelay(attempts)), msg)
}

// maxLastError bounds a stored delivery error: a receiver's answer is
// not ours to store whole.
const maxLastError = 512

// clipError is s as a stored error: valid UTF-8 (PostgreSQL refuses
// anything else, and a receiver's status line may be anything), control
// characters as spaces (outbox ls prints it in a table), cut to
// maxLastError bytes between characters.
func clipError(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) > maxLastError {
		s = strings.ToValidUTF8(s[:maxLastError], "")
	}
	return s
}

func (t *Tracker) settleUsage(ctx context.Context, dest, owner string, seqs []int64, next time.Time, lastErr string) error {
	if len(seqs) == 0 {
		return nil
	}
	return t.store.Update(ctx, inRole(outboxTx, func(_ Tx, o OutboxTx) error {
		return o.SettleUsage(ctx, dest, owner, seqs, next, lastErr)
	}))
}

// OutboxBacklog is what every destination has pending (OutboxTx).
func (t *Tracker) OutboxBacklog(ctx context.Context) ([]OutboxBacklog, error) {
	return inOutbox(ctx, t.store.View, func(_ Tx, o OutboxTx) ([]OutboxBacklog, error) { return o.OutboxBacklog(ctx) })
}

// inOutbox runs fn in a transaction of run (Store.Update or View) with
// the outbox role, and returns what fn returned.
func inOutbox[T any](ctx context.Context, run func(context.Context, func(Tx) error) error, fn func(Tx, OutboxTx) (T, error)) (T, error) {
	var out T
	err := run(ctx, inRole(outboxTx, func(tx Tx, o OutboxTx) error {
		var err error
		out, err = fn(tx, o)
		return err
	}))
	return out, err
}

// outboxBefore refuses a prune to cut: undelivered events before it
// would be lost to their destination. A store without an outbox has
// none.
func outboxBefore(ctx context.Context, tx Tx, cut time.Time) error {
	o, ok := tx.(OutboxTx)
	if !ok {
		return nil
	}
	n, err := o.OutboxBefore(ctx, cut)
	if err != nil || n == 0 {
		return err
	}
	return invalid("before", cut.UTC().Format(time.RFC3339), fmt.Sprintf(
		"%d usage events before it are not delivered to their usage hook yet ('budget outbox ls'): deliver them, or remove the hook with 'budget outbox rm'", n))
}

// UsageClaimLost is the error a store returns from SettleUsage when n of
// the rows are no longer owner's (ErrClaimLost, as for alerts: a claim
// that expired was taken over).
func UsageClaimLost(dest string, n int) error {
	return fmt.Errorf("usage outbox %s: %d rows: %w", dest, n, ErrClaimLost)
}
