package jsonview

import (
	"encoding/json"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Audit is an audit log entry: `budget audit ls --json` and GET
// /admin/v1/audit list them as {"entries": [...]}, oldest first.
type Audit struct {
	ID       string  `json:"id"`
	At       string  `json:"at"`
	Actor    string  `json:"actor"` // "admin", a token's name, "cli:USER", "config FILE", "library"
	Action   string  `json:"action"`
	Object   string  `json:"object"` // key, limit, team, price or admin_token
	ObjectID string  `json:"object_id"`
	Team     *string `json:"team"` // where the object is placed; null: nowhere
	Org      *string `json:"org"`
	// Before and After are the object's JSON; null when it did not exist
	// before (a create) or does not after (a delete).
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
}

// AuditOf is e as an object.
func AuditOf(e *budget.AuditEntry) Audit {
	o := Audit{ID: e.ID, At: Time(e.At), Actor: e.Actor.String(), Action: string(e.Action), Object: string(e.Object),
		ObjectID: e.ObjectID, Before: e.Before, After: e.After}
	if e.Team != "" {
		o.Team = ptr(e.Team)
	}
	if e.Org != "" {
		o.Org = ptr(e.Org)
	}
	return o
}

// Audits is AuditOf of each of es.
func Audits(es []budget.AuditEntry) []Audit {
	out := make([]Audit, len(es))
	for i := range es {
		out[i] = AuditOf(&es[i])
	}
	return out
}
