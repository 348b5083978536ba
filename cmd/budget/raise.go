package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

const limitRaiseHelp = `usage: budget limit raise ID --by N [--until T] [--at T] [--json]

Adds N to limit ID until the instant --until (RFC3339, after --at), or for
good without it: every process applies the raise while it lasts and falls
back to the limit as set by itself at --until (the raise counts at every
instant before it). N is in the limit's unit: dollars (up to 6 decimals)
for a usd limit, else a whole number. Raises add up. A once limit (a
prepaid balance) is topped up this way. --at is the instant the raise is
recorded at (default now).

Prints the raise's id, or with --json the limit object as it stands at --at:
"limit" in force, "base_limit" as set, and the active "raises"
([{"id", "by", "until", "at"}], by in the unit of "limit"). An unknown ID is
invalid input (exit 2, naming id): nothing is written.

`

func (m *Main) runLimitRaise(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("limit raise")
	dsn := m.dbFlag(fs)
	byText := fs.String("by", "", "how much to add, > 0, in the limit's unit: dollars for a usd limit (required)")
	untilText := fs.String("until", "", "RFC3339 instant the raise ends at (default: it stays)")
	at := m.atFlag(fs)
	asJSON := fs.Bool("json", false, "print the limit as JSON")
	pos, err := m.parseArgs(fs, limitRaiseHelp, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("limit raise", "want exactly one limit id, got %d arguments", len(pos))
	}
	id := strings.TrimSpace(pos[0])
	if id == "" {
		return budget.Invalid("id", pos[0], "must not be empty")
	}
	now, err := at()
	if err != nil {
		return err
	}
	if strings.TrimSpace(*byText) == "" {
		return budget.Invalid("by", *byText, "is required")
	}
	// The unit is the limit's, known once it is read: here only the form
	// (a whole number, or dollars); the range is checked in the unit.
	if _, err := strconv.ParseInt(strings.TrimSpace(*byText), 10, 64); err != nil {
		if _, uerr := budget.ParseUSD("by", *byText); uerr != nil {
			return budget.Invalid("by", *byText, "want an amount greater than 0 (dollars for a usd limit, else a whole number)")
		}
	}
	var until time.Time
	if *untilText != "" {
		if until, err = parseAtField("until", *untilText); err != nil {
			return err
		}
		if !until.After(now) {
			return budget.Invalid("until", *untilText, "must be after --at ("+ts(now)+")")
		}
	}

	db, err := m.openDB(ctx, *dsn, dbOptions{now: fixedClock(now)})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	ls, err := db.Limits(ctx, "")
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ls, func(l budget.Limit) bool { return l.ID == id })
	if i < 0 {
		return budget.Invalid("id", id, "no limit has this id")
	}
	by, err := budget.ParseAmount("by", ls[i].Metric, *byText)
	if err != nil {
		return err
	}
	if by <= 0 || by > budget.MaxTokens {
		return budget.Invalid("by", *byText, "want an amount greater than 0 and at most 2^53-1 in the limit's unit")
	}
	l, r, err := db.RaiseLimit(ctx, id, by, until)
	if errors.Is(err, budget.ErrNotFound) { // removed since it was read
		return budget.Invalid("id", id, "no limit has this id")
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, jsonview.LimitOf(&l, now))
	}
	if r.Until.IsZero() {
		fmt.Fprintf(m.Stderr, "limit %s raised by %s for good: %s in force\n", l.ID, amountText(&l, by), amountText(&l, l.MaxAt(now)))
	} else {
		fmt.Fprintf(m.Stderr, "limit %s raised by %s until %s: %s in force\n", l.ID, amountText(&l, by), ts(r.Until), amountText(&l, l.MaxAt(now)))
	}
	_, err = fmt.Fprintln(m.Stdout, r.ID)
	return err
}
