package budget

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Teams and organisations: the levels above a key.
//
// A key belongs to at most one team, a team to at most one organisation. A
// request is checked against its key's limits, its team's and its
// organisation's together, and a reservation holds on all of them at once
// (they are limits like any other, locked and decided in the same
// transaction). Each event stores the team and organisation it was charged
// to, so moving a key moves only what it spends from then on.
//
// Every change here moves the store's limits version, so checks and the
// writer of every process pick it up as they do a new limit.

// checkOwnerExists fails with an invalid-input error naming the field
// when a team or an organisation does not exist.
func checkOwnerExists(ctx context.Context, tx Tx, level Level, name string) error {
	switch level {
	case LevelTeam:
		ts, err := tx.Teams(ctx)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(ts, func(t Team) bool { return t.Name == name }) {
			return invalid("team", name, "unknown team (create it with: budget team set "+name+")")
		}
	case LevelOrg:
		os, err := tx.Orgs(ctx)
		if err != nil {
			return err
		}
		if !slices.Contains(os, name) {
			return invalid("org", name, "unknown org (an org exists once a team names it: budget team set TEAM --org "+name+")")
		}
	}
	return nil
}

func checkTeamName(field, v string) error {
	if v == "" {
		return invalid(field, v, "must not be empty")
	}
	return CheckLabel(field, v)
}

// SetTeam creates team name in org ("" for none), or moves it there, and
// reports whether it created the team. An organisation exists once a team
// names it; a team and an organisation may not share a name.
func (t *Tracker) SetTeam(ctx context.Context, name, org string) (created bool, err error) {
	name, org = strings.TrimSpace(name), strings.TrimSpace(org)
	if err := checkTeamName("team", name); err != nil {
		return false, err
	}
	if org != "" {
		if err := CheckLabel("org", org); err != nil {
			return false, err
		}
	}
	if org == name {
		return false, invalid("org", org, "is the team's own name; a team and an org may not share a name")
	}
	now := t.now()
	err = t.store.Update(ctx, func(tx Tx) error {
		if err := tx.LockDefinitions(ctx); err != nil {
			return err
		}
		ts, err := tx.Teams(ctx)
		if err != nil {
			return err
		}
		os, err := tx.Orgs(ctx)
		if err != nil {
			return err
		}
		if slices.Contains(os, name) {
			return invalid("team", name, "is the name of an org; a team and an org may not share a name")
		}
		if slices.ContainsFunc(ts, func(t Team) bool { return t.Name == org }) {
			return invalid("org", org, "is the name of a team; a team and an org may not share a name")
		}
		created = !slices.ContainsFunc(ts, func(t Team) bool { return t.Name == name })
		before, err := findTeam(ctx, tx, name)
		if err != nil {
			return err
		}
		if err := tx.PutTeam(ctx, Team{Name: name, Org: org}); err != nil {
			return err
		}
		after, err := findTeam(ctx, tx, name)
		if err != nil {
			return err
		}
		action := AuditUpdate
		if created {
			action = AuditCreate
		}
		return t.logTeam(ctx, tx, now, action, before, after)
	})
	if err != nil {
		return false, err
	}
	t.InvalidateLimits("")
	return created, nil
}

// DeleteTeam removes a team; its keys are left in no team. It refuses a
// team that still has limits (remove them first), and returns ErrNotFound
// for an unknown team.
func (t *Tracker) DeleteTeam(ctx context.Context, name string) error {
	name = strings.TrimSpace(name)
	now := t.now()
	err := t.store.Update(ctx, func(tx Tx) error {
		if err := tx.LockDefinitions(ctx); err != nil {
			return err
		}
		ts, err := tx.Teams(ctx)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(ts, func(t Team) bool { return t.Name == name }) {
			return fmt.Errorf("team %q: %w", name, ErrNotFound)
		}
		ls, err := tx.OwnedLimits(ctx, LevelTeam, name)
		if err != nil {
			return err
		}
		if len(ls) > 0 {
			ids := make([]string, len(ls))
			for i := range ls {
				ids[i] = ls[i].ID
			}
			slices.Sort(ids)
			return invalid("team", name, fmt.Sprintf("has %d limit(s) (%s); remove them first with budget limit rm", len(ids), strings.Join(ids, ", ")))
		}
		before, err := findTeam(ctx, tx, name)
		if err != nil {
			return err
		}
		if err := t.logTeam(ctx, tx, now, AuditDelete, before, nil); err != nil {
			return err
		}
		return tx.DeleteTeam(ctx, name)
	})
	if err == nil {
		t.InvalidateLimits("")
	}
	return err
}

