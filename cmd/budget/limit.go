package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

const limitHelp = `usage: budget limit <set|ls|rm|raise> [flags]

	limit set       create or update a limit (prints its id)
	limit ls        list limits
	limit rm ID     delete a limit with its counters (exit 4 when unknown)
	limit raise ID  add to a limit for a while, or for good (prints the raise's id)
`

func (m *Main) runLimit(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, limitHelp)
		return usagef("limit", "missing subcommand: set, ls, rm or raise")
	}
	switch args[0] {
	case "set":
		return m.runLimitSet(ctx, args[1:])
	case "ls", "list":
		return m.runLimitLs(ctx, args[1:])
	case "rm", "remove":
		return m.runLimitRm(ctx, args[1:])
	case "raise":
		return m.runLimitRaise(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(m.Stdout, limitHelp)
		return nil
	}
	return usagef("limit", "unknown subcommand %q: want set, ls, rm or raise", args[0])
}

const limitSetHelp = `usage: budget limit set (--key K | --team T | --org O | --default)
	[--scope global|provider|model|user|tag] [--value V] --limit N
	[--metric tokens|input|output|requests|concurrent|usd] --window W [--reset-time HH:MM]
	[--tz ZONE] [--id ID] [--disabled | --enabled] [--alert P1,P2,...] [--json]

Creates a limit, or updates the one with the same owner, scope, value,
metric and window (or the one --id names). An update changes only the
attributes whose flags are given. With --id and no owner flag, the limit
with that id is updated (exit 4 when there is none); --limit is then read
in its metric's unit. --window is 1m, 1h, 1.5h (whole seconds),
daily, weekly, monthly, or once: a window that never resets, from the
limit's creation on (a prepaid balance, topped up with 'budget limit
raise'); concurrent limits take none. A model --value is matched normalised
(case, a leading vendor/, a trailing date, -latest or @tag do not count) and
may be a pattern: * for any run of characters, ? for one. A user --value is
one end user (the --user of check, record and reserve, the proxy's
X-Budget-User), or * for each end user separately: every user gets a
counter of their own. A tag --value is NAME=VALUE (project=atlas: the
requests carrying that tag, the --tag of check, record and reserve, the
proxy's X-Budget-Tags), or NAME=* for each value of the tag separately
(project=*: every project gets a counter of its own).

The owner is one of: --key, one key's limit; --team, a limit its keys share
('budget team set' creates the team); --org, a limit the keys of all its
teams share; --default, a limit that applies to every key that has no
enabled limit of its own with the same scope, value, metric and window, and
that each key counts separately. A request is checked against its key's,
its team's and its org's limits together; the most restrictive decides.

--alert 50,80,100 sets thresholds, in percent (1 to 1000) of the limit in
force: when a window's usage crosses one, an alert is logged, once per
window (and per key or user for limits counted per key or user), and
delivered by any 'budget proxy --alert-webhook' ('budget alerts ls' lists
them). --alert "" removes them; without --alert an update keeps them.
Concurrent limits take none.

Prints the limit's id, or the limit with --json (level, owner; a key that
is null unless the level is key). Warns on stderr when --key names a key
that has no gateway key ('budget key add').

`

