package sqlrow

import (
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Sum is one history sum a window needs: Limit's metric over [Start, End)
// of the events its History selects.
type Sum struct {
	Limit      *budget.Limit
	Start, End time.Time
}

// Before is what a store reads for a window it has no row for: the newest
// window start its limit and subject have a row for, and the used of the
// row of the window before (each nil when there is none).
type Before struct {
	Latest, Prev *int64
}

// CompleteWindows fills in what Tx.Windows owes for the refs it found no
// counter row for (out[i].Stored false), once the rows and holds are read:
// the seed from the history (unless NoSeed), the newest row's start and the
// usage of the window before, which a created row's rollover logs. A
// concurrent limit's leases have no counter: they count as stored.
//
// The reads are asked for in sets, each once per batch whatever the number
// of windows (a batch of imported events may open a window per event): sums
// is the store's history sum of each Sum, befores reads a Before for each
// ref (at its PrevStart).
func CompleteWindows(refs []budget.WindowRef, out []budget.WindowState,
	sums func([]Sum) ([]int64, error), befores func([]budget.WindowRef) ([]Before, error)) error {
	var seeds, prevs []Sum
	var seedAt, beforeAt, prevAt []int
	var beforeRefs []budget.WindowRef
	for i, r := range refs {
		w := &out[i]
		if r.Limit.Metric == budget.MetricConcurrent {
			w.Used, w.Stored = 0, true
			continue
		}
		if w.Stored {
			continue
		}
		if !r.NoSeed {
			seeds, seedAt = append(seeds, Sum{r.Limit, r.Start, r.End}), append(seedAt, i)
		}
		if !r.PrevStart.IsZero() {
			beforeRefs, beforeAt = append(beforeRefs, r), append(beforeAt, i)
		}
	}
	// sumInto sets window at[j]'s field of out to the j-th of ss's sums.
	sumInto := func(ss []Sum, at []int, field func(*budget.WindowState) *int64) error {
		if len(ss) == 0 {
			return nil
		}
		v, err := sums(ss)
		if err != nil {
			return err
		}
		for j, i := range at {
			*field(&out[i]) = v[j]
		}
		return nil
	}
	if err := sumInto(seeds, seedAt, func(w *budget.WindowState) *int64 { return &w.Used }); err != nil {
		return err
	}
	if len(beforeRefs) == 0 {
		return nil
	}
	bs, err := befores(beforeRefs)
	if err != nil {
		return err
	}
	for j, i := range beforeAt {
		r, w, b := &refs[i], &out[i], bs[j]
		if b.Latest != nil {
			w.Latest = FromNs(*b.Latest)
		}
		switch {
		case b.Prev != nil:
			w.PrevUsed = *b.Prev
		case b.Latest != nil && *b.Latest >= Ns(r.Start):
			// A later row exists: no rollover is logged, the window
			// before does not matter.
		default:
			prevs, prevAt = append(prevs, Sum{r.Limit, r.PrevStart, r.PrevEnd}), append(prevAt, i)
		}
	}
	return sumInto(prevs, prevAt, func(w *budget.WindowState) *int64 { return &w.PrevUsed })
}

// ApplyCounters is Tx.Apply's counter writes: create makes the rows of the
// counters w creates and reports which existed already (another
// transaction created them first); then add adds their deltas to the
// counters that gain one, every existing row with a delta and each created
// row found existing; last, with ifStored, to the IfStored ones, whose
// rows may not exist (none is created).
func ApplyCounters(w *budget.WriteSet, inserted []bool, create func([]*budget.CounterWrite) ([]bool, error),
	add func(cs []*budget.CounterWrite, ds []int64, ifStored bool) error) error {
	deltas := w.CounterDeltas(inserted)
	var creates []*budget.CounterWrite
	var createdAt []int
	for i := range w.Counters {
		if w.Counters[i].Create {
			creates, createdAt = append(creates, &w.Counters[i]), append(createdAt, i)
		}
	}
	existed := make([]bool, len(w.Counters))
	if len(creates) > 0 {
		found, err := create(creates)
		if err != nil {
			return err
		}
		for j, i := range createdAt {
			existed[i] = found[j]
		}
	}
	// Sized once, for every counter (appended one by one, a batch of
	// 8,192 keys' counters were copied five times over): as many as may be
	// added to. A batch that mostly creates its counters (an import's)
	// leaves most of it unused, 16 bytes a counter beside the ~250 the
	// batch holds for each anyway.
	cs, ds := make([]*budget.CounterWrite, 0, len(w.Counters)), make([]int64, 0, len(w.Counters))
	var opt []*budget.CounterWrite
	var optDs []int64
	for i := range w.Counters {
		switch c := &w.Counters[i]; {
		case deltas[i] == 0:
		case c.IfStored:
			opt, optDs = append(opt, c), append(optDs, deltas[i])
		case !c.Create || existed[i]:
			cs, ds = append(cs, c), append(ds, deltas[i])
		}
	}
	if len(cs) > 0 {
		if err := add(cs, ds, false); err != nil {
			return err
		}
	}
	if len(opt) > 0 {
		return add(opt, optDs, true)
	}
	return nil
}
