package budget_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

// storeTracker is a Tracker on s with no sweep (config changed by mod),
// closed when the test ends.
func storeTracker(t *testing.T, s budget.Store, mod func(*budget.Config)) *budget.Tracker {
	t.Helper()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	if mod != nil {
		mod(&cfg)
	}
	tr, err := budget.New(context.Background(), s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A deadline, so a writer stuck on a batch fails the test rather
	// than hanging it until go test's own timeout hides why.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := tr.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tr
}

// coreOnly is a store whose transactions have the two required roles
// only, as a new backend's first version would: every optional role of
// the memstore beneath is hidden.
type coreOnly struct{ budget.Store }

type coreTx struct{ budget.Tx }

func (s coreOnly) Update(ctx context.Context, fn func(budget.Tx) error) error {
	return s.Store.Update(ctx, func(tx budget.Tx) error { return fn(coreTx{tx}) })
}

func (s coreOnly) View(ctx context.Context, fn func(budget.Tx) error) error {
	return s.Store.View(ctx, func(tx budget.Tx) error { return fn(coreTx{tx}) })
}

// A store with HotTx and DefinitionsTx alone runs the writer: limits are
// set, usage recorded, reservations decided exactly and settled, inspect
// answers. What needs an optional role says which one it lacks, wrapping
// errors.ErrUnsupported, and a limit cannot be given alert thresholds that
// no store would log.
func TestTrackerOnTheRequiredRolesAlone(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	tr := storeTracker(t, coreOnly{memstore.New()}, func(c *budget.Config) { c.Now = func() time.Time { return now } })

	max := int64(100)
	var err error
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "1h", Max: &max}); err != nil {
		t.Fatalf("SetLimit = %v", err)
	}
	alerts := []int{50}
	_, _, err = tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max, Alerts: &alerts})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SetLimit with alert thresholds = %v; want errors.ErrUnsupported (the store has no AlertTx)", err)
	}

	if err := tr.Record(ctx, budget.Usage{Key: "k", Provider: "openai", Model: "m", RequestID: "r1", Input: 20, Output: 10, At: now}); err != nil {
		t.Fatal(err)
	}
	req := budget.Request{Key: "k", Provider: "openai", Model: "m", Estimate: budget.Estimate{Tokens: 40}}
	r, err := tr.Reserve(ctx, req, time.Minute)
	if err != nil {
		t.Fatalf("Reserve = %v", err)
	}
	var exceeded *budget.ExceededError
	if _, err := tr.Reserve(ctx, req, time.Minute); !errors.As(err, &exceeded) {
		t.Errorf("second Reserve = %v; want ErrExceeded (30 used + 40 held + 40 > 100)", err)
	}
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 5, Output: 5}); err != nil {
		t.Fatalf("Commit = %v", err)
	}
	d, err := tr.Check(ctx, req)
	if err != nil || len(d.Limits) != 1 || d.Limits[0].Used != 40 {
		t.Fatalf("Check = %+v, %v; want one limit with 40 used (30 recorded + 10 committed)", d, err)
	}
	if _, err := tr.Inspect(ctx, "k", now, 0); err != nil {
		t.Errorf("Inspect = %v; want it to answer without a history role", err)
	}

	for name, call := range map[string]func() error{
		"Report": func() error {
			_, err := tr.Report(ctx, budget.ReportQuery{Since: now.Add(-time.Hour), Until: now, By: []budget.Dim{budget.DimKey}})
			return err
		},
		"VerifyCounters": func() error { _, err := tr.VerifyCounters(ctx); return err },
		"Alerts":         func() error { _, err := tr.Alerts(ctx, 10); return err },
		"Audit":          func() error { _, err := tr.Audit(ctx, budget.AuditFilter{}); return err },
		"AddUsageHook":   func() error { _, err := tr.AddUsageHook(ctx, "https://billing.example/u"); return err },
		"OutboxBacklog":  func() error { _, err := tr.OutboxBacklog(ctx); return err },
		"Park": func() error {
			_, err := tr.Park(ctx, "openai", budget.RateLimited, time.Minute, nil)
			return err
		},
	} {
		if err := call(); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s = %v; want errors.ErrUnsupported", name, err)
		}
	}
	if d, err := tr.Check(ctx, req); err != nil || d.Parked != nil {
		t.Errorf("Check after a Park the store cannot keep = parked %v, %v; want not parked", d.Parked, err)
	}
}

// StoreAs finds optional roles, never the Store itself: nothing outside
// the package gets a transaction through it.
func TestStoreAsNeverTheStore(t *testing.T) {
	tr := storeTracker(t, memstore.New(), nil)
	if s, ok := budget.StoreAs[budget.Store](tr); ok || s != nil {
		t.Errorf("StoreAs[budget.Store] = %v, %v; want nil, false", s, ok)
	}
}
