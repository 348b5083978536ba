package budget

import (
	"context"
	"fmt"
)

// Admin scopes: what an admin token may see and change.
//
// A global scope (the zero AdminScope) sees and changes everything. A
// team scope sees and changes that team's keys, the limits of those keys
// and the team's own limits; an org scope the same for every team of the
// org, and the org's own limits. A read-only scope only sees. Prices are
// seen by every scope and changed by global ones; admin tokens are global
// only. The HTTP layer and the audit log's filter ask the one rule here,
// through where an object is placed (Placed).

// AdminScope is what an admin token may reach.
type AdminScope struct {
	Team     string // a team scope: this team's keys and limits
	Org      string // an org scope: its teams' keys and limits, and its own
	ReadOnly bool   // sees, never changes
}

// Global reports whether s reaches everything (it may still be read-only).
func (s AdminScope) Global() bool { return s.Team == "" && s.Org == "" }

// String is the scope as `admin token ls` shows it.
func (s AdminScope) String() string {
	out := "global"
	switch {
	case s.Team != "":
		out = "team " + s.Team
	case s.Org != "":
		out = "org " + s.Org
	}
	if s.ReadOnly {
		out += " (read-only)"
	}
	return out
}

// Validate refuses a scope naming both a team and an org.
func (s AdminScope) Validate() error {
	if s.Team != "" && s.Org != "" {
		return invalid("team", s.Team, "a token is scoped to a team or to an org, not both")
	}
	if err := CheckLabel("team", s.Team); err != nil {
		return err
	}
	return CheckLabel("org", s.Org)
}

// Placed is where an object sits for scoping: the team and the org it
// belongs to. A key is placed in its team and that team's org; a key's
// limit where its key is; a team's limit and the team itself in the team
// and its org; an org's limit in the org alone (Team ""). A default
// limit, a price, an admin token and a key in no team are placed nowhere:
// only global scopes reach them.
type Placed struct {
	Team, Org string
}

// Covers reports whether s reaches an object placed at p, to see it.
func (s AdminScope) Covers(p Placed) bool {
	switch {
	case s.Team != "":
		return p.Team == s.Team
	case s.Org != "":
		return p.Org == s.Org
	}
	return true
}

// MaySee reports whether s may see an object of kind placed at p.
func (s AdminScope) MaySee(kind ObjectKind, p Placed) bool {
	switch kind {
	case ObjectPrice:
		return true
	case ObjectAdminToken:
		return s.Global()
	}
	return s.Covers(p)
}

// MayChange reports whether s may change an object of kind placed at p
// (for a move, ask for both places). A team scope may not change its team
// itself (its org, its existence): that is the org's or a global admin's.
func (s AdminScope) MayChange(kind ObjectKind, p Placed) bool {
	if s.ReadOnly {
		return false
	}
	switch kind {
	case ObjectPrice, ObjectAdminToken:
		return s.Global()
	case ObjectTeam:
		return s.Team == "" && s.Covers(p)
	}
	return s.Covers(p)
}

// MaySeeEntry reports whether s may see an audit entry: one about an
// object it may see where the change left it, or where it was before a
// move.
func (s AdminScope) MaySeeEntry(e *AuditEntry) bool {
	if was, moved := e.Moved(); moved && s.MaySee(e.Object, was) {
		return true
	}
	return s.MaySee(e.Object, e.Placed())
}

// KeyPlaced is where key sits: its team and that team's org.
func (t *Tracker) KeyPlaced(ctx context.Context, key string) (Placed, error) {
	var p Placed
	err := t.store.View(ctx, func(tx Tx) error {
		var err error
		p.Team, p.Org, err = tx.Placement(ctx, key)
		return err
	})
	return p, err
}

// LimitPlaced is where l sits: its key's place, its team and the team's
// org, its org alone, or nowhere (a default limit).
func (t *Tracker) LimitPlaced(ctx context.Context, l *Limit) (Placed, error) {
	var p Placed
	err := t.store.View(ctx, func(tx Tx) error {
		var err error
		p, err = limitPlaced(ctx, tx, l)
		return err
	})
	return p, err
}

// TeamPlaced is where team name sits: the team and its org; ErrNotFound
// when there is no such team.
func (t *Tracker) TeamPlaced(ctx context.Context, name string) (Placed, error) {
	var p Placed
	err := t.store.View(ctx, func(tx Tx) error {
		var err error
		p, err = teamPlaced(ctx, tx, name)
		return err
	})
	return p, err
}

func limitPlaced(ctx context.Context, tx Tx, l *Limit) (Placed, error) {
	switch l.Level() {
	case LevelKey:
		team, org, err := tx.Placement(ctx, l.Key)
		return Placed{Team: team, Org: org}, err
	case LevelTeam:
		p, err := teamPlaced(ctx, tx, l.Team)
		if err != nil {
			return Placed{Team: l.Team}, nil // a team being removed: still the team's
		}
		return p, nil
	case LevelOrg:
		return Placed{Org: l.Org}, nil
	}
	return Placed{}, nil
}

func teamPlaced(ctx context.Context, tx Tx, name string) (Placed, error) {
	ts, err := tx.Teams(ctx)
	if err != nil {
		return Placed{}, err
	}
	for _, tm := range ts {
		if tm.Name == name {
			return Placed{Team: tm.Name, Org: tm.Org}, nil
		}
	}
	return Placed{}, fmt.Errorf("team %q: %w", name, ErrNotFound)
}
