package main

import (
	"context"
	"fmt"
	"os/user"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

const auditHelp = `usage: budget audit ls [--since T] [--limit N] [--json]

	audit ls  list the changes made to keys, limits, raises, teams, prices and admin tokens
`

const auditLsHelp = `usage: budget audit ls [--db PATH] [--since T] [--limit N] [--json]

Lists the audit log, oldest first: every change to gateway keys (and key
placements), limits, raises, teams, prices and admin tokens, made by this
command ("cli:USER", the OS user), a config apply ("config FILE"), or the
admin API (the admin token's name, or "admin" for --admin-token-env's). Each
entry is written in the change's own transaction; a change that changed
nothing logs nothing. --since T (RFC3339, or a date) lists the entries at
or after T; --limit N the newest N. Prune never deletes entries and 'config
export' does not include them.

With --json prints {"entries": [{"id", "at", "actor", "actor_kind",
"action", "object", "object_id", "team", "org", "was_team", "was_org",
"before", "after"}]}: team and org place the object, was_team and was_org
where a move took it from (null when it did not move); before and after
are the object's JSON (null for a create's before and a delete's after),
never a secret or a hash.

`

func (m *Main) runAudit(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, auditHelp)
		return usagef("audit", "missing subcommand: ls")
	}
	switch args[0] {
	case "ls", "list":
		return m.runAuditLs(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(m.Stdout, auditHelp)
		return nil
	}
	return usagef("audit", "unknown subcommand %q: want ls", args[0])
}

func (m *Main) runAuditLs(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("audit ls")
	dsn := m.dbFlag(fs)
	since := fs.String("since", "", "list entries at or after this instant (RFC3339 or YYYY-MM-DD)")
	n := fs.Int("limit", 0, "list only the newest N entries (0: all)")
	asJSON := fs.Bool("json", false, `print {"entries": [...]}`)
	pos, err := m.parseArgs(fs, auditLsHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("audit ls", pos); err != nil {
		return err
	}
	f := budget.AuditFilter{Limit: *n}
	if *n < 0 {
		return budget.Invalid("limit", *n, "must be 0 (all) or more")
	}
	if *since != "" {
		if f.Since, err = budget.ParseInstant("since", *since); err != nil {
			return err
		}
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	es, err := db.Audit(ctx, f)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, struct {
			Entries []jsonview.AuditEntry `json:"entries"`
		}{jsonview.Audit(es)})
	}
	if len(es) == 0 {
		_, err = fmt.Fprintln(m.Stdout, "no audit entries")
		return err
	}
	w := newTable(m.Stdout)
	fmt.Fprintln(w, "AT\tACTOR\tACTION\tOBJECT\tID\tCHANGE")
	for i := range es {
		e := &es[i]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), e.Actor, e.Action, e.Object, e.ObjectID,
			changeText(e))
	}
	return w.Flush()
}

// changeText is an entry's change in one line: the fields that changed
// (field old -> new), or the object created or deleted.
func changeText(c *budget.Change) string {
	switch {
	case c.Before == nil:
		return string(c.After)
	case c.After == nil:
		return "was " + string(c.Before)
	}
	return strings.Join(budget.ChangedFields(c), ", ")
}

// cliActor is who the audit log says made this process's changes:
// cli:USER, the OS user.
func (m *Main) cliActor() budget.Actor {
	name := m.Getenv("USER")
	if name == "" {
		name = m.Getenv("LOGNAME")
	}
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	if name == "" {
		name = "unknown"
	}
	return budget.Actor{Kind: budget.ActorCLI, Name: name}
}
