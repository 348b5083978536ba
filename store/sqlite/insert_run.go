package sqlite

import (
	"strconv"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
)

// A run is a full chunk of events, in the insert's (key, request id)
// order, of one key, provider and model, with no levels, end user or
// tags: an import's or a busy key's batch is mostly runs. Its statement
// binds the key, provider, model and normalised model once, as ?1-?4, and
// leaves out the optional columns (reasoning, cache counts, cost, the
// price flags) that are zero in every row of the chunk, to their default
// 0: with the benchmark's events a row binds 6 values, not 14. Binding is
// the cost modernc.org/sqlite adds per value: each takes the connection's
// mutex, and a string is a malloc and a copy into C memory.

// runOwn is a run's row's own columns, the optional ones (zero in every
// row of a run: left out) last, in runOpt's order.
var runOwn = []string{"request_id", "input", "output", "at", "reasoning", "cache_read", "cache_write", "cost", "unpriced", "no_price"}

// runFixed is how many of runOwn every row binds; runOptional, how many may
// be left out (a zero mask's bits, in runOpt's order).
const runFixed, runOptional = 4, 6

// runOpt is ev's optional values, in runOwn's order.
func runOpt(ev *budget.EventWrite) [runOptional]int64 {
	e := &ev.Usage
	return [runOptional]int64{e.Reasoning, e.CacheRead, e.CacheWrite, e.Cost, b2i(e.Unpriced), b2i(ev.NoPrice)}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// runOf reports whether the rows part of evs are a run, and the mask of
// the optional columns zero in all of them.
func runOf(evs []budget.EventWrite, part []int) (zero uint8, run bool) {
	if len(part) != chunk {
		return 0, false
	}
	e0 := &evs[part[0]].Usage
	zero = 1<<runOptional - 1
	for _, i := range part {
		e := &evs[i].Usage
		if e.Key != e0.Key || e.Provider != e0.Provider || e.Model != e0.Model {
			return 0, false
		}
		for j, v := range runOpt(&evs[i]) {
			if v != 0 {
				zero &^= 1 << j
			}
		}
	}
	return zero, true
}

// runArgs appends ev's own values, less the columns zero leaves out, in
// runOwn's order.
func runArgs(args []any, ev *budget.EventWrite, zero uint8) []any {
	e := &ev.Usage
	args = append(args, e.RequestID, e.Input, e.Output, ns(e.At))
	for j, v := range runOpt(ev) {
		if zero&(1<<j) == 0 {
			args = append(args, v)
		}
	}
	return args
}

// runStmts holds insertRun's statements by zero mask.
var runStmts [1 << runOptional]string

func init() {
	for zero := range runStmts {
		runStmts[zero] = buildRun(uint8(zero))
	}
}

// insertRun is the statement inserting a run whose rows are zero in the
// columns of the mask zero.
func insertRun(zero uint8) string { return runStmts[zero] }

// buildRun writes insertRun's statement. The first row numbers every
// parameter (?1-?4 shared, then its own); a bare ? is numbered one past
// the largest before it, so the later rows' own values follow in order:
// the 4 shared arguments, then each row's own.
func buildRun(zero uint8) string {
	cols := runOwn[:runFixed:runFixed]
	for j, c := range runOwn[runFixed:] {
		if zero&(1<<j) == 0 {
			cols = append(cols, c)
		}
	}
	var q strings.Builder
	q.WriteString("INSERT OR IGNORE INTO usage (key, provider, model, model_norm, " + strings.Join(cols, ", ") + ") VALUES (?1, ?2, ?3, ?4")
	for j := range cols {
		q.WriteString(", ?" + strconv.Itoa(5+j))
	}
	q.WriteString(")")
	row := ", (?1, ?2, ?3, ?4" + strings.Repeat(", ?", len(cols)) + ")"
	for range chunk - 1 {
		q.WriteString(row)
	}
	return q.String()
}