func (m *Main) runLimitSet(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("limit set")
	dsn := m.dbFlag(fs)
	key := fs.String("key", "", "API key the limit belongs to (one of --key, --team, --org, --default)")
	team := fs.String("team", "", "team the limit belongs to: its keys share it")
	org := fs.String("org", "", "organisation the limit belongs to: the keys of its teams share it")
	isDefault := fs.Bool("default", false, "a default limit: applies to every key without an own limit of this shape")
	scope := fs.String("scope", "global", "global, provider, model, user or tag")
	value := fs.String("value", "", "the provider, model, end user (* for each user) or tag (NAME=VALUE, NAME=* for each value) of a scoped limit")
	maxText := fs.String("limit", "", "the limit, > 0 (required to create); dollars (up to 6 decimals) for --metric usd")
	metric := fs.String("metric", "tokens", "tokens, input, output, requests, concurrent or usd")
	window := fs.String("window", "", "1m, 1h, 5h, ... or daily, weekly, monthly, once (required except for concurrent)")
	resetTime := fs.String("reset-time", "", "HH:MM a calendar window starts at (default 00:00)")
	tz := fs.String("tz", "", "IANA zone of a calendar window (default UTC)")
	id := fs.String("id", "", "id of a new limit, or of the existing limit to update")
	disabled := fs.Bool("disabled", false, "disable the limit: it keeps counting but is not enforced")
	enabled := fs.Bool("enabled", false, "enable the limit")
	alerts := fs.String("alert", "", `alert thresholds in percent of the limit, such as 50,80,100 ("" removes them)`)
	asJSON := fs.Bool("json", false, "print the limit as JSON")
	pos, err := m.parseArgs(fs, limitSetHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("limit set", pos); err != nil {
		return err
	}
	set := visited(fs)
	spec := budget.LimitSpec{ID: *id, Key: *key, Team: *team, Org: *org, Default: *isDefault, Scope: *scope, ScopeValue: *value, Metric: *metric, Window: *window}
	if set["reset-time"] {
		spec.ResetTime = resetTime
	}
	if set["tz"] {
		spec.Timezone = tz
	}
	// --id alone addresses a stored limit: its identity and its unit are
	// known only once it is read.
	byID := set["id"] && !set["key"] && !set["team"] && !set["org"] && !set["default"]
	if set["limit"] && !byID {
		max, err := parseLimit(*metric, *maxText)
		if err != nil {
			return err
		}
		spec.Max = &max
	}
	if set["alert"] {
		as, err := budget.ParseAlerts(*alerts)
		if err != nil {
			return err
		}
		spec.Alerts = &as
	}
	switch {
	case set["disabled"] && set["enabled"] && *disabled == *enabled:
		return budget.Invalid("enabled", *enabled, "conflicts with --disabled")
	case set["disabled"]:
		spec.Enabled = ptr(!*disabled)
	case set["enabled"]:
		spec.Enabled = ptr(*enabled)
	}
	if byID {
		return m.limitSetByID(ctx, *dsn, spec, set, *maxText, *resetTime, *tz, *asJSON)
	}
	// Validate before opening, so bad input creates nothing.
	if err := spec.Validate(); err != nil {
		return err
	}
	if spec.Max == nil && sqliteMissing(*dsn) {
		// Without --limit this can only update, and there is nothing to
		// update; Validate cannot know that, as it does not see the store.
		return budget.Invalid("limit", "", "is required to create a limit")
	}
	if err := noTeamsYet(*dsn, spec.Team, spec.Org); err != nil {
		return err
	}

	db, err := m.openDB(ctx, *dsn, dbOptions{create: true})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	l, _, err := db.SetLimit(ctx, spec)
	if err != nil {
		return err
	}
	if l.Key != "" {
		m.warnNoGatewayKey(ctx, db.KeyStore(), l.Key)
	}
	if *asJSON {
		return writeJSON(m.Stdout, jsonview.LimitOf(&l, m.Now()))
	}
	_, err = fmt.Fprintln(m.Stdout, l.ID)
	return err
}

// limitSetByID updates the limit spec.ID names, changing only the
// attributes whose flags were given (set). Everything that can be checked
// without the limit is checked before the database is opened; the amount,
// whose unit is the stored limit's metric, after reading it but still
// before any write. An unknown id is not found (exit 4) and creates
// nothing, not even a missing database file.
func (m *Main) limitSetByID(ctx context.Context, dsn string, spec budget.LimitSpec, set map[string]bool, maxText, resetTime, tz string, asJSON bool) (err error) {
	id := strings.TrimSpace(spec.ID)
	if id == "" {
		return budget.Invalid("id", spec.ID, "must not be empty")
	}
	if set["limit"] {
		if _, err := strconv.ParseInt(strings.TrimSpace(maxText), 10, 64); err != nil {
			if _, uerr := budget.ParseUSD("limit", maxText); uerr != nil {
				return budget.Invalid("limit", maxText, "want an amount greater than 0 (dollars for a usd limit, else a whole number)")
			}
		}
	}
	if set["metric"] {
		if _, err := budget.ParseMetric(spec.Metric); err != nil {
			return err
		}
	}
	if set["window"] {
		if _, err := budget.ParseWindow(spec.Window, resetTime, tz); err != nil {
			return err
		}
	}
	if sqliteMissing(dsn) {
		return fmt.Errorf("limit %q: %w", id, budget.ErrNotFound)
	}
	db, err := m.openDB(ctx, dsn, dbOptions{})
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
		return fmt.Errorf("limit %q: %w", id, budget.ErrNotFound)
	}
	cur := &ls[i]
	// The stored identity fills what was not given; what was given and
	// differs is refused by SetLimit as another limit's identity.
	spec.Key, spec.Team, spec.Org, spec.Default = cur.Key, cur.Team, cur.Org, cur.IsDefault()
	if !set["scope"] {
		spec.Scope, spec.ScopeValue = string(cur.Scope), cur.ScopeValue
	}
	if !set["value"] && set["scope"] {
		spec.ScopeValue = cur.ScopeValue
	}
	if !set["metric"] {
		spec.Metric = string(cur.Metric)
	}
	if !set["window"] {
		spec.Window = cur.Window.String()
		if cur.Window.Kind == budget.NoWindow {
			spec.Window = ""
		}
	}
	if set["limit"] {
		max, err := parseLimit(spec.Metric, maxText)
		if err != nil {
			return err
		}
		spec.Max = &max
	}
	spec.MustExist = true
	l, _, err := db.SetLimit(ctx, spec)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(m.Stdout, jsonview.LimitOf(&l, m.Now()))
	}
	_, err = fmt.Fprintln(m.Stdout, l.ID)
	return err
}

