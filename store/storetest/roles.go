package storetest

import (
	"context"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
)

// fullTx is a transaction in every role. The Tracker works without the
// optional ones (budget/roles.go), but the suite holds a store to all of
// them: reports, prune, alerts and parking are part of its contract.
type fullTx interface {
	budget.Tx
	budget.HistoryTx
	budget.AlertTx
	budget.ProviderTx
	budget.AuditTx
}

// historyRole is tx's history role; the case fails if the store lacks it.
func historyRole(t testing.TB, tx budget.Tx) budget.HistoryTx {
	t.Helper()
	h, ok := tx.(budget.HistoryTx)
	if !ok {
		t.Fatalf("the store's transaction %T has no budget.HistoryTx", tx)
	}
	return h
}

func init() { extra = append(extra, suiteCase{"EveryRole", testEveryRole}) }

// testEveryRole: both kinds of transaction offer every optional role, so
// nothing the Tracker finds by type assertion is missing.
func testEveryRole(t *testing.T, newDB NewDB) {
	s := newDB(t)()
	ctx := context.Background()
	for name, run := range map[string]func(context.Context, func(budget.Tx) error) error{"View": s.View, "Update": s.Update} {
		if err := run(ctx, func(tx budget.Tx) error {
			if _, ok := tx.(fullTx); !ok {
				t.Errorf("%s: the store's transaction %T lacks an optional role (HistoryTx, AlertTx, ProviderTx or AuditTx)", name, tx)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}