// Teams lists the teams, sorted by name, each with its organisation and
// keys.
func (t *Tracker) Teams(ctx context.Context) ([]Team, error) {
	var ts []Team
	err := t.store.View(ctx, func(tx Tx) error {
		var err error
		ts, err = tx.Teams(ctx)
		return err
	})
	return ts, err
}

// SetKeyTeam places key in team ("" takes it out of any). The key need
// not be a gateway key: a library's keys are names. What the key spent
// before stays charged where it was.
func (t *Tracker) SetKeyTeam(ctx context.Context, key, team string) error {
	return t.placeKey(ctx, key, team, nil)
}

// PlaceNewKey places key in team and runs create in the same transaction:
// create writes the key's own record (a new gateway key: see
// gatekey.CreateIn) and returns its audit changes, which are logged with
// the team the key lands in. So a key made for a team is never, even for
// a moment, a key in no team, and its creation is seen in the team's
// audit log. A move from another team is logged as such too.
func (t *Tracker) PlaceNewKey(ctx context.Context, key, team string, create func(ctx context.Context, tx Tx) ([]Change, error)) error {
	if strings.TrimSpace(team) == "" {
		return invalid("team", team, "must not be empty (a key in no team needs no placement)")
	}
	return t.placeKey(ctx, key, team, create)
}

// placeKey is SetKeyTeam, and with create PlaceNewKey: a new key's
// placement is logged only as a move from another team, its creation
// (create's changes) saying where it landed.
func (t *Tracker) placeKey(ctx context.Context, key, team string, create func(ctx context.Context, tx Tx) ([]Change, error)) error {
	key, team = strings.TrimSpace(key), strings.TrimSpace(team)
	if key == "" {
		return invalid("key", key, "must not be empty")
	}
	if err := CheckLabel("key", key); err != nil {
		return err
	}
	if err := CheckLabel("team", team); err != nil {
		return err
	}
	now := t.now()
	err := t.store.Update(ctx, func(tx Tx) error {
		if err := tx.LockDefinitions(ctx); err != nil {
			return err
		}
		if team != "" {
			if err := checkOwnerExists(ctx, tx, LevelTeam, team); err != nil {
				return err
			}
		}
		old, _, err := tx.Placement(ctx, key)
		if err != nil {
			return err
		}
		if err := tx.SetKeyTeam(ctx, key, team); err != nil {
			return err
		}
		if create == nil || old != "" {
			if err := t.logPlacement(ctx, tx, now, key, old, team); err != nil {
				return err
			}
		}
		if create == nil {
			return nil
		}
		cs, err := create(ctx, tx)
		if err != nil {
			return err
		}
		return t.logChanges(ctx, tx, now, cs)
	})
	if err == nil {
		t.InvalidateLimits("")
	}
	return err
}

// RaiseLimit adds by to limit id until until (zero: for good), in the
// limit's unit (micro-dollars for usd), and returns the limit with the
// raise. Every process applies a raise while it lasts and falls back by
// itself at until.
func (t *Tracker) RaiseLimit(ctx context.Context, id string, by int64, until time.Time) (Limit, Raise, error) {
	id = strings.TrimSpace(id)
	now := t.now()
	if by <= 0 || by > MaxTokens {
		return Limit{}, Raise{}, invalid("by", by, "must be between 1 and 2^53-1")
	}
	if !until.IsZero() {
		if err := CheckInstant("until", until); err != nil {
			return Limit{}, Raise{}, err
		}
		if !until.After(now) {
			return Limit{}, Raise{}, invalid("until", until.UTC().Format(time.RFC3339), "must be in the future")
		}
	}
	r := Raise{ID: NewID("rse_"), Amount: by, Until: until.UTC(), At: now.UTC()}
	if until.IsZero() {
		r.Until = time.Time{}
	}
	var out Limit
	err := t.store.Update(ctx, func(tx Tx) error {
		if err := tx.LockDefinitions(ctx); err != nil {
			return err
		}
		l, err := tx.Limit(ctx, id)
		if err != nil {
			return err
		}
		if err := tx.AddRaise(ctx, id, r); err != nil {
			return err
		}
		before := l
		l.Raises = append(slices.Clone(l.Raises), r)
		out = l
		return t.logLimit(ctx, tx, now, AuditRaise, &before, &out)
	})
	if err != nil {
		return Limit{}, Raise{}, err
	}
	t.InvalidateLimits("")
	return out, r, nil
}
