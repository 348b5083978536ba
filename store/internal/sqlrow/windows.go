package sqlrow

import (
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// CompleteWindows fills in what Tx.Windows owes for the refs it found no
// counter row for (out[i].Stored false), once the rows and holds are read:
// the seed from the history (unless NoSeed), the newest row's start and the
// usage of the window before, which a created row's rollover logs. A
// concurrent limit's leases have no counter: they count as stored. sum is
// the store's history sum; rows reads, for l's limit and subject, the
// newest window start and the used of the row at prevStart (nil when none).
func CompleteWindows(refs []budget.WindowRef, out []budget.WindowState,
	sum func(l *budget.Limit, start, end time.Time) (int64, error),
	rows func(l *budget.Limit, prevStart time.Time) (latest, prev *int64, err error)) error {
	for i, r := range refs {
		w := &out[i]
		if r.Limit.Metric == budget.MetricConcurrent {
			w.Used, w.Stored = 0, true
			continue
		}
		if w.Stored {
			continue
		}
		// Rare: once per limit, subject and window.
		var err error
		if !r.NoSeed {
			if w.Used, err = sum(r.Limit, r.Start, r.End); err != nil {
				return err
			}
		}
		if r.PrevStart.IsZero() {
			continue
		}
		latest, prev, err := rows(r.Limit, r.PrevStart)
		if err != nil {
			return err
		}
		if latest != nil {
			w.Latest = FromNs(*latest)
		}
		switch {
		case prev != nil:
			w.PrevUsed = *prev
		case latest != nil && *latest >= Ns(r.Start):
			// A later row exists: no rollover is logged, the window
			// before does not matter.
		default:
			if w.PrevUsed, err = sum(r.Limit, r.PrevStart, r.PrevEnd); err != nil {
				return err
			}
		}
	}
	return nil
}