const limitLsHelp = `usage: budget limit ls [--key K] [--json]

Lists the limits (of one key and the default limits with --key) in listing
order: level (default, key, team, org), owner, scope, value, metric, window
length, id. LIMIT is the limit in force now: with raises, the base limit
follows it. ALERTS are the alert thresholds (percent of the limit). With
--json prints {"limits": [...]}.

`

func (m *Main) runLimitLs(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("limit ls")
	dsn := m.dbFlag(fs)
	key := fs.String("key", "", "list only this key's limits")
	asJSON := fs.Bool("json", false, `print {"limits": [...]}`)
	pos, err := m.parseArgs(fs, limitLsHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("limit ls", pos); err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	now := m.Now()
	ls, err := db.Limits(ctx, strings.TrimSpace(*key))
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, struct {
			Limits []jsonview.Limit `json:"limits"`
		}{jsonview.Limits(ls, now)})
	}
	if len(ls) == 0 {
		_, err = fmt.Fprintln(m.Stdout, "no limits")
		return err
	}
	w := newTable(m.Stdout)
	fmt.Fprintln(w, "ID\tOWNER\tSCOPE\tMETRIC\tWINDOW\tLIMIT\tENABLED\tALERTS")
	for i := range ls {
		l := &ls[i]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.ID, ownerText(l), l.ScopeString(), l.Metric, windowText(l),
			limitText(l, l.MaxAt(now)), yesNo(l.Enabled), alertsText(l.Alerts))
	}
	return w.Flush()
}

const limitRmHelp = `usage: budget limit rm [--db PATH] ID

Deletes a limit with its counters, rollovers and holds. The usage history
stays. Exit 4 when no limit has that id.

`

func (m *Main) runLimitRm(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("limit rm")
	dsn := m.dbFlag(fs)
	pos, err := m.parseArgs(fs, limitRmHelp, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("limit rm", "want exactly one limit id, got %d arguments", len(pos))
	}
	id := strings.TrimSpace(pos[0])
	if id == "" {
		return budget.Invalid("id", pos[0], "must not be empty")
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	return db.DeleteLimit(ctx, id)
}

// noTeamsYet refuses a team or an org on a SQLite database that does not
// exist yet: it has none, and the command must not create the file only to
// refuse (the domain's own check, with the same words, needs a store).
func noTeamsYet(dsn, team, org string) error {
	if !sqliteMissing(dsn) {
		return nil
	}
	if team = strings.TrimSpace(team); team != "" {
		return budget.Invalid("team", team, "unknown team (create it with: budget team set "+team+")")
	}
	if org = strings.TrimSpace(org); org != "" {
		return budget.Invalid("org", org, "unknown org (an org exists once a team names it: budget team set TEAM --org "+org+")")
	}
	return nil
}

// warnNoGatewayKey warns on stderr when key has no gateway key: a misspelt
// --key would otherwise leave the real key unlimited without a word.
func (m *Main) warnNoGatewayKey(ctx context.Context, s gatekey.Store, key string) {
	keys, err := s.ListKeys(ctx)
	if err != nil {
		return // a warning only; the limit is set
	}
	for _, k := range keys {
		if k.Name == key {
			return
		}
	}
	if len(keys) > 0 {
		fmt.Fprintf(m.Stderr, "budget: warning: no gateway key is named %q (is it misspelt? 'budget key ls' lists them); the limit applies to that name only\n", key)
	}
}

// alertsText is a limit's thresholds for tables: "50%,80%", "-" for none.
func alertsText(as []int) string {
	if len(as) == 0 {
		return "-"
	}
	ps := make([]string, len(as))
	for i, p := range as {
		ps[i] = strconv.Itoa(p) + "%"
	}
	return strings.Join(ps, ",")
}

// parseLimit reads --limit: dollars for a usd limit (stored in
// micro-dollars), else a whole number.
func parseLimit(metric, v string) (int64, error) {
	return budget.ParseAmount("limit", budget.Metric(strings.TrimSpace(metric)), v)
}

// amountText prints an amount of l's metric: dollars for usd limits
// (micro-dollars in JSON), else the number.
func amountText(l *budget.Limit, v int64) string {
	if l.Metric == budget.MetricUSD {
		return "$" + budget.FormatUSD(v)
	}
	return strconv.FormatInt(v, 10)
}
