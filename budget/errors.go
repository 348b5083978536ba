package budget

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors, matched with errors.Is. Every error this package returns
// for bad input wraps ErrInvalid and names the field and the value.
var (
	// ErrInvalid marks bad input: nothing was written.
	ErrInvalid = errors.New("invalid input")
	// ErrNotFound marks an unknown limit, reservation or provider.
	ErrNotFound = errors.New("not found")
	// ErrSettled marks a reservation that was already committed or released.
	ErrSettled = errors.New("reservation already settled")
	// ErrLeaseLost is returned by Renew for a reservation that expired or was settled.
	ErrLeaseLost = errors.New("reservation lease lost")
	// ErrClosed is returned by a Tracker after Close.
	ErrClosed = errors.New("tracker closed")
	// ErrSchemaTooNew is returned when a database was written by a newer tokenbudget.
	ErrSchemaTooNew = errors.New("database schema is newer than this build")
	// ErrConflict is a write a store refused because the state it was
	// planned on changed underneath (another process won a race). The
	// writer retries the batch, re-reading that state.
	ErrConflict = errors.New("write conflict")
	// ErrReleaseNotRecorded is returned by Release (and ReleaseQueued) of
	// a leased ExpireCharge reservation whose release could not be
	// journaled: it is not retried; the reservation stays held and, unless
	// committed, is charged its estimate at its expiry.
	ErrReleaseNotRecorded = errors.New("release not recorded: charged its estimate at expiry unless committed")
)

// invalid returns an ErrInvalid naming the field and the offending value.
func invalid(field string, value any, why string) error {
	return fmt.Errorf("%w: %s %q: %s", ErrInvalid, field, fmt.Sprint(value), why)
}

// Invalid is invalid for other packages (the CLI, the stores) that validate
// their own input the same way.
func Invalid(field string, value any, why string) error { return invalid(field, value, why) }

// ExceededError is returned by Reserve when a limit refuses the request. It
// carries the most restrictive breach (contract section 4).
type ExceededError struct {
	Decision Decision
}

func (e *ExceededError) Error() string {
	b := e.Decision.Breach
	if b == nil {
		return "token budget exceeded"
	}
	return fmt.Sprintf("token budget exceeded: %s limit %s (%s, %s) used %d reserved %d of %d, retry after %s",
		b.Limit.Level(), b.Limit.ID, b.Limit.Describe(), b.Limit.ScopeString(), b.Used, b.Reserved, b.Max,
		b.RetryAfter)
}

// ParkedError is returned by Check-based helpers and Reserve when the request's
// provider is parked until a future instant.
type ParkedError struct {
	Provider ProviderState
	// RetryAfter is the wait left until the provider's resume-at.
	RetryAfter time.Duration
}

func (e *ParkedError) Error() string {
	return fmt.Sprintf("provider %s is parked (%s) for %s", e.Provider.Provider, e.Provider.Kind,
		e.RetryAfter.Round(time.Second))
}

// Retryable reports whether waiting can help: a parked provider always resumes.
func (e *ParkedError) Retryable() bool { return true }

// UnpricedError refuses a request for a model with no price while a usd
// limit applies to it: it would count $0 and the budget would never trip.
// Retrying does not help until a price is set.
type UnpricedError struct {
	Provider, Model string
	Decision        Decision
}

func (e *UnpricedError) Error() string {
	return fmt.Sprintf("no price for model %q of provider %q, and a dollar limit applies: set one with 'budget price set'", e.Model, e.Provider)
}
