package postgres

import (
	"context"
	"fmt"
)

// Teams, organisations, key placements and raises. Every statement that
// changes them fires tokenbudget_limits_changed (migration 8), which takes
// the limits lock exclusively and moves limits_version, as a change to
// limits does: a writer that resolved a key's placement and limits under
// the shared lock (LimitsVersion) keeps them until it ends.

// LockDefinitions takes the limits lock exclusively until the transaction
// ends: the lock tokenbudget_limits_changed takes before any change to
// limits, raises, teams, orgs and key placements, and writers hold shared
// from reading the limits version. An admin write takes it first, so what
// it checks before writing (no org has the team's name, say) holds until
// it commits, and two admins are serialised.
func (t *tx) LockDefinitions(ctx context.Context) error {
	if err := t.write(); err != nil {
		return err
	}
	if _, err := t.tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1::integer, $2::integer)`, lockClass, t.db.lockKey); err != nil {
		return fmt.Errorf("lock the limit definitions: %w", err)
	}
	return nil
}
