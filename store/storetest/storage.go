package storetest

import (
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra, suiteCase{"StorageCheckOnHealthyDatabase", testStorageCheck})
}

// A healthy database passes the history and integrity checks behind
// budget verify; what a backend cannot check is a note, not a problem.
func testStorageCheck(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	for i, k := range []string{"k", "k", "other"} {
		RecordSync(t, tr, budget.Usage{RequestID: string(rune('a' + i)), Key: k, Provider: "p", Model: "m",
			Input: 10, CacheRead: 4, Output: 3, At: T0.Add(time.Duration(i) * time.Minute)})
	}
	rep, err := tr.CheckStorage(ctx, true)
	if err != nil {
		t.Fatalf("CheckStorage: %v", err)
	}
	if len(rep.Problems) != 0 {
		t.Fatalf("CheckStorage on a healthy database found %q", rep.Problems)
	}
}
