package sqlrow

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

// Audit is an audit row.
type Audit struct {
	ID         string `db:"id"`
	At         int64  `db:"at"`
	ActorKind  string `db:"actor_kind"`
	ActorName  string `db:"actor_name"`
	Action     string `db:"action"`
	ObjectKind string `db:"object_kind"`
	ObjectID   string `db:"object_id"`
	Team       string `db:"team"`
	Org        string `db:"org"`
	WasTeam    string `db:"was_team"`
	WasOrg     string `db:"was_org"`
	Before     string `db:"before_json"`
	After      string `db:"after_json"`
}

// AuditCols are the columns of an Audit row, in order.
const AuditCols = `id, at, actor_kind, actor_name, action, object_kind, object_id, team, org, was_team, was_org, before_json, after_json`

// AuditInsert appends one entry (AuditArgs).
const AuditInsert = `INSERT INTO audit (` + AuditCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// AuditSince lists the entries at or after an instant, in the order they
// were appended.
const AuditSince = `SELECT ` + AuditCols + ` FROM audit WHERE at >= ? ORDER BY seq`

// AuditArgs are e's values in AuditCols order.
func AuditArgs(e *budget.AuditEntry) []any {
	return []any{e.ID, Ns(e.At), string(e.Actor.Kind), e.Actor.Name, string(e.Action), string(e.Object), e.ObjectID,
		e.Team, e.Org, e.WasTeam, e.WasOrg, string(e.Before), string(e.After)}
}

// Decode is the row as a budget.AuditEntry.
func (r *Audit) Decode() budget.AuditEntry {
	raw := func(s string) json.RawMessage {
		if s == "" {
			return nil
		}
		return json.RawMessage(s)
	}
	return budget.AuditEntry{ID: r.ID, At: FromNs(r.At), Actor: budget.Actor{Kind: budget.ActorKind(r.ActorKind), Name: r.ActorName},
		Action: budget.AuditAction(r.Action), Object: budget.ObjectKind(r.ObjectKind), ObjectID: r.ObjectID,
		Team: r.Team, Org: r.Org, WasTeam: r.WasTeam, WasOrg: r.WasOrg, Before: raw(r.Before), After: raw(r.After)}
}

// DecodeAudit decodes rows.
func DecodeAudit(rows []Audit) []budget.AuditEntry {
	out := make([]budget.AuditEntry, len(rows))
	for i := range rows {
		out[i] = rows[i].Decode()
	}
	return out
}

// AdminToken is an admin_tokens row.
type AdminToken struct {
	Name      string `db:"name"`
	Hash      string `db:"hash"`
	Team      string `db:"team"`
	Org       string `db:"org"`
	ReadOnly  int    `db:"read_only"`
	CreatedAt int64  `db:"created_at"`
	RevokedAt int64  `db:"revoked_at"`
}

// AdminCols are the columns of an AdminToken, in order.
const AdminCols = `name, hash, team, org, read_only, created_at, revoked_at`

// Token is the row as a gatekey.AdminToken.
func (r *AdminToken) Token() gatekey.AdminToken {
	return gatekey.AdminToken{Name: r.Name, Hash: r.Hash, Scope: budget.AdminScope{Team: r.Team, Org: r.Org, ReadOnly: r.ReadOnly != 0},
		CreatedAt: FromNs(r.CreatedAt), RevokedAt: FromNs(r.RevokedAt)}
}

// audit appends the entry of a change this transaction made with ctx.
func (x KeyTx) audit(ctx context.Context, at time.Time, action budget.AuditAction, object budget.ObjectKind, id string, where budget.Placed, before, after any) error {
	e, err := budget.NewAudit(ctx, at, action, object, id, where, before, after)
	if err != nil {
		return err
	}
	if _, err := x.ExecContext(ctx, x.Rebind(AuditInsert), AuditArgs(&e)...); err != nil {
		return fmt.Errorf("append audit entry: %w", err)
	}
	return nil
}

// InsertAdmin is gatekey.AdminStore.InsertAdminToken.
func (x KeyTx) InsertAdmin(ctx context.Context, t gatekey.AdminToken) error {
	ro := 0
	if t.Scope.ReadOnly {
		ro = 1
	}
	res, err := x.ExecContext(ctx, x.Rebind(`INSERT INTO admin_tokens (`+AdminCols+`) VALUES (?, ?, ?, ?, ?, ?, 0) ON CONFLICT DO NOTHING`),
		t.Name, t.Hash, t.Scope.Team, t.Scope.Org, ro, Ns(t.CreatedAt))
	if err != nil {
		return fmt.Errorf("insert admin token %s: %w", t.Name, err)
	}
	if c, err := res.RowsAffected(); err != nil || c == 0 {
		if err != nil {
			return fmt.Errorf("insert admin token %s: %w", t.Name, err)
		}
		return budget.Invalid("name", t.Name, "an admin token with this name exists")
	}
	t.RevokedAt = time.Time{}
	return x.audit(ctx, t.CreatedAt, budget.AuditCreate, budget.ObjectAdminToken, t.Name, budget.Placed{}, nil, t.Audited())
}

// AdminByHash is gatekey.AdminStore.AdminTokenByHash.
func (x KeyTx) AdminByHash(ctx context.Context, hash string) (gatekey.AdminToken, error) {
	var r AdminToken
	err := x.GetContext(ctx, &r, x.Rebind(`SELECT `+AdminCols+` FROM admin_tokens WHERE hash = ?`), hash)
	if errors.Is(err, sql.ErrNoRows) {
		return gatekey.AdminToken{}, fmt.Errorf("admin token: %w", budget.ErrNotFound)
	}
	if err != nil {
		return gatekey.AdminToken{}, fmt.Errorf("read admin token: %w", err)
	}
	return r.Token(), nil
}

// ListAdmin is gatekey.AdminStore.ListAdminTokens, sorted in Go as List.
func (x KeyTx) ListAdmin(ctx context.Context) ([]gatekey.AdminToken, error) {
	var rows []AdminToken
	if err := x.SelectContext(ctx, &rows, `SELECT `+AdminCols+` FROM admin_tokens`); err != nil {
		return nil, fmt.Errorf("read admin tokens: %w", err)
	}
	out := make([]gatekey.AdminToken, len(rows))
	for i := range rows {
		out[i] = rows[i].Token()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// RevokeAdmin is gatekey.AdminStore.RevokeAdminToken.
func (x KeyTx) RevokeAdmin(ctx context.Context, name string, at time.Time) (bool, error) {
	var r AdminToken
	err := x.GetContext(ctx, &r, x.Rebind(`SELECT `+AdminCols+` FROM admin_tokens WHERE name = ?`), name)
	if errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("admin token %q: %w", name, budget.ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("revoke admin token %s: %w", name, err)
	}
	if r.RevokedAt != 0 {
		return false, nil
	}
	res, err := x.ExecContext(ctx, x.Rebind(`UPDATE admin_tokens SET revoked_at = ? WHERE name = ? AND revoked_at = 0`), Ns(at), name)
	if err != nil {
		return false, fmt.Errorf("revoke admin token %s: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err // another transaction revoked it first
	}
	before := r.Token()
	after := before
	after.RevokedAt = at
	return true, x.audit(ctx, at, budget.AuditRevoke, budget.ObjectAdminToken, name, budget.Placed{}, before.Audited(), after.Audited())
}

// joinModels and splitModels store a key's model patterns one a line.
func joinModels(ms []string) string { return strings.Join(ms, "\n") }

func splitModels(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
