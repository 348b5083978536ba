package budget

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Declarative definitions: ApplyDefinitions makes a database's limits,
// teams and prices what a document says, in one transaction.
//
// A limit is matched by its identity (owner, scope, value, metric,
// window), not by its id: one whose identity is unchanged keeps its id,
// its counters and its raises, and only its attributes (limit, enabled,
// reset time, zone, alerts) change; raises the document has and the
// database lacks are added (raises are never removed: they end by
// themselves). A document limit whose id names a limit of another
// identity replaces it. Teams are matched by name, their keys placed and
// unplaced to match; prices by (provider, model, tier, threshold, from).
// With Prune, what the document does not name is deleted: limits, then
// teams, then prices. What changed is read back as the difference of the
// definitions before and after, so the changes reported, logged in the
// audit log and printed by a dry run are exactly what was (or would be)
// written; a document that changes nothing writes nothing and logs
// nothing.

// ApplyOptions tune ApplyDefinitions.
type ApplyOptions struct {
	Prune  bool // delete what the document does not name
	DryRun bool // report the changes, write nothing
	// Also reconciles, in the same transaction and after the definitions,
	// what this package does not keep (a document's gateway keys): it
	// writes its changes in tx and returns them, to be reported and
	// logged with the others. (Optional.)
	Also func(ctx context.Context, tx Tx, prune bool, now time.Time) ([]Change, error)
}

// errDryRun rolls a dry run's transaction back.
var errDryRun = errors.New("dry run")

// ApplyDefinitions makes the definitions d says, in one transaction (see
// above), and returns the changes made (or, with DryRun, that would be),
// each logged in the audit log with ctx's actor. Bad input is refused
// before anything is written.
func (t *Tracker) ApplyDefinitions(ctx context.Context, d Definitions, o ApplyOptions) ([]Change, error) {
	return t.define(ctx, d, o, func(ctx context.Context, tx Tx, before *Definitions, ls []Limit, now time.Time) error {
		return reconcile(ctx, tx, before, &d, ls, o.Prune, now)
	})
}

// define validates d, then in one transaction runs write (given the
// definitions before it and d's validated limits) and o.Also, and returns
// what changed, logged unless o.DryRun rolls it all back.
func (t *Tracker) define(ctx context.Context, d Definitions, o ApplyOptions,
	write func(ctx context.Context, tx Tx, before *Definitions, ls []Limit, now time.Time) error) ([]Change, error) {
	ls, err := d.validate()
	if err != nil {
		return nil, err
	}
	now := t.now()
	var changes []Change
	err = t.store.Update(ctx, func(tx Tx) error {
		if err := tx.LockDefinitions(ctx); err != nil {
			return err
		}
		before, err := snapshot(ctx, tx)
		if err != nil {
			return err
		}
		if err := write(ctx, tx, &before, ls, now); err != nil {
			return err
		}
		if changes, err = changedSince(ctx, tx, &before); err != nil {
			return err
		}
		if o.Also != nil {
			more, err := o.Also(ctx, tx, o.Prune, now)
			if err != nil {
				return err
			}
			changes = append(changes, more...)
		}
		if o.DryRun {
			return errDryRun
		}
		return t.logChanges(ctx, tx, now, changes)
	})
	if errors.Is(err, errDryRun) {
		return changes, nil
	}
	if err != nil {
		return nil, err
	}
	if len(changes) > 0 {
		t.InvalidateLimits("")
		t.prices.Store(nil)
	}
	return changes, nil
}

// snapshot reads the definitions in tx.
func snapshot(ctx context.Context, tx Tx) (Definitions, error) {
	var d Definitions
	var err error
	if d.Limits, err = tx.Limits(ctx, ""); err != nil {
		return d, err
	}
	if d.Prices, err = tx.Prices(ctx); err != nil {
		return d, err
	}
	d.Teams, err = tx.Teams(ctx)
	return d, err
}

// changedSince is what changed in tx since the definitions were before.
func changedSince(ctx context.Context, tx Tx, before *Definitions) ([]Change, error) {
	after, err := snapshot(ctx, tx)
	if err != nil {
		return nil, err
	}
	return diffDefinitions(ctx, tx, before, &after)
}

// logChanges logs each of cs, made in tx.
func (t *Tracker) logChanges(ctx context.Context, tx Tx, now time.Time, cs []Change) error {
	for _, c := range cs {
		if err := t.logChange(ctx, tx, now, c); err != nil {
			return err
		}
	}
	return nil
}

