package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/usagehook"
)

const outboxHelp = `usage: budget outbox ls|rm ...

	outbox ls  list what the usage hooks and the alert webhook have not received yet
	outbox rm  remove a usage hook and drop what was queued for it
`

const outboxLsHelp = `usage: budget outbox ls [--db PATH] [--json]

Lists the outbox backlog: per usage hook ('budget proxy --usage-webhook
URL' registers its URL), the usage events queued for it and not delivered
yet; and the alerts not delivered yet (KIND alert, no destination). Every
hook is listed, with 0 pending when it is up to date. OLDEST is when the
oldest pending one was queued (alerts: logged), ATTEMPTS the most failed
deliveries of one of them, NEXT TRY the earliest a failed one is tried
again, LAST ERROR the latest failure's (usage hooks only).

A URL's query and credentials, where a webhook's token often sits, are
shown as "#" and a short hash (as /metrics labels them), in DESTINATION
and in LAST ERROR.

With --json prints {"outbox": [...]}, each with kind ("usage" or
"alert"), destination ("" for alerts; the URL as registered, query and
credentials included: what 'outbox rm' takes), pending, oldest, attempts,
next_attempt (null when none waits) and last_error (redacted).

`

const outboxRmHelp = `usage: budget outbox rm [--db PATH] DESTINATION

Removes the usage hook DESTINATION (a --usage-webhook URL) and drops the
events queued for it and not delivered: from then on no event is queued
for it, until a proxy registers it again. Prints how many were dropped.
Exit 4 when no such hook exists.

`

func (m *Main) runOutbox(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, outboxHelp)
		return usagef("outbox", "missing subcommand: ls or rm")
	}
	switch args[0] {
	case "ls", "list":
		return m.runOutboxLs(ctx, args[1:])
	case "rm":
		return m.runOutboxRm(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(m.Stdout, outboxHelp)
		return nil
	}
	return usagef("outbox", "unknown subcommand %q: want ls or rm", args[0])
}

// outboxObject is one backlog line of outbox ls --json.
type outboxObject struct {
	Kind        string  `json:"kind"`
	Destination string  `json:"destination"`
	Pending     int64   `json:"pending"`
	Oldest      *string `json:"oldest"`
	Attempts    int     `json:"attempts"`
	NextAttempt *string `json:"next_attempt"`
	LastError   string  `json:"last_error"`
}

func (m *Main) runOutboxLs(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("outbox ls")
	dsn := m.dbFlag(fs)
	asJSON := fs.Bool("json", false, `print {"outbox": [...]}`)
	pos, err := m.parseArgs(fs, outboxLsHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("outbox ls", pos); err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	bl, err := db.OutboxBacklog(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		objs := make([]outboxObject, len(bl))
		for i, b := range bl {
			// The destination as registered: what 'outbox rm' takes.
			objs[i] = outboxObject{Kind: b.Kind, Destination: b.Dest, Pending: b.Pending, Attempts: b.Attempts, LastError: redactedError(b),
				Oldest: optTime(b.Oldest), NextAttempt: optTime(b.NextAttempt)}
		}
		return writeJSON(m.Stdout, struct {
			Outbox []outboxObject `json:"outbox"`
		}{objs})
	}
	if len(bl) == 0 {
		_, err = fmt.Fprintln(m.Stdout, "no usage hooks and no undelivered alerts")
		return err
	}
	w := newTable(m.Stdout)
	fmt.Fprintln(w, "KIND\tDESTINATION\tPENDING\tOLDEST\tATTEMPTS\tNEXT TRY\tLAST ERROR")
	for _, b := range bl {
		dest, last := usagehook.Label(b.Dest), redactedError(b)
		if dest == "" {
			dest = "-"
		}
		if last == "" {
			last = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", b.Kind, budget.Visible(dest), b.Pending, tsText(b.Oldest),
			strconv.Itoa(b.Attempts), tsText(b.NextAttempt), budget.Visible(last))
	}
	return w.Flush()
}

// redactedError is b's last error without its destination's query and
// credentials (usagehook.Label): delivery errors are stored redacted
// (alert.Post), but one stored by an older version may name the URL whole.
func redactedError(b budget.OutboxBacklog) string {
	if b.Dest == "" || b.LastError == "" {
		return b.LastError
	}
	return strings.ReplaceAll(b.LastError, b.Dest, usagehook.Label(b.Dest))
}

// optTime is t as JSON: null for the zero time.
func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := ts(t)
	return &s
}

func (m *Main) runOutboxRm(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("outbox rm")
	dsn := m.dbFlag(fs)
	pos, err := m.parseArgs(fs, outboxRmHelp, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("outbox rm", "want one DESTINATION, got %d arguments", len(pos))
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	n, err := db.RemoveUsageHook(ctx, pos[0])
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(m.Stdout, "removed usage hook %s: %d undelivered events dropped\n", budget.Visible(pos[0]), n)
	return err
}
