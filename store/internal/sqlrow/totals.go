package sqlrow

import "fmt"

// KeyTotals is one key's history as one access path reads it (the table
// itself, or the covering index seeding reads), for verify.
type KeyTotals struct {
	Key       string `db:"key"`
	N         int64  `db:"n"`
	Input     int64  `db:"input"`
	Output    int64  `db:"output"`
	Reasoning int64  `db:"reasoning"`
	MinAt     int64  `db:"min_at"`
	MaxAt     int64  `db:"max_at"`
	Cache     int64  `db:"cache"` // read from the table only; not compared
}

// CompareTotals lists the keys whose totals differ between the table read
// and the index read.
func CompareTotals(table, index []KeyTotals) []string {
	var out []string
	byKey := make(map[string]KeyTotals, len(index))
	for _, r := range index {
		byKey[r.Key] = r
	}
	for _, r := range table {
		o, ok := byKey[r.Key]
		delete(byKey, r.Key)
		o.Cache = r.Cache
		if !ok || o != r {
			out = append(out, fmt.Sprintf("usage of key %q: table has %d events (%d/%d/%d tokens), index has %d (%d/%d/%d)",
				r.Key, r.N, r.Input, r.Output, r.Reasoning, o.N, o.Input, o.Output, o.Reasoning))
		}
	}
	for _, o := range byKey {
		out = append(out, fmt.Sprintf("usage of key %q: index has %d events the table does not", o.Key, o.N))
	}
	return out
}
