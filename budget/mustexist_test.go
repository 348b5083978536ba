package budget_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

// A MustExist spec only updates: when no limit has its id (removed since
// the caller read it, say) it is ErrNotFound and creates nothing.
func TestSetLimitMustExist(t *testing.T) {
	ctx := context.Background()
	tr := storeTracker(t, memstore.New(), nil)
	max := int64(100)
	spec := budget.LimitSpec{ID: "gone", Key: "k", Window: "1h", Max: &max, MustExist: true}
	if _, _, err := tr.SetLimit(ctx, spec); !errors.Is(err, budget.ErrNotFound) {
		t.Errorf("SetLimit(MustExist) of an unknown id: %v; want ErrNotFound", err)
	}
	if ls, err := tr.Limits(ctx, ""); err != nil || len(ls) != 0 {
		t.Errorf("limits after: %v, %v; want none", ls, err)
	}
	spec.MustExist = false
	if _, created, err := tr.SetLimit(ctx, spec); err != nil || !created {
		t.Fatalf("SetLimit: created %v, %v", created, err)
	}
	max2 := int64(200)
	spec.Max, spec.MustExist = &max2, true
	if l, created, err := tr.SetLimit(ctx, spec); err != nil || created || l.Max != 200 {
		t.Errorf("SetLimit(MustExist) of a stored id: %v, created %v, %v; want it updated", l, created, err)
	}
}
