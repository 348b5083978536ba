// Command budget manages a tokenbudget database: limits, usage, checks,
// reservations, parked providers and reports. Each subcommand lives in its
// own file with its own flag.FlagSet; Run dispatches to them and main only
// maps Run's error to an exit code.
//
// Exit codes (contract section 7): 0 ok; 1 runtime error; 2 bad usage or
// invalid input; 3 refused; 4 not found or already settled; 5 drift found.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func main() {
	// The first interrupt cancels the command, which still writes what it
	// has queued (an import keeps a clean prefix); a second one kills it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	err := Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err))
}

// Run runs the budget command line args (without the program name). It
// reports an error on stderr and returns it; exitCode maps it to the
// process's exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	m := &Main{Stdin: stdin, Stdout: stdout, Stderr: stderr}
	return m.Run(ctx, args)
}

// Main is the program with its environment, so tests run it in process.
type Main struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Now is the wall clock: the default --at, the instant of a record
	// without --at, the logged_at of the rollovers a write logs, and the
	// real clock of the reservation commands (reserve, commit, release,
	// recover), which take no --at. (Optional; default time.Now; tests fix
	// it.)
	Now func() time.Time
	// Getenv reads the environment ($BUDGET_DB). (Optional; default os.Getenv.)
	Getenv func(string) string
}

const usage = `budget tracks token budgets for LLM gateways in an embedded database.

Usage:

	budget <command> [arguments]

Commands:

	limit set        create or update a limit
	limit ls         list limits
	limit rm         delete a limit
	limit raise      add to a limit until an instant, or for good
	alerts ls        list the alerts logged when usage crossed a limit's thresholds
	outbox ls        list what the usage hooks and the alert webhook have not received yet
	outbox rm        remove a usage hook and drop what was queued for it
	team set         create a team (in an org), or move it
	team ls          list teams with their org and keys
	team rm          remove a team
	record           record one request's usage
	import           import usage events from JSON lines
	check            ask whether a request may run now (exit 3 when refused)
	inspect          show every limit in its current window and the latest rollovers
	verify           compare every counter with the usage history (exit 5 on drift)
	backup           write a consistent copy of the SQLite database to a new file
	report           sum usage by key, team, org, user, provider, model, day, week or month
	export           write the usage history as the JSON lines import reads (or CSV)
	config export    write limits, prices, teams and gateway keys as one JSON document
	config import    recreate them from such a document
	config apply     make the database what such a document (JSON or YAML) says: --dry-run, --prune
	prune            delete events before a UTC day, keeping their daily rollups
	reserve          hold an estimate against every applicable limit (exit 3 when refused)
	commit           settle a reservation with the actual usage
	release          free a reservation without recording usage
	recover          free the holds and leases of expired reservations
	provider park    park a provider: refuse its requests until resume-at
	provider unpark  let a parked provider take work again
	provider ls      list parked providers
	price set        add or replace a price (USD per million tokens) for dollar budgets
	price ls         list the price table
	price import     add or replace prices from a JSON or CSV file
	audit ls         list who changed keys, limits, raises, teams, prices and admin tokens
	admin token add  create an admin API token, scoped to a team, an org or all (its secret is shown once)
	admin token ls   list admin tokens
	admin token revoke  revoke an admin token
	key add          create a gateway key for the proxy (its secret is shown once)
	key ls           list gateway keys
	key rotate       give a gateway key a new secret (the old one works for a grace period)
	key revoke       revoke a gateway key
	key set-team     place a key (gateway or not) in a team, or in none
	proxy            serve the OpenAI/Anthropic API under the budgets (reverse proxy)
	mock-upstream    serve a mock LLM provider, to try the proxy without an account
	demo             run the proxy and a mock provider on a fresh database, offline
	version          print the version this binary was built from (also --version)

Every command takes --db PATH (default $BUDGET_DB, else ./budget.db).
Exit codes: 0 ok, 1 runtime error, 2 bad usage or input, 3 refused,
4 not found or already settled, 5 drift found.
Run 'budget <command> -h' for a command's flags.
`

// Errors that carry an exit code of their own. Their output is already
// written, so Run prints nothing more for them.
var (
	errRefused = errors.New("refused")     // exit 3
	errDrift   = errors.New("drift found") // exit 5
)

// usageError is bad usage of the command line: exit 2.
type usageError struct {
	cmd string // "limit set"
	err error
}

func (e *usageError) Error() string {
	if e.cmd == "" {
		return fmt.Sprintf("%v (see 'budget help')", e.err)
	}
	return fmt.Sprintf("%s: %v (see 'budget %s -h')", e.cmd, e.err, e.cmd)
}

