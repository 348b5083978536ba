package budget

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The audit log: who changed what, and when.
//
// Every change to keys, limits, raises, teams, prices and admin tokens
// appends an AuditEntry in the change's own transaction, so a change and
// its entry land together or not at all. The actor comes from the change's
// context (WithActor), not from a field of each spec: every admin write
// already takes a context, the HTTP layer knows the actor once per request
// (from its token) and the CLI once per process, and a change made several
// calls deep (a config apply, a key placed in a team while it is created)
// carries it without every signature growing a parameter. A change whose
// context carries no actor is logged as ActorLibrary.
//
// An entry holds the object's JSON before and after the change, never a
// secret or a hash: gateway keys and admin tokens are logged by name and
// state only. Entries are never pruned (prune deletes usage, not this),
// and `config export` leaves them out: they are history, not configuration.

// ActorKind says what kind of caller made a change.
type ActorKind string

const (
	ActorToken   ActorKind = "token"   // an admin token, by its name
	ActorAdmin   ActorKind = "admin"   // the admin listener's global token (--admin-token-env)
	ActorCLI     ActorKind = "cli"     // the budget command, Name the OS user
	ActorConfig  ActorKind = "config"  // a config apply, Name the file
	ActorLibrary ActorKind = "library" // a program using the library that named no actor
)

// Actor is who made a change.
type Actor struct {
	Kind ActorKind
	Name string // the token's name, the OS user, the config file; "" for ActorAdmin
}

// String is the actor as the audit log shows it: the admin token's name,
// "admin", "cli:USER", "config FILE", or "library".
func (a Actor) String() string {
	switch a.Kind {
	case ActorToken:
		return a.Name
	case ActorAdmin:
		return "admin"
	case ActorCLI:
		return "cli:" + a.Name
	case ActorConfig:
		return "config " + a.Name
	}
	if a.Name != "" {
		return string(a.Kind) + ":" + a.Name
	}
	return string(ActorLibrary)
}

type actorKey struct{}

// WithActor returns ctx carrying a: every admin write made with it logs a
// as the one who made it.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom is the actor ctx carries, ActorLibrary when none.
func ActorFrom(ctx context.Context) Actor {
	if a, ok := ctx.Value(actorKey{}).(Actor); ok && a.Kind != "" {
		return a
	}
	return Actor{Kind: ActorLibrary}
}

// AuditAction is what a change did.
type AuditAction string

const (
	AuditCreate AuditAction = "create"
	AuditUpdate AuditAction = "update"
	AuditDelete AuditAction = "delete"
	AuditRevoke AuditAction = "revoke" // a gateway key or admin token
	AuditRotate AuditAction = "rotate" // a gateway key's new secret
	AuditRaise  AuditAction = "raise"  // a raise added to a limit
)

// ObjectKind is what kind of object a change is about.
type ObjectKind string

const (
	ObjectKey        ObjectKind = "key" // a key's gateway credential or placement
	ObjectLimit      ObjectKind = "limit"
	ObjectTeam       ObjectKind = "team"
	ObjectPrice      ObjectKind = "price"
	ObjectAdminToken ObjectKind = "admin_token"
)

// AuditEntry is one change as the audit log holds it.
type AuditEntry struct {
	ID     string // aud_...
	At     time.Time
	Actor  Actor
	Action AuditAction
	Object ObjectKind
	// ObjectID is the key's or team's name, the limit's id, the admin
	// token's name, or a price's provider/model/tier/above_input/from.
	ObjectID string
	// Team and Org place the object (see Placed): what a scoped admin
	// token may see of the log. Empty for prices, admin tokens, default
	// limits and keys in no team.
	Team, Org string
	// WasTeam and WasOrg are where the change moved the object from (a
	// key to another team, a team to another org), so the scope it left
	// sees the entry too; empty when it did not move.
	WasTeam, WasOrg string
	// Before and After are the object's JSON before and after the change:
	// nil when it did not exist (a create) or no longer does (a delete).
	// Never a secret or a hash.
	Before, After json.RawMessage
}

// Placed is where an entry's object sits.
func (e *AuditEntry) Placed() Placed { return Placed{Team: e.Team, Org: e.Org} }

// Moved reports whether the change moved the object, and from where.
func (e *AuditEntry) Moved() (Placed, bool) {
	was := Placed{Team: e.WasTeam, Org: e.WasOrg}
	return was, was != Placed{} && was != e.Placed()
}

// Change is an AuditEntry without who and when: what an apply or a dry
// run would do.
type Change = AuditEntry

// AuditFilter selects audit entries.
type AuditFilter struct {
	Since time.Time  // entries at or after it (zero: all)
	Scope AdminScope // only the entries this scope may see (zero: all)
	Limit int        // at most the newest Limit entries (0: all)
}

// AuditTx is the audit log inside a transaction. A change appends its
// entry in its own write transaction.
type AuditTx interface {
	// AppendAudit appends e (its ID and At set).
	AppendAudit(ctx context.Context, e AuditEntry) error
	// Audit lists the entries at or after since (zero: all), in the
	// order they were appended.
	Audit(ctx context.Context, since time.Time) ([]AuditEntry, error)
}

// NewAudit builds the entry of a change made with ctx at at: before and
// after are marshalled to JSON (nil stays nil). It is how the stores log
// the changes they make themselves (gateway keys, admin tokens).
func NewAudit(ctx context.Context, at time.Time, action AuditAction, object ObjectKind, id string, where Placed, before, after any) (AuditEntry, error) {
	e := AuditEntry{ID: NewID("aud_"), At: at.UTC(), Actor: ActorFrom(ctx), Action: action, Object: object, ObjectID: id,
		Team: where.Team, Org: where.Org}
	var err error
	if e.Before, err = auditJSON(before); err != nil {
		return e, err
	}
	e.After, err = auditJSON(after)
	return e, err
}

func auditJSON(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	if raw, ok := v.(json.RawMessage); ok {
		return raw, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if string(b) == "null" {
		return nil, nil
	}
	return b, nil
}

// PriceID is a price's object id in the audit log and a config diff.
func PriceID(p *Price) string {
	return strings.Join([]string{p.Provider, p.Model, cmpTier(p.Tier), fmt.Sprint(p.AboveInput), p.From.UTC().Format(time.RFC3339Nano)}, "/")
}

func cmpTier(t string) string {
	if t == "" {
		return "default"
	}
	return t
}

// Audit lists the audit entries f selects, in the order they were
// appended (oldest first).
func (t *Tracker) Audit(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	var out []AuditEntry
	err := t.store.View(ctx, func(tx Tx) error {
		a, err := auditTx(tx)
		if err != nil {
			return err
		}
		es, err := a.Audit(ctx, f.Since)
		if err != nil {
			return err
		}
		out = out[:0]
		for i := range es {
			if f.Scope.MaySeeEntry(&es[i]) {
				out = append(out, es[i])
			}
		}
		return nil
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[len(out)-f.Limit:]
	}
	return out, err
}
