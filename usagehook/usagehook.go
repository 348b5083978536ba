// Package usagehook delivers every usage event a Tracker records to a
// billing system, as CloudEvents, exactly once after deduplication.
//
// The Tracker queues the events (budget's usage outbox: a row per event
// and registered destination, written in the event's own transaction, by
// every process and path). A Deliverer claims a destination's due rows a
// batch at a time (budget.Tracker.ClaimUsage), hands them to its Sender
// as one batch of CloudEvents, and reports the rows delivered, for good,
// when the Sender returns nil, or failed otherwise: they are tried again
// after budget.UsageRetryDelay (1 s, doubling, at most 5 minutes). Each
// event's CloudEvents id is budget.EventID of its key and request id, the
// same in every delivery, so a receiver that keeps the ids it has seen
// counts each event once. A key's events reach the Sender in the order
// they were recorded; claims expire, so rows a deliverer that died had
// claimed are taken over by another, and any number of deliverers, in any
// number of processes, may run against one database.
//
// Webhook is the Sender that POSTs a batch to a URL in the CloudEvents
// JSON batch format (Content-Type application/cloudevents-batch+json),
// signed like alerts when given a secret; a library passes its own Sender
// (SenderFunc) to deliver in-process.
//
// A Deliverer is safe for concurrent use, but one RunOnce at a time is
// all it needs.
package usagehook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tokenbudget/tokenbudget/alert"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

// CloudEvents attributes of every event.
const (
	// Type is each event's type: the version ends the name, so a change
	// of the data's shape is a new type.
	Type          = "dev.tokenbudget.usage.v1"
	SpecVersion   = "1.0"
	DefaultSource = "tokenbudget"
	// BatchContentType is the CloudEvents JSON batch format's media type.
	BatchContentType = "application/cloudevents-batch+json"
)

// Event is one usage event as a CloudEvent in the JSON format (structured
// mode). Data holds the event's fields as `budget export` prints them.
type Event struct {
	SpecVersion     string         `json:"specversion"`
	ID              string         `json:"id"` // budget.EventID(key, request id)
	Source          string         `json:"source"`
	Type            string         `json:"type"`
	Subject         string         `json:"subject"` // the key
	Time            string         `json:"time"`    // the event's instant, RFC3339 with nanoseconds, UTC
	DataContentType string         `json:"datacontenttype"`
	Data            jsonview.Event `json:"data"`
}

// EventOf is u as a CloudEvent from source.
func EventOf(u *budget.Usage, source string) Event {
	d := jsonview.EventOf(u)
	return Event{SpecVersion: SpecVersion, ID: budget.EventID(u.Key, u.RequestID), Source: source, Type: Type, Subject: u.Key,
		Time: d.At, DataContentType: "application/json", Data: d}
}

// A Sender delivers one batch of events, in order; nil means the receiver
// has them all. An error means it may have some, none or all: the batch
// is sent again later, whole.
type Sender interface {
	Send(ctx context.Context, batch []Event) error
}

// SenderFunc is a function as a Sender: a library's hook.
type SenderFunc func(ctx context.Context, batch []Event) error

func (f SenderFunc) Send(ctx context.Context, batch []Event) error { return f(ctx, batch) }

// Defaults of a Deliverer.
const (
	DefaultClaimTTL = time.Minute
	// DefaultBatch is the events one claim takes and one Send carries.
	DefaultBatch = 100
)

// Deliverer hands the events queued for Dest to Send.
type Deliverer struct {
	Tracker *budget.Tracker
	// Dest is the destination the events are queued for: a webhook's URL,
	// or a library hook's name. Register it (Register) before the events
	// it should receive are recorded.
	Dest string
	Send Sender
	// Source is every event's CloudEvents source. (Optional; default
	// DefaultSource.)
	Source string
	// Owner names this deliverer in its claims; unique per process.
	// (Optional; default a random id.)
	Owner string
	// ClaimTTL is how long a claim lasts; it must outlast one Send (a
	// Webhook's client timeout). (Optional; default DefaultClaimTTL.)
	ClaimTTL time.Duration
	// Batch is how many events one claim takes. (Optional; default
	// DefaultBatch.)
	Batch int

	mu sync.Mutex
	// quietUntil: no claim is made before it. After a failed Send it is
	// the failed batch's retry, so a receiver that is down costs one claim
	// per retry delay, not one a tick; after a round that found events
	// queued but none due (each key waiting for a retry, or in another
	// deliverer's batch) it backs off, idle doubling from a second to
	// MaxIdle. Either way, a claim with every key waiting reads the whole
	// backlog to find nothing due.
	quietUntil time.Time
	idle       time.Duration
}

