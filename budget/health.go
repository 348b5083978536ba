package budget

import (
	"context"
	"errors"
	"fmt"
)

// HealthChecker is an optional Store interface: Health reports a problem a
// store can see without a transaction, such as a database file deleted or
// replaced under a running process (its writes would go to a file nobody
// else reads).
type HealthChecker interface {
	Health() error
}

// ErrUnhealthy marks a Tracker that cannot write now.
var ErrUnhealthy = errors.New("unhealthy")

// Health reports, without touching the database, why the tracker cannot
// durably write now, or nil: the writer's last attempt failed (it keeps
// retrying; nothing queued is dropped), or the store reports a problem.
// It is cheap enough for every health probe.
func (t *Tracker) Health() error {
	if hc, ok := t.store.(HealthChecker); ok {
		if err := hc.Health(); err != nil {
			return fmt.Errorf("%w: %w", ErrUnhealthy, err)
		}
	}
	if n := t.w.streak.Load(); n > 0 {
		return fmt.Errorf("%w: the writer's last %d attempts failed (retrying): %w", ErrUnhealthy, n, t.w.lastErr())
	}
	return nil
}

// IntegrityChecker is an optional Store interface behind CheckStorage: it
// checks what the counters and the history rest on, which comparing them
// (Verify) cannot see, since seeding and verify read the history through a
// covering index.
type IntegrityChecker interface {
	// CheckHistory reads every history row from the table itself, not an
	// index, and compares its totals per key with what the indexes give.
	// It returns one line per problem found; an unreadable table is a
	// problem, not an error.
	CheckHistory(ctx context.Context) (problems []string, err error)
	// CheckIntegrity runs the database's own consistency check. notes say
	// what it could not check.
	CheckIntegrity(ctx context.Context) (problems, notes []string, err error)
}

// StorageReport is what CheckStorage found.
type StorageReport struct {
	Problems []string // corruption: the database cannot be trusted
	Notes    []string // what could not be checked
}

// CheckStorage checks the history table against its indexes and, with
// integrity, runs the database's own integrity check. A store that cannot
// do either says so in Notes.
func (t *Tracker) CheckStorage(ctx context.Context, integrity bool) (StorageReport, error) {
	var r StorageReport
	ic, ok := t.store.(IntegrityChecker)
	if !ok {
		r.Notes = append(r.Notes, "this store cannot check its history table or its integrity")
		return r, nil
	}
	p, err := ic.CheckHistory(ctx)
	if err != nil {
		return r, err
	}
	r.Problems = append(r.Problems, p...)
	if integrity {
		p, n, err := ic.CheckIntegrity(ctx)
		if err != nil {
			return r, err
		}
		r.Problems = append(r.Problems, p...)
		r.Notes = append(r.Notes, n...)
	}
	return r, nil
}
