package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

const providerHelp = `usage: budget provider <park|unpark|ls> [flags]

	provider park P    park a provider: refuse its requests until resume-at
	provider unpark P  let a provider take work again (exit 0 if it was not parked)
	provider ls        list parked providers
`

func (m *Main) runProvider(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, providerHelp)
		return usagef("provider", "missing subcommand: park, unpark or ls")
	}
	switch args[0] {
	case "park":
		return m.runProviderPark(ctx, args[1:])
	case "unpark":
		return m.runProviderUnpark(ctx, args[1:])
	case "ls", "list":
		return m.runProviderLs(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(m.Stdout, providerHelp)
		return nil
	}
	return usagef("provider", "unknown subcommand %q: want park, unpark or ls", args[0])
}

const providerParkHelp = `usage: budget provider park P --kind rate_limited|overloaded|auth_missing
	[--retry-after D] [--at T] [--json]

Parks provider P as of --at (default now): checks and reservations for it
are refused until resume-at = --at + --retry-after (absent or 0: 60s). It
stays listed until unparked. Parking a parked provider refreshes its kind
and times and keeps its probe-failure count. Prints when it resumes, or the
provider object {"provider", "kind", "parked_at", "resume_at",
"probe_failures"} with --json.

`

func (m *Main) runProviderPark(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("provider park")
	dsn := m.dbFlag(fs)
	kindFlag := fs.String("kind", "", "rate_limited (429), overloaded (529, repeated 503) or auth_missing (401/403) (required)")
	retryAfter := fs.Duration("retry-after", 0, "how long to refuse, a Go duration such as 30s (default 60s)")
	at := m.atFlag(fs)
	asJSON := fs.Bool("json", false, "print the provider as JSON")
	pos, err := m.parseArgs(fs, providerParkHelp, args)
	if err != nil {
		return err
	}
	provider, err := providerArg("provider park", pos)
	if err != nil {
		return err
	}
	kind, err := budget.ParseParkKind(*kindFlag)
	if err != nil {
		return err
	}
	if *retryAfter < 0 {
		return budget.Invalid("retry_after", *retryAfter, "must not be negative")
	}
	now, err := at()
	if err != nil {
		return err
	}

	db, err := m.openDB(ctx, *dsn, dbOptions{create: true})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	p, err := db.ParkAt(ctx, provider, kind, *retryAfter, nil, now)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, providerObj(&p))
	}
	_, err = fmt.Fprintf(m.Stdout, "%s parked (%s) until %s\n", p.Provider, p.Kind, tsText(p.ResumeAt))
	return err
}

const providerUnparkHelp = `usage: budget provider unpark [--db PATH] P

Lets provider P take work again and resets its probe-failure count.
Unparking a provider that is not parked is no error (exit 0).

`

func (m *Main) runProviderUnpark(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("provider unpark")
	dsn := m.dbFlag(fs)
	pos, err := m.parseArgs(fs, providerUnparkHelp, args)
	if err != nil {
		return err
	}
	provider, err := providerArg("provider unpark", pos)
	if err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	was, err := db.Unpark(ctx, provider)
	if err != nil {
		return err
	}
	if !was {
		_, err = fmt.Fprintf(m.Stdout, "%s was not parked\n", provider)
		return err
	}
	_, err = fmt.Fprintf(m.Stdout, "%s unparked\n", provider)
	return err
}

const providerLsHelp = `usage: budget provider ls [--json]

Lists the parked providers by name, including those past their resume-at
(which take work again) that no probe or unpark has cleared yet. With
--json prints {"providers": [...]}.

`

func (m *Main) runProviderLs(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("provider ls")
	dsn := m.dbFlag(fs)
	asJSON := fs.Bool("json", false, `print {"providers": [...]}`)
	pos, err := m.parseArgs(fs, providerLsHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("provider ls", pos); err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	ps, err := db.ParkedProviders(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, struct {
			Providers []providerJSON `json:"providers"`
		}{providerObjs(ps)})
	}
	if len(ps) == 0 {
		_, err = fmt.Fprintln(m.Stdout, "no parked providers")
		return err
	}
	w := newTable(m.Stdout)
	writeProviders(w, ps, m.Now())
	return w.Flush()
}

// providerArg is the one positional argument of park and unpark.
func providerArg(cmd string, pos []string) (string, error) {
	if len(pos) != 1 {
		return "", usagef(cmd, "want exactly one provider, got %d arguments", len(pos))
	}
	p := strings.TrimSpace(pos[0])
	if p == "" {
		return "", budget.Invalid("provider", pos[0], "must not be empty")
	}
	return p, nil
}

// writeProviders writes parked providers as table rows with a header;
// REFUSING says whether each still refuses work at now.
func writeProviders(w io.Writer, ps []budget.ProviderState, now time.Time) {
	fmt.Fprintln(w, "PROVIDER\tKIND\tPARKED AT\tRESUME AT\tPROBE FAILURES\tREFUSING")
	for i := range ps {
		p := &ps[i]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", p.Provider, p.Kind, tsText(p.ParkedAt), tsText(p.ResumeAt),
			p.ProbeFailures, yesNo(p.Refusing(now)))
	}
}
