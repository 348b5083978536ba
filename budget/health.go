package budget

import (
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
