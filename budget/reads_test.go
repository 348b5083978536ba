package budget_test

import (
	"context"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

// wrapped is a store wrapper, as the proxy's timing wrapper is.
type wrapped struct{ budget.Store }

func (w wrapped) Unwrap() budget.Store { return w.Store }

type pinger interface{ Ping() string }

// An optional role is found on the store, or through a wrapper's Unwrap;
// a role the store lacks is not found.
func TestStoreAs(t *testing.T) {
	ctx := context.Background()
	inner := memstore.New()
	tr := storeTracker(t, wrapped{inner}, nil)
	if got, ok := budget.StoreAs[*memstore.Store](tr); !ok || got != inner {
		t.Errorf("StoreAs[*memstore.Store] = %v, %v; want the wrapped store", got, ok)
	}
	if _, ok := budget.StoreAs[wrapped](tr); !ok {
		t.Error("StoreAs[wrapped] found nothing; want the wrapper itself")
	}
	if _, ok := budget.StoreAs[pinger](tr); ok {
		t.Error("StoreAs found a role no store in the chain has")
	}
	if err := tr.Ping(ctx); err != nil {
		t.Errorf("Ping = %v", err)
	}
}
