package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
	"github.com/tokenbudget/tokenbudget/jsonview"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// Gateway keys: the calls of `budget key add|ls|rotate|revoke|set-team`.

// keyIn is the body of POST /admin/v1/keys.
type keyIn struct {
	Name      string   `json:"name" required:"true"`
	Team      string   `json:"team"`       // "": none (a team's token: its team)
	Reuse     bool     `json:"reuse"`      // take the name of a revoked key again
	ExpiresAt *string  `json:"expires_at"` // RFC3339, in the future; null: never
	Models    []string `json:"models"`     // the model patterns it may ask for; none: any
}

// keyPatch is the body of PATCH /admin/v1/keys/{name}: only the fields
// given change.
type keyPatch struct {
	// Team moves the key: a team's name, or null for none.
	Team json.RawMessage `json:"team" types:"string,null"`
	// ExpiresAt is when it stops working (RFC3339, in the future), or
	// null for never.
	ExpiresAt json.RawMessage `json:"expires_at" types:"string,null"`
	// Models are the model patterns it may ask for; [] or null: any.
	Models json.RawMessage `json:"models" types:"array,null"`
}

// keyChange reads the rules a create or a patch gives: expires (a
// string, or JSON null for never) and models.
func (h *Handler) keyChange(expires *string, clearExpiry bool, models *[]string) (gatekey.KeyChange, error) {
	var c gatekey.KeyChange
	if expires != nil || clearExpiry {
		var t time.Time
		if expires != nil {
			var err error
			if t, err = time.Parse(time.RFC3339, strings.TrimSpace(*expires)); err != nil {
				return c, budget.Invalid("expires_at", *expires, "want an RFC3339 time such as 2026-03-02T09:00:00Z, or null for never")
			}
			if err := gatekey.CheckExpiry(t, h.cfg.Now()); err != nil {
				return c, budget.Invalid("expires_at", *expires, "must be in the future")
			}
		}
		c.ExpiresAt = &t
	}
	if models != nil {
		ps, err := gatekey.ModelPatterns(*models)
		if err != nil {
			return c, err
		}
		if ps == nil {
			ps = []string{}
		}
		c.Models = &ps
	}
	return c, nil
}

// changes reports whether c changes anything.
func changes(c gatekey.KeyChange) bool { return c.ExpiresAt != nil || c.Models != nil }

// rotateIn is the optional body of POST /admin/v1/keys/{name}/rotate.
type rotateIn struct {
	Grace *string `json:"grace"` // how long the old secret works: "1h", "0s" (default 1h)
}

func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request, p *Principal) error {
	v, err := h.view(r.Context(), p)
	if err != nil {
		return err
	}
	keys, err := h.cfg.Keys.ListKeys(r.Context())
	if err != nil {
		return err
	}
	now := h.cfg.Now()
	out := []jsonview.Key{}
	for i := range keys {
		if v.sees(budget.ObjectKey, v.keyPlaced(keys[i].Name)) {
			out = append(out, jsonview.KeyOf(&keys[i], v.keyTeam[keys[i].Name], now))
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Keys []jsonview.Key `json:"keys"`
	}{out})
	return nil
}

// key finds the key name in scope: 404 when no key has it, 403 when it is
// another scope's.
func (h *Handler) key(ctx context.Context, v *view, name string) (gatekey.Key, error) {
	keys, err := h.cfg.Keys.ListKeys(ctx)
	if err != nil {
		return gatekey.Key{}, err
	}
	i := slices.IndexFunc(keys, func(k gatekey.Key) bool { return k.Name == name })
	switch {
	case i < 0:
		return gatekey.Key{}, notFound("no gateway key is named %q", name)
	case !v.sees(budget.ObjectKey, v.keyPlaced(name)):
		return gatekey.Key{}, v.outside(budget.ObjectKey, name)
	}
	return keys[i], nil
}

// namedKey is the key the request's path names, which p may see, and the
// view it was judged in.
func (h *Handler) namedKey(r *http.Request, p *Principal) (*view, gatekey.Key, error) {
	v, err := h.view(r.Context(), p)
	if err != nil {
		return nil, gatekey.Key{}, err
	}
	k, err := h.key(r.Context(), v, r.PathValue("name"))
	return v, k, err
}

