package jsonview

import (
	"encoding/json"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// AuditEntry is an audit entry as `budget audit ls --json` and
// GET /admin/v1/audit write it. at is RFC3339 with nanoseconds (entries of
// one second stay ordered by it); before and after are the object's JSON,
// null when it did not or no longer exists.
type AuditEntry struct {
	ID        string          `json:"id"`
	At        string          `json:"at"`
	Actor     string          `json:"actor"` // as the log shows it: NAME, admin, cli:USER, config FILE
	ActorKind string          `json:"actor_kind"`
	Action    string          `json:"action"`
	Object    string          `json:"object"` // key, limit, team, price, admin_token
	ObjectID  string          `json:"object_id"`
	Team      *string         `json:"team"`
	Org       *string         `json:"org"`
	WasTeam   *string         `json:"was_team"` // where a move took the object from; null when it did not move
	WasOrg    *string         `json:"was_org"`
	Before    json.RawMessage `json:"before"`
	After     json.RawMessage `json:"after"`
}

// AuditOf is e's JSON object.
func AuditOf(e *budget.AuditEntry) AuditEntry {
	null := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	raw := func(r json.RawMessage) json.RawMessage {
		if len(r) == 0 {
			return json.RawMessage("null")
		}
		return r
	}
	return AuditEntry{ID: e.ID, At: e.At.UTC().Format(time.RFC3339Nano), Actor: e.Actor.String(), ActorKind: string(e.Actor.Kind),
		Action: string(e.Action), Object: string(e.Object), ObjectID: e.ObjectID, Team: null(e.Team), Org: null(e.Org),
		WasTeam: null(e.WasTeam), WasOrg: null(e.WasOrg),
		Before: raw(e.Before), After: raw(e.After)}
}

// Audit is es as JSON objects (an empty list, never null).
func Audit(es []budget.AuditEntry) []AuditEntry {
	out := make([]AuditEntry, len(es))
	for i := range es {
		out[i] = AuditOf(&es[i])
	}
	return out
}
