package jsonview

import (
	"time"

	"github.com/tokenbudget/tokenbudget/gatekey"
)

// Key is a gateway key as `budget key ls --json` lists it (and the admin
// API answers it): never its secret or hash.
type Key struct {
	Name          string   `json:"name"`
	Team          *string  `json:"team"` // null: in no team
	CreatedAt     string   `json:"created_at"`
	Revoked       bool     `json:"revoked"`
	State         string   `json:"state"` // active, rotating, expired or revoked
	RevokedAt     *string  `json:"revoked_at"`
	RotatingUntil *string  `json:"rotating_until"`
	LastUsedAt    *string  `json:"last_used_at"`
	ExpiresAt     *string  `json:"expires_at"`
	Models        []string `json:"models"` // the patterns it may ask for; [] for any
}

// KeyOf is k at now, placed in team ("" for none).
func KeyOf(k *gatekey.Key, team string, now time.Time) Key {
	state, until := KeyState(k, now)
	o := Key{Name: k.Name, CreatedAt: Time(k.CreatedAt), Revoked: !k.RevokedAt.IsZero(), State: state,
		RevokedAt: TimeOrNull(k.RevokedAt), RotatingUntil: TimeOrNull(until), LastUsedAt: TimeOrNull(k.LastUsedAt),
		ExpiresAt: TimeOrNull(k.ExpiresAt), Models: append([]string{}, k.Models...)}
	if team != "" {
		o.Team = &team
	}
	return o
}

// KeyState is a key's state at now and, while rotating, until when its
// previous secret works.
func KeyState(k *gatekey.Key, now time.Time) (string, time.Time) {
	switch {
	case !k.RevokedAt.IsZero():
		return "revoked", time.Time{}
	case k.Expired(now):
		return "expired", time.Time{}
	case k.PrevHash != "" && now.Before(k.PrevUntil):
		return "rotating", k.PrevUntil
	}
	return "active", time.Time{}
}

// AdminToken is an admin token as `budget admin token ls --json` lists
// it: never its secret or hash.
type AdminToken struct {
	Name      string  `json:"name"`
	Team      *string `json:"team"`
	Org       *string `json:"org"`
	ReadOnly  bool    `json:"read_only"`
	CreatedAt string  `json:"created_at"`
	RevokedAt *string `json:"revoked_at"`
}

// AdminTokenOf is t's JSON object.
func AdminTokenOf(t *gatekey.AdminToken) AdminToken {
	null := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	return AdminToken{Name: t.Name, Team: null(t.Scope.Team), Org: null(t.Scope.Org), ReadOnly: t.Scope.ReadOnly,
		CreatedAt: Time(t.CreatedAt), RevokedAt: TimeOrNull(t.RevokedAt)}
}