func (e *usageError) Unwrap() error { return e.err }

func usagef(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// exitCode maps an error of Run to the process's exit code.
func exitCode(err error) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue), errors.Is(err, budget.ErrInvalid):
		return 2
	case errors.Is(err, errRefused):
		return 3
	case errors.Is(err, budget.ErrNotFound), errors.Is(err, budget.ErrSettled):
		return 4
	case errors.Is(err, errDrift):
		return 5
	}
	return 1
}

// Run runs one command and reports its error on m.Stderr.
func (m *Main) Run(ctx context.Context, args []string) (err error) {
	if m.Now == nil {
		m.Now = time.Now
	}
	if m.Getenv == nil {
		m.Getenv = os.Getenv
	}
	if m.Stdin == nil {
		m.Stdin = strings.NewReader("")
	}
	defer func() {
		if err != nil && !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errRefused) && !errors.Is(err, errDrift) {
			fmt.Fprintf(m.Stderr, "budget: %v\n", err)
		}
	}()
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, usage)
		return &usageError{err: errors.New("missing command")}
	}
	cmd, rest := args[0], args[1:]
	ctx = budget.WithActor(ctx, m.cliActor())
	switch cmd {
	case "audit":
		return m.runAudit(ctx, rest)
	case "admin":
		return m.runAdmin(ctx, rest)
	case "limit":
		return m.runLimit(ctx, rest)
	case "alerts":
		return m.runAlerts(ctx, rest)
	case "outbox":
		return m.runOutbox(ctx, rest)
	case "record":
		return m.runRecord(ctx, rest)
	case "import":
		return m.runImport(ctx, rest)
	case "check":
		return m.runCheck(ctx, rest)
	case "inspect":
		return m.runInspect(ctx, rest)
	case "verify":
		return m.runVerify(ctx, rest)
	case "backup":
		return m.runBackup(ctx, rest)
	case "report":
		return m.runReport(ctx, rest)
	case "export":
		return m.runExport(ctx, rest)
	case "config":
		return m.runConfig(ctx, rest)
	case "prune":
		return m.runPrune(ctx, rest)
	case "reserve":
		return m.runReserve(ctx, rest)
	case "commit":
		return m.runCommit(ctx, rest)
	case "release":
		return m.runRelease(ctx, rest)
	case "recover":
		return m.runRecover(ctx, rest)
	case "provider":
		return m.runProvider(ctx, rest)
	case "key":
		return m.runKey(ctx, rest)
	case "team":
		return m.runTeam(ctx, rest)
	case "price":
		return m.runPrice(ctx, rest)
	case "proxy":
		return m.runProxy(ctx, rest)
	case "mock-upstream":
		return m.runMockUpstream(ctx, rest)
	case "demo":
		return m.runDemo(ctx, rest)
	case "version", "--version", "-version":
		return m.runVersion()
	case "help", "-h", "-help", "--help":
		fmt.Fprint(m.Stdout, usage)
		return nil
	}
	return &usageError{err: fmt.Errorf("unknown command %q", cmd)}
}

// newFlagSet returns a FlagSet for cmd that reports instead of printing.
func newFlagSet(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseArgs parses args into fs, allowing flags after positional arguments
// (`budget import events.jsonl --json`), and returns the positional ones.
// -h prints the command's help on stdout and returns flag.ErrHelp.
func (m *Main) parseArgs(fs *flag.FlagSet, help string, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(m.Stdout, help)
				fs.SetOutput(m.Stdout)
				fs.PrintDefaults()
				return nil, flag.ErrHelp
			}
			return nil, &usageError{cmd: fs.Name(), err: err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// visited is the set of flags given on the command line.
func visited(fs *flag.FlagSet) map[string]bool {
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// noArgs refuses positional arguments on commands that take none.
func noArgs(cmd string, pos []string) error {
	if len(pos) > 0 {
		return usagef(cmd, "unexpected argument %q", pos[0])
	}
	return nil
}

// atFlag registers --at and returns a function that resolves it: the
// instant given (RFC3339), or now.
func (m *Main) atFlag(fs *flag.FlagSet) func() (time.Time, error) {
	s := fs.String("at", "", "the instant to use, RFC3339 (default now)")
	return func() (time.Time, error) {
		if *s == "" {
			return m.Now(), nil
		}
		return parseAt(*s)
	}
}

// parseAt parses an RFC3339 instant.
func parseAt(s string) (time.Time, error) { return parseAtField("at", s) }