// reconcile writes in tx what makes cur into want (its limits ls,
// validated).
func reconcile(ctx context.Context, tx Tx, cur, want *Definitions, ls []Limit, prune bool, now time.Time) error {
	if err := checkOwners(cur, want, ls, prune); err != nil {
		return err
	}
	curTeams := make(map[string]*Team, len(cur.Teams))
	for i := range cur.Teams {
		curTeams[cur.Teams[i].Name] = &cur.Teams[i]
	}
	placed := map[string]bool{}
	for _, w := range want.Teams {
		for _, k := range w.Keys {
			placed[k] = true
		}
	}
	// Teams first (a team's limits need it), and keys taken out of the
	// teams the document lists without them before they are placed.
	for _, w := range want.Teams {
		c := curTeams[w.Name]
		if c == nil || c.Org != w.Org {
			if err := tx.PutTeam(ctx, Team{Name: w.Name, Org: w.Org}); err != nil {
				return err
			}
		}
		if c != nil {
			for _, k := range c.Keys {
				if !slices.Contains(w.Keys, k) && !placed[k] {
					if err := tx.SetKeyTeam(ctx, k, ""); err != nil {
						return err
					}
				}
			}
		}
	}
	for _, w := range want.Teams {
		for _, k := range w.Keys {
			if c := curTeams[w.Name]; c == nil || !slices.Contains(c.Keys, k) {
				if err := tx.SetKeyTeam(ctx, k, w.Name); err != nil {
					return err
				}
			}
		}
	}
	if err := reconcileLimits(ctx, tx, cur.Limits, ls, prune, now); err != nil {
		return err
	}
	if prune {
		for _, c := range cur.Teams {
			if !slices.ContainsFunc(want.Teams, func(w Team) bool { return w.Name == c.Name }) {
				if err := tx.DeleteTeam(ctx, c.Name); err != nil {
					return err
				}
			}
		}
	}
	return reconcilePrices(ctx, tx, cur.Prices, want.Prices, prune)
}

// checkOwners refuses a document whose team and org limits name a team
// or org that will not exist, or whose team takes an org's name. The
// teams there will be are the document's, and without prune also the
// database's others.
func checkOwners(cur, want *Definitions, ls []Limit, prune bool) error {
	final := slices.Clone(want.Teams)
	if !prune {
		for _, c := range cur.Teams {
			if !slices.ContainsFunc(want.Teams, func(w Team) bool { return w.Name == c.Name }) {
				final = append(final, c)
			}
		}
	}
	teams, orgs := map[string]bool{}, map[string]bool{}
	for _, tm := range final {
		teams[tm.Name] = true
		if tm.Org != "" {
			orgs[tm.Org] = true
		}
	}
	for t := range teams {
		if orgs[t] {
			return invalid("team", t, "is the name of an org too; a team and an org may not share a name")
		}
	}
	for i := range ls {
		l := &ls[i]
		switch {
		case l.Team != "" && !teams[l.Team]:
			return invalid("team", l.Team, "limit "+l.ID+" names a team that will not exist")
		case l.Org != "" && !orgs[l.Org]:
			return invalid("org", l.Org, "limit "+l.ID+" names an org no team will be in")
		}
	}
	return nil
}

