package gatekey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Admin tokens: the credentials of the admin API, scoped (budget.AdminScope)
// and stored, like gateway keys, only as the SHA-256 of their secrets. They
// live beside the gateway keys in both stores; every change to one logs an
// audit entry in its own transaction (by the context's actor), naming the
// token, never its secret or hash.

// AdminPrefix starts every admin token secret, so one is told from a
// gateway key's (KeyPrefix in proxy) at a glance and by a scanner.
const AdminPrefix = "tba_"

// AdminToken is an admin token as stored.
type AdminToken struct {
	Name      string
	Hash      string // hex SHA-256 of the secret
	Scope     budget.AdminScope
	CreatedAt time.Time
	RevokedAt time.Time // zero while usable
}

// Audited is the token as the audit log shows it: never its hash.
func (t *AdminToken) Audited() any {
	type view struct {
		Name      string     `json:"name"`
		Team      string     `json:"team,omitempty"`
		Org       string     `json:"org,omitempty"`
		ReadOnly  bool       `json:"read_only"`
		CreatedAt time.Time  `json:"created_at"`
		RevokedAt *time.Time `json:"revoked_at"`
	}
	v := view{Name: t.Name, Team: t.Scope.Team, Org: t.Scope.Org, ReadOnly: t.Scope.ReadOnly, CreatedAt: t.CreatedAt.UTC()}
	if !t.RevokedAt.IsZero() {
		r := t.RevokedAt.UTC()
		v.RevokedAt = &r
	}
	return v
}

// AdminStore keeps admin tokens. Each method is one transaction, with the
// audit entry of the change it makes. Errors as Store's.
type AdminStore interface {
	// InsertAdminToken adds t (Name, Hash, Scope, CreatedAt). A name
	// taken, revoked or not, is budget.ErrInvalid ("name").
	InsertAdminToken(ctx context.Context, t AdminToken) error
	// AdminTokenByHash finds the token whose secret hashes to hash,
	// revoked or not. An unknown hash is budget.ErrNotFound.
	AdminTokenByHash(ctx context.Context, hash string) (AdminToken, error)
	// ListAdminTokens lists every token, revoked ones included, by name.
	ListAdminTokens(ctx context.Context) ([]AdminToken, error)
	// RevokeAdminToken revokes token name at at and reports whether this
	// call did (false: it was revoked already).
	RevokeAdminToken(ctx context.Context, name string, at time.Time) (bool, error)
}

// HashSecret is the hex SHA-256 of a secret: the only form of a gateway
// key's or admin token's secret that is stored.
func HashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// ValidAdminName checks an admin token's name: 1 to 64 of letters, digits,
// '.', '_' and '-' (the audit log shows it as the actor, so it cannot look
// like "admin", "cli:USER" or "config FILE").
func ValidAdminName(name string) error {
	if name == "" || len(name) > 64 {
		return budget.Invalid("name", name, "must be 1 to 64 characters")
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return budget.Invalid("name", name, "may hold only letters, digits, '.', '_' and '-'")
		}
	}
	switch strings.ToLower(name) {
	case string(budget.ActorAdmin), string(budget.ActorCLI), string(budget.ActorConfig), string(budget.ActorLibrary):
		return budget.Invalid("name", name, "is reserved for the audit log's other actors")
	}
	return nil
}

// AddAdminToken creates admin token name with scope and a new secret,
// stored only as its hash, and returns the secret: it cannot be read back.
// The scope's team or org is not checked here (the caller knows its
// Tracker): see budget.AdminScope.
func AddAdminToken(ctx context.Context, s AdminStore, name string, scope budget.AdminScope, at time.Time) (secret string, err error) {
	name = strings.TrimSpace(name)
	if err := ValidAdminName(name); err != nil {
		return "", err
	}
	if err := scope.Validate(); err != nil {
		return "", err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("admin token: new secret: %w", err)
	}
	secret = AdminPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	t := AdminToken{Name: name, Hash: HashSecret(secret), Scope: scope, CreatedAt: at.UTC()}
	if err := s.InsertAdminToken(ctx, t); err != nil {
		return "", err
	}
	return secret, nil
}

// ErrUnknownAdminToken is LookupAdminToken's answer for a secret that opens
// no token: unknown, revoked, or absent. The admin API answers 401.
var ErrUnknownAdminToken = errors.New("unknown or revoked admin token")

// LookupAdminToken finds the live admin token whose secret is secret: its
// name (the audit log's actor) and scope. ErrUnknownAdminToken for none;
// any other error when the store cannot tell.
func LookupAdminToken(ctx context.Context, s AdminStore, secret string) (AdminToken, error) {
	if !strings.HasPrefix(secret, AdminPrefix) {
		return AdminToken{}, ErrUnknownAdminToken
	}
	t, err := s.AdminTokenByHash(ctx, HashSecret(secret))
	switch {
	case errors.Is(err, budget.ErrNotFound):
		return AdminToken{}, ErrUnknownAdminToken
	case err != nil:
		return AdminToken{}, err
	case !t.RevokedAt.IsZero():
		return AdminToken{}, ErrUnknownAdminToken
	}
	return t, nil
}

// Actor is the audit log's actor for changes made with t.
func (t *AdminToken) Actor() budget.Actor { return budget.Actor{Kind: budget.ActorToken, Name: t.Name} }