// changeableKey is namedKey's key, which p may also change.
func (h *Handler) changeableKey(r *http.Request, p *Principal) (*view, gatekey.Key, error) {
	v, k, err := h.namedKey(r, p)
	if err != nil {
		return v, k, err
	}
	return v, k, v.change(budget.ObjectKey, k.Name, v.keyPlaced(k.Name))
}

func (h *Handler) getKey(w http.ResponseWriter, r *http.Request, p *Principal) error {
	v, k, err := h.namedKey(r, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, jsonview.KeyOf(&k, v.keyTeam[k.Name], h.cfg.Now()))
	return nil
}

// destination is where a key placed in team ("": none) will sit: the
// team must exist.
func (v *view) destination(team string) (budget.Placed, error) {
	if team == "" {
		return budget.Placed{}, nil
	}
	if err := budget.CheckLabel("team", team); err != nil {
		return budget.Placed{}, err
	}
	if _, ok := v.teams[team]; !ok {
		return budget.Placed{}, budget.Invalid("team", team, "unknown team (create it with PUT /admin/v1/teams/"+team+")")
	}
	return v.teamPlaced(team), nil
}

func (h *Handler) createKey(w http.ResponseWriter, r *http.Request, p *Principal) error {
	var in keyIn
	if err := decode(w, r, &in); err != nil {
		return err
	}
	name, team := strings.TrimSpace(in.Name), strings.TrimSpace(in.Team)
	if err := proxy.ValidKeyName(name); err != nil {
		return err
	}
	var models *[]string
	if in.Models != nil {
		models = &in.Models
	}
	rules, err := h.keyChange(in.ExpiresAt, false, models)
	if err != nil {
		return err
	}
	v, err := h.view(r.Context(), p)
	if err != nil {
		return err
	}
	if team == "" {
		team = p.Scope.Team // a team's token makes keys in its team
	}
	to, err := v.destination(team)
	if err != nil {
		return err
	}
	if err := v.change(budget.ObjectKey, name, to); err != nil {
		return err
	}
	// A name that is already a key somewhere (placed in a team, or with
	// limits of its own, though no gateway key is issued for it) is taken
	// where it sits: a scoped token must not pull another scope's key, or
	// a key only global admins manage, into its own and get its secret.
	if held, err := h.keyHeld(r.Context(), v, name); err != nil {
		return err
	} else if held {
		if err := v.change(budget.ObjectKey, name, v.keyPlaced(name)); err != nil {
			return err
		}
	}
	keys, err := h.cfg.Keys.ListKeys(r.Context())
	if err != nil {
		return err
	}
	if i := slices.IndexFunc(keys, func(k gatekey.Key) bool { return k.Name == name }); i >= 0 {
		switch {
		case !v.sees(budget.ObjectKey, v.keyPlaced(name)):
			return v.outside(budget.ObjectKey, name)
		case keys[i].RevokedAt.IsZero():
			return conflict("name", "gateway key %q exists: rotate it (POST /admin/v1/keys/%s/rotate) for a new secret", name, name)
		case !in.Reuse:
			return conflict("name", "a revoked key is named %q: give \"reuse\": true to take the name again (its limits and their windows stay)", name)
		}
	}
	secret, err := proxy.NewKeySecret()
	if err != nil {
		return err
	}
	k := gatekey.Key{Name: name, Hash: proxy.HashKey(secret), CreatedAt: h.cfg.Now().UTC()}
	if rules.ExpiresAt != nil {
		k.ExpiresAt = *rules.ExpiresAt
	}
	if rules.Models != nil {
		k.Models = *rules.Models
	}
	// A key for a team is created and placed in one transaction, so its
	// creation is logged where the team sees it.
	if team != "" {
		err = h.cfg.Tracker.PlaceNewKey(r.Context(), name, team, gatekey.CreateIn(k, in.Reuse))
	} else {
		err = gatekey.Create(r.Context(), h.cfg.Keys, k, in.Reuse)
	}
	if err != nil {
		if errors.Is(err, budget.ErrInvalid) && invalidField(err) == "name" { // taken since it was looked up
			return conflict("name", "%v", err)
		}
		return err
	}
	writeJSON(w, http.StatusCreated, jsonview.Secret{Name: name, Secret: secret})
	return nil
}