// reconcileLimits creates, changes and (with prune) deletes limits so
// that cur becomes want, matching by identity.
func reconcileLimits(ctx context.Context, tx Tx, cur, want []Limit, prune bool, now time.Time) error {
	kept := make(map[string]bool, len(cur))
	byID := make(map[string]*Limit, len(cur))
	byIdentity := make(map[string]*Limit, len(cur))
	for i := range cur {
		byID[cur[i].ID] = &cur[i]
		byIdentity[identity(&cur[i])] = &cur[i]
	}
	for i := range want {
		w := &want[i]
		if same := byIdentity[identity(w)]; same != nil {
			kept[same.ID] = true
			if err := updateLimit(ctx, tx, same, w, now); err != nil {
				return err
			}
			continue
		}
		if old := byID[w.ID]; old != nil {
			// The document gives this id another identity: a new limit
			// in the old one's place.
			if err := tx.DeleteLimit(ctx, old.ID); err != nil {
				return err
			}
			kept[old.ID] = true
		}
		created := now
		if w.Window.Kind == Once && !w.Window.Anchor.IsZero() {
			created = w.Window.Anchor
		} else if w.Window.Kind == Once {
			w.Window.Anchor = now.UTC()
		}
		if err := seedable(ctx, tx, w, now); err != nil {
			return err
		}
		l := *w
		l.Raises = nil
		if err := tx.InsertLimit(ctx, l, created); err != nil {
			return err
		}
		if err := addRaises(ctx, tx, &l, w.Raises, now); err != nil {
			return err
		}
	}
	if !prune {
		return nil
	}
	for i := range cur {
		if !kept[cur[i].ID] {
			if err := tx.DeleteLimit(ctx, cur[i].ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// identity is l's identity as one string: what SameIdentity compares
// (names hold no control characters, so the separator is unambiguous).
func identity(l *Limit) string {
	return strings.Join([]string{l.Key, l.Team, l.Org, string(l.Scope), l.ScopeValue, string(l.Metric), l.Window.String()}, "\x00")
}

// updateLimit gives cur w's attributes (its id, counters and raises kept)
// and adds w's raises cur lacks.
func updateLimit(ctx context.Context, tx Tx, cur, w *Limit, now time.Time) error {
	next := *cur
	next.Max, next.Enabled, next.Alerts = w.Max, w.Enabled, w.Alerts
	next.Window.ResetTime, next.Window.Zone = w.Window.ResetTime, w.Window.Zone
	if !bytes.Equal(limitJSON(&next), limitJSON(cur)) {
		if err := tx.UpdateLimit(ctx, next, now); err != nil {
			return err
		}
	}
	return addRaises(ctx, tx, cur, w.Raises, now)
}

// addRaises adds to l the raises of rs it does not have (by id).
func addRaises(ctx context.Context, tx Tx, l *Limit, rs []Raise, now time.Time) error {
	for _, r := range rs {
		if slices.ContainsFunc(l.Raises, func(c Raise) bool { return c.ID == r.ID }) {
			continue
		}
		if r.ID == "" || r.Amount <= 0 || r.Amount > MaxTokens {
			return invalid("raises", r.ID, "of limit "+l.ID+": a raise needs an id and an amount from 1 to 2^53-1")
		}
		if r.At.IsZero() {
			r.At = now
		}
		if err := tx.AddRaise(ctx, l.ID, r); err != nil {
			return err
		}
	}
	return nil
}

// reconcilePrices puts the prices of want that cur lacks or has with
// other amounts and, with prune, deletes those want lacks.
func reconcilePrices(ctx context.Context, tx Tx, cur, want []Price, prune bool) error {
	var put []Price
	for i := range want {
		w := &want[i]
		j := slices.IndexFunc(cur, func(c Price) bool { return samePrice(&c, w) })
		if j < 0 || !bytes.Equal(priceJSON(&cur[j]), priceJSON(w)) {
			put = append(put, *w)
		}
	}
	if len(put) > 0 {
		if err := tx.PutPrices(ctx, put); err != nil {
			return err
		}
	}
	if !prune {
		return nil
	}
	for i := range cur {
		if !slices.ContainsFunc(want, func(w Price) bool { return samePrice(&cur[i], &w) }) {
			if err := tx.DeletePrice(ctx, cur[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// diffDefinitions is what changed from before to after, both read in tx:
// teams by name, limits by id, prices by identity, in that order, each
// placed where it sits (after the change, or before a delete).
func diffDefinitions(ctx context.Context, tx Tx, before, after *Definitions) ([]Change, error) {
	var out []Change
	for _, c := range diffBy(before.Teams, after.Teams, func(t *Team) string { return t.Name }, teamJSON) {
		c.Object = ObjectTeam
		tm := findIn(after.Teams, before.Teams, c.ObjectID, func(t *Team) string { return t.Name })
		c.Team, c.Org = tm.Name, tm.Org
		if was := findIn(before.Teams, nil, c.ObjectID, func(t *Team) string { return t.Name }); was.Name != "" && was.Org != tm.Org {
			c.WasTeam, c.WasOrg = was.Name, was.Org
		}
		out = append(out, c)
	}
	for _, c := range diffBy(before.Limits, after.Limits, func(l *Limit) string { return l.ID }, limitJSON) {
		c.Object = ObjectLimit
		l := findIn(after.Limits, before.Limits, c.ObjectID, func(l *Limit) string { return l.ID })
		p, err := limitPlaced(ctx, tx, &l)
		if err != nil {
			return nil, err
		}
		c.Team, c.Org = p.Team, p.Org
		out = append(out, c)
	}
	for _, c := range diffBy(before.Prices, after.Prices, PriceID, priceJSON) {
		c.Object = ObjectPrice
		out = append(out, c)
	}
	return out, nil
}

// diffBy compares two sets of objects by id and JSON view: creates,
// updates and deletes, sorted by id.
func diffBy[T any](before, after []T, id func(*T) string, view func(*T) json.RawMessage) []Change {
	b := make(map[string]json.RawMessage, len(before))
	for i := range before {
		b[id(&before[i])] = view(&before[i])
	}
	var out []Change
	seen := make(map[string]bool, len(after))
	for i := range after {
		k, v := id(&after[i]), view(&after[i])
		seen[k] = true
		switch old, ok := b[k]; {
		case !ok:
			out = append(out, Change{Action: AuditCreate, ObjectID: k, After: v})
		case !bytes.Equal(old, v):
			out = append(out, Change{Action: AuditUpdate, ObjectID: k, Before: old, After: v})
		}
	}
	for k, old := range b {
		if !seen[k] {
			out = append(out, Change{Action: AuditDelete, ObjectID: k, Before: old})
		}
	}
	slices.SortFunc(out, func(x, y Change) int { return strings.Compare(x.ObjectID, y.ObjectID) })
	return out
}

// findIn is the object with id k in first, else in second.
func findIn[T any](first, second []T, k string, id func(*T) string) T {
	for _, s := range [][]T{first, second} {
		for i := range s {
			if id(&s[i]) == k {
				return s[i]
			}
		}
	}
	var zero T
	return zero
}

// FormatChange is one change as a line of a diff: "+ kind id {json}" for
// a create, "- kind id" for a delete, "~ kind id: field old -> new, ..."
// for an update (or "revoke"/"rotate" for a key's).
func FormatChange(c *Change) string {
	head := string(c.Object) + " " + c.ObjectID
	switch {
	case c.Before == nil:
		return "+ " + head + " " + string(c.After)
	case c.After == nil:
		return "- " + head
	}
	return fmt.Sprintf("~ %s: %s", head, strings.Join(ChangedFields(c), ", "))
}