// MaxIdle bounds how long a deliverer waits between looks at a backlog
// it found entirely waiting: a key's new event then goes out at most
// this late.
const MaxIdle = 30 * time.Second

// Result counts what one RunOnce did, in events.
type Result struct {
	Delivered, Failed int
}

func (d *Deliverer) fill() {
	if d.Owner == "" {
		d.Owner = budget.NewID("dlv_")
	}
	if d.Source == "" {
		d.Source = DefaultSource
	}
	if d.ClaimTTL <= 0 {
		d.ClaimTTL = DefaultClaimTTL
	}
	if d.Batch <= 0 {
		d.Batch = DefaultBatch
	}
}

// Register registers Dest with the Tracker's store (AddUsageHook): from
// then on every event any process records is queued for it, until it is
// removed (`budget outbox rm`). Registering again changes nothing.
func (d *Deliverer) Register(ctx context.Context) error {
	_, err := d.Tracker.AddUsageHook(ctx, d.Dest)
	return err
}

// recordTimeout bounds recording a delivery's outcome.
const recordTimeout = 5 * time.Second

// errMissing is a queued event the history no longer holds.
var errMissing = errors.New("the event is no longer in the history")

// RunOnce claims the due events of Dest, a batch at a time, and sends
// each batch once, until none is left or a Send fails (the receiver is
// failing: the rest waits, and this deliverer claims nothing until the
// failed batch's retry is due). A failed Send is no error: its events are
// scheduled again. Errors are the store's.
func (d *Deliverer) RunOnce(ctx context.Context) (Result, error) {
	d.fill()
	var res Result
	d.mu.Lock()
	quiet := d.Tracker.Now().Before(d.quietUntil)
	d.mu.Unlock()
	if quiet {
		return res, nil
	}
	due, pending, err := d.Tracker.UsageDue(ctx, d.Dest, d.Owner)
	d.mu.Lock()
	switch {
	case err != nil:
	case !due && pending:
		d.idle = min(max(2*d.idle, time.Second), MaxIdle)
		d.quietUntil = d.Tracker.Now().Add(d.idle)
	default:
		d.idle = 0
	}
	d.mu.Unlock()
	if err != nil {
		return res, fmt.Errorf("usage hook %s: %w", d.Dest, err)
	}
	if !due {
		return res, nil
	}
	for {
		items, err := d.Tracker.ClaimUsage(ctx, d.Dest, d.Owner, d.ClaimTTL, d.Batch)
		if err != nil || len(items) == 0 {
			return res, err
		}
		batch := make([]Event, 0, len(items))
		var sent, missing []int64
		attempts := 0
		for i := range items {
			it := &items[i]
			attempts = max(attempts, it.Attempts)
			if !it.Found {
				missing = append(missing, it.Seq)
				continue
			}
			batch = append(batch, EventOf(&it.Event, d.Source))
			sent = append(sent, it.Seq)
		}
		var serr error
		if len(batch) > 0 {
			serr = d.Send.Send(ctx, batch)
		}
		// The outcome is recorded even when ctx ended meanwhile (a proxy
		// stopping): a batch received but not recorded would be sent again.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		if serr != nil {
			res.Failed += len(sent)
			err = d.Tracker.UsageFailed(rctx, d.Dest, d.Owner, sent, attempts+1, serr)
			d.mu.Lock()
			d.quietUntil = d.Tracker.Now().Add(budget.UsageRetryDelay(attempts + 1))
			d.mu.Unlock()
		} else {
			res.Delivered += len(sent)
			err = d.Tracker.UsageDelivered(rctx, d.Dest, d.Owner, sent)
		}
		if err == nil && len(missing) > 0 {
			res.Failed += len(missing)
			err = d.Tracker.UsageFailed(rctx, d.Dest, d.Owner, missing, attempts+1, errMissing)
		}
		cancel()
		if err != nil && !errors.Is(err, budget.ErrClaimLost) {
			return res, fmt.Errorf("usage hook %s: %w", d.Dest, err)
		}
		if serr != nil || len(items) < d.Batch {
			return res, nil
		}
	}
}

// Run calls RunOnce at once and then at every tick until ctx ends,
// reporting store errors to onErr (nil: ignored). A proxy ticks every
// second, so a retry is late by at most a second.
func (d *Deliverer) Run(ctx context.Context, tick <-chan time.Time, onErr func(error)) {
	alert.Every(ctx, tick, onErr, func(ctx context.Context) error {
		_, err := d.RunOnce(ctx)
		return err
	})
}