func (h *Handler) patchKey(w http.ResponseWriter, r *http.Request, p *Principal) error {
	var in keyPatch
	if err := decode(w, r, &in); err != nil {
		return err
	}
	v, k, err := h.namedKey(r, p)
	if err != nil {
		return err
	}
	var expires *string
	var models *[]string
	clear := string(in.ExpiresAt) == "null"
	if in.ExpiresAt != nil && !clear {
		if err := json.Unmarshal(in.ExpiresAt, &expires); err != nil {
			return invalid("expires_at", "expires_at: want an RFC3339 time or null")
		}
	}
	if in.Models != nil {
		if err := json.Unmarshal(in.Models, &models); err != nil {
			return invalid("models", "models: want a list of model patterns, or null")
		}
		if models == nil {
			models = &[]string{}
		}
	}
	rules, err := h.keyChange(expires, clear, models)
	if err != nil {
		return err
	}
	team := v.keyTeam[k.Name]
	if in.Team != nil {
		var t *string
		if err := json.Unmarshal(in.Team, &t); err != nil {
			return invalid("team", "team: want a team's name or null")
		}
		team = ""
		if t != nil {
			team = strings.TrimSpace(*t)
		}
		to, err := v.destination(team)
		if err != nil {
			return err
		}
		if err := v.change(budget.ObjectKey, k.Name, v.keyPlaced(k.Name), to); err != nil {
			return err
		}
	}
	if changes(rules) {
		if err := v.change(budget.ObjectKey, k.Name, v.keyPlaced(k.Name)); err != nil {
			return err
		}
	}
	// Every check is made before the first write.
	if in.Team != nil {
		if err := h.cfg.Tracker.SetKeyTeam(r.Context(), k.Name, team); err != nil {
			return err
		}
	}
	if changes(rules) {
		if k, err = h.cfg.Keys.UpdateKey(r.Context(), k.Name, rules, h.cfg.Now()); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, jsonview.KeyOf(&k, team, h.cfg.Now()))
	return nil
}

func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request, p *Principal) error {
	v, k, err := h.changeableKey(r, p)
	if err != nil {
		return err
	}
	now := h.cfg.Now()
	if _, err := h.cfg.Keys.RevokeKey(r.Context(), k.Name, now); err != nil {
		return err
	}
	if k.RevokedAt.IsZero() {
		k.RevokedAt = now
	}
	writeJSON(w, http.StatusOK, jsonview.KeyOf(&k, v.keyTeam[k.Name], now))
	return nil
}

func (h *Handler) rotateKey(w http.ResponseWriter, r *http.Request, p *Principal) error {
	var in rotateIn
	if r.ContentLength != 0 {
		if err := decode(w, r, &in); err != nil {
			return err
		}
	}
	grace := proxy.DefaultRotateGrace
	if in.Grace != nil {
		d, err := time.ParseDuration(strings.TrimSpace(*in.Grace))
		if err != nil || d < 0 {
			return invalid("grace", "grace %q: want a duration of 0s or more, such as 1h", *in.Grace)
		}
		grace = d
	}
	_, k, err := h.changeableKey(r, p)
	if err != nil {
		return err
	}
	if !k.RevokedAt.IsZero() {
		return conflict("name", "gateway key %q is revoked: create it again with \"reuse\": true", k.Name)
	}
	secret, err := proxy.RotateKey(r.Context(), h.cfg.Keys, k.Name, grace, h.cfg.Now())
	if errors.Is(err, budget.ErrInvalid) { // revoked since it was read
		return conflict("name", "%v", err)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, jsonview.Secret{Name: k.Name, Secret: secret})
	return nil
}

// keyHeld reports whether name is a key before any gateway key is issued
// for it: placed in a team, or the owner of limits.
func (h *Handler) keyHeld(ctx context.Context, v *view, name string) (bool, error) {
	if _, ok := v.keyTeam[name]; ok {
		return true, nil
	}
	ls, err := h.cfg.Tracker.Limits(ctx, name)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(ls, func(l budget.Limit) bool { return l.Key == name }), nil
}
