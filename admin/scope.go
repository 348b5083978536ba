package admin

import (
	"context"

	"github.com/tokenbudget/tokenbudget/budget"
)

// What a principal may see and change is budget.AdminScope's rule
// (MaySee, MayChange), asked of where each object is placed
// (budget.Placed). A request reads the teams once (view) and places every
// object it lists from that snapshot, rather than one transaction per
// object (Tracker.KeyPlaced and its kin).
//
// Objects a principal may not see are left out of every listing and
// answered 403 when named: a scoped token learns no more than "not
// yours". A name no object has is 404 for every principal.

// view is what one request's principal sees, read once per request.
type view struct {
	p       *Principal
	teams   map[string]budget.Team // every team by name
	keyTeam map[string]string      // the team of each key placed in one
}

// view reads the teams p's scope is judged by.
func (h *Handler) view(ctx context.Context, p *Principal) (*view, error) {
	ts, err := h.cfg.Tracker.Teams(ctx)
	if err != nil {
		return nil, err
	}
	v := &view{p: p, teams: make(map[string]budget.Team, len(ts)), keyTeam: map[string]string{}}
	for _, t := range ts {
		v.teams[t.Name] = t
		for _, k := range t.Keys {
			v.keyTeam[k] = t.Name
		}
	}
	return v, nil
}

// keyPlaced is where the key name sits: its team and the team's org.
func (v *view) keyPlaced(name string) budget.Placed {
	t, ok := v.keyTeam[name]
	if !ok {
		return budget.Placed{}
	}
	return budget.Placed{Team: t, Org: v.teams[t].Org}
}

// teamPlaced is where the team name sits: itself and its org.
func (v *view) teamPlaced(name string) budget.Placed {
	return budget.Placed{Team: name, Org: v.teams[name].Org}
}

// limitPlaced is where l sits (budget.Placed says where each level's does).
func (v *view) limitPlaced(l *budget.Limit) budget.Placed {
	switch l.Level() {
	case budget.LevelKey:
		return v.keyPlaced(l.Key)
	case budget.LevelTeam:
		return v.teamPlaced(l.Team)
	case budget.LevelOrg:
		return budget.Placed{Org: l.Org}
	}
	return budget.Placed{}
}

// ownerPlaced is where a limit of this level and owner sits.
func (v *view) ownerPlaced(level budget.Level, owner string) budget.Placed {
	switch level {
	case budget.LevelKey:
		return v.keyPlaced(owner)
	case budget.LevelTeam:
		return v.teamPlaced(owner)
	case budget.LevelOrg:
		return budget.Placed{Org: owner}
	}
	return budget.Placed{}
}

func (v *view) sees(kind budget.ObjectKind, at budget.Placed) bool {
	return v.p.Scope.MaySee(kind, at)
}

// change refuses what the principal may not change: an object of kind at
// each of places (for a move, where it is and where it goes).
func (v *view) change(kind budget.ObjectKind, name string, places ...budget.Placed) error {
	for _, at := range places {
		if !v.p.Scope.MayChange(kind, at) {
			return forbidden("%s (scope %s) may not change %s %s there", v.p.Name, v.p.Scope, kind, name)
		}
	}
	return nil
}

// outside is the 403 for an object the principal may not see.
func (v *view) outside(kind budget.ObjectKind, name string) error {
	return forbidden("%s is scoped to %s: %s %s is outside it", v.p.Name, v.p.Scope, kind, name)
}

// seesAlert reports whether an alert's limit is one the principal sees.
func (v *view) seesAlert(a *budget.Alert) bool {
	return v.sees(budget.ObjectLimit, v.ownerPlaced(a.Level, a.Owner))
}
