package sqlite

import (
	"context"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
)

// A write transaction that begins the moment another one's COMMIT returns
// (the writer connection is free from then on) must see a Mark that counts
// that commit; otherwise a Tracker's writer could take its memory for
// current after another writer on the same handle changed the store.
func TestMarkCountsACommitBeforeItReturns(t *testing.T) {
	ctx := context.Background()
	db := openInternal(t, "m.db")
	var first, next budget.Mark
	fired := false
	afterCommit = func(db *DB) {
		afterCommit = nil // once, and not for the transaction below
		fired = true
		if err := db.Update(ctx, func(tx budget.Tx) error {
			var err error
			next, err = tx.Mark(ctx)
			return err
		}); err != nil {
			t.Errorf("Update after the commit: %v", err)
		}
	}
	defer func() { afterCommit = nil }()
	if err := db.Update(ctx, func(tx budget.Tx) error {
		var err error
		first, err = tx.Mark(ctx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !fired {
		t.Fatal("the commit hook did not run")
	}
	if next != first.Next() {
		t.Fatalf("mark right after a commit = %+v; want %+v (the commit counted)", next, first.Next())
	}
}
