package budget

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The optional roles of a store's transactions, found by type assertion
// as tailscale probes its state stores for optional abilities. What works
// without each:
//
//   - HistoryTx: the writer decides, records and settles as usual,
//     assumes nothing was pruned and logs alerts without a forecast;
//     reports, export, verify, prune, rollovers, inspect's per-subject
//     listing and usage series return an error wrapping
//     errors.ErrUnsupported.
//   - AlertTx: SetLimit refuses alert thresholds (so no crossing is ever
//     lost) and the writer has none to log; listing and delivering alerts
//     return errors.ErrUnsupported.
//   - ProviderTx: no provider is ever parked, so the writer admits every
//     provider; parking, unparking and probing return
//     errors.ErrUnsupported.
//   - AuditTx: changes to limits, raises, teams, placements and prices
//     are made as usual but logged nowhere; Audit returns
//     errors.ErrUnsupported. (A store that keeps gateway keys or admin
//     tokens logs their changes itself, in their own transactions.)
//   - OutboxTx: events are recorded as usual and queued for no usage
//     hook; registering one, claiming and listing the outbox return
//     errors.ErrUnsupported, and prune checks no backlog.
//
// The stores of this module (SQLite, PostgreSQL, memstore) implement every
// role; each asserts so at compile time.

// txRole finds role R on tx, or says which role tx lacks.
func txRole[R any](tx Tx, role string) (R, error) {
	r, ok := tx.(R)
	if !ok {
		return r, fmt.Errorf("the store's transaction (%T) has no %s: %w", tx, role, errors.ErrUnsupported)
	}
	return r, nil
}

func historyTx(tx Tx) (HistoryTx, error)   { return txRole[HistoryTx](tx, "HistoryTx") }
func alertTx(tx Tx) (AlertTx, error)       { return txRole[AlertTx](tx, "AlertTx") }
func providerTx(tx Tx) (ProviderTx, error) { return txRole[ProviderTx](tx, "ProviderTx") }
func auditTx(tx Tx) (AuditTx, error)       { return txRole[AuditTx](tx, "AuditTx") }

// prunedBefore is the history's prune horizon: the zero time when nothing
// was pruned, or when the store keeps no history of its own to prune.
func prunedBefore(ctx context.Context, tx Tx) (time.Time, error) {
	h, ok := tx.(HistoryTx)
	if !ok {
		return time.Time{}, nil
	}
	return h.PrunedBefore(ctx)
}

// parkedProviders lists the parked providers: none on a store that cannot
// park them.
func parkedProviders(ctx context.Context, tx Tx) ([]ProviderState, error) {
	p, ok := tx.(ProviderTx)
	if !ok {
		return nil, nil
	}
	return p.Providers(ctx)
}

// viewHistory runs fn in a read-only transaction that has the history
// role, updateHistory in a write transaction.
func (t *Tracker) viewHistory(ctx context.Context, fn func(Tx, HistoryTx) error) error {
	return t.store.View(ctx, withHistory(fn))
}

func (t *Tracker) updateHistory(ctx context.Context, fn func(Tx, HistoryTx) error) error {
	return t.store.Update(ctx, withHistory(fn))
}

func withHistory(fn func(Tx, HistoryTx) error) func(Tx) error {
	return inRole(historyTx, fn)
}

// inRole is a transaction's fn that first finds role R on it with find,
// failing as find does when the store lacks it.
func inRole[R any](find func(Tx) (R, error), fn func(Tx, R) error) func(Tx) error {
	return func(tx Tx) error {
		r, err := find(tx)
		if err != nil {
			return err
		}
		return fn(tx, r)
	}
}

// logAlerts logs as in tx. A store without AlertTx has none to log:
// SetLimit refuses thresholds there, so only a limit written by another
// backend's process could cross one, and recording its usage matters more
// than failing every batch over an alert nobody can deliver.
func logAlerts(ctx context.Context, tx Tx, as []Alert) error {
	a, ok := tx.(AlertTx)
	if !ok {
		return nil
	}
	return a.LogAlerts(ctx, as)
}
