package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

// Limits and raises: the calls of `budget limit set|ls|rm|raise`.

// limitIn is the body of POST /admin/v1/limits: `budget limit set`'s
// flags. Amounts ("limit", "by") are a JSON number in the limit object's
// unit (micro-dollars for usd), or a string as the CLI reads it (dollars
// for usd, "2.50").
type limitIn struct {
	ID        string          `json:"id"`
	Key       string          `json:"key"`
	Team      string          `json:"team"`
	Org       string          `json:"org"`
	Default   bool            `json:"default"`
	Scope     string          `json:"scope"`
	Value     string          `json:"value"`
	Metric    string          `json:"metric"`
	Limit     json.RawMessage `json:"limit" types:"integer,string"`
	Window    string          `json:"window"`
	ResetTime *string         `json:"reset_time"`
	Timezone  *string         `json:"timezone"`
	Enabled   *bool           `json:"enabled"`
	Alerts    *[]int          `json:"alerts"`
}

// limitPatch is the body of PATCH /admin/v1/limits/{id}: only the fields
// given change; the owner does not. A new limit keeps the window's counters.
type limitPatch struct {
	Scope     *string         `json:"scope"`
	Value     *string         `json:"value"`
	Metric    *string         `json:"metric"`
	Limit     json.RawMessage `json:"limit" types:"integer,string"`
	Window    *string         `json:"window"`
	ResetTime *string         `json:"reset_time"`
	Timezone  *string         `json:"timezone"`
	Enabled   *bool           `json:"enabled"`
	Alerts    *[]int          `json:"alerts"`
}

// raiseIn is the body of POST /admin/v1/limits/{id}/raises.
type raiseIn struct {
	By    json.RawMessage `json:"by" types:"integer,string" required:"true"`
	Until *string         `json:"until"` // RFC3339; null or absent: for good
}

// amount reads an amount of a limit of metric (see limitIn).
func amount(field string, metric budget.Metric, raw json.RawMessage) (int64, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return budget.ParseAmount(field, metric, s)
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, budget.Invalid(field, string(raw), "want a whole number in the limit's unit, or a string (dollars for a usd limit)")
	}
	return n, nil
}

// specPlaced is where the limit a spec names sits.
func (v *view) specPlaced(s *budget.LimitSpec) budget.Placed {
	switch {
	case s.Key != "":
		return v.keyPlaced(strings.TrimSpace(s.Key))
	case s.Team != "":
		return v.teamPlaced(strings.TrimSpace(s.Team))
	case s.Org != "":
		return budget.Placed{Org: strings.TrimSpace(s.Org)}
	}
	return budget.Placed{}
}

func (h *Handler) listLimits(w http.ResponseWriter, r *http.Request, p *Principal) error {
	q := r.URL.Query()
	key, team, org := strings.TrimSpace(q.Get("key")), strings.TrimSpace(q.Get("team")), strings.TrimSpace(q.Get("org"))
	v, err := h.view(r.Context(), p)
	if err != nil {
		return err
	}
	switch {
	case key != "" && !v.sees(budget.ObjectKey, v.keyPlaced(key)):
		return v.outside(budget.ObjectKey, key)
	case team != "" && !v.sees(budget.ObjectTeam, v.teamPlaced(team)):
		return v.outside(budget.ObjectTeam, team)
	case org != "" && !v.sees(budget.ObjectLimit, budget.Placed{Org: org}):
		return v.outside("org", org)
	}
	ls, err := h.cfg.Tracker.Limits(r.Context(), key)
	if err != nil {
		return err
	}
	ls = slices.DeleteFunc(ls, func(l budget.Limit) bool {
		return !v.sees(budget.ObjectLimit, v.limitPlaced(&l)) || team != "" && l.Team != team || org != "" && l.Org != org
	})
	writeJSON(w, http.StatusOK, struct {
		Limits []jsonview.Limit `json:"limits"`
	}{jsonview.Limits(ls, h.cfg.Now())})
	return nil
}

// limit finds the limit id in scope: 404 when none has it, 403 when it is
// another scope's.
func (h *Handler) limit(ctx context.Context, v *view, id string) (budget.Limit, error) {
	ls, err := h.cfg.Tracker.Limits(ctx, "")
	if err != nil {
		return budget.Limit{}, err
	}
	i := slices.IndexFunc(ls, func(l budget.Limit) bool { return l.ID == id })
	switch {
	case i < 0:
		return budget.Limit{}, notFound("no limit has id %q", id)
	case !v.sees(budget.ObjectLimit, v.limitPlaced(&ls[i])):
		return budget.Limit{}, v.outside(budget.ObjectLimit, id)
	}
	return ls[i], nil
}

// changeableLimit is the limit the request's path names, which p may
// change.
func (h *Handler) changeableLimit(r *http.Request, p *Principal) (budget.Limit, error) {
	v, err := h.view(r.Context(), p)
	if err != nil {
		return budget.Limit{}, err
	}
	l, err := h.limit(r.Context(), v, r.PathValue("id"))
	if err != nil {
		return l, err
	}
	return l, v.change(budget.ObjectLimit, l.ID, v.limitPlaced(&l))
}

func (h *Handler) getLimit(w http.ResponseWriter, r *http.Request, p *Principal) error {
	v, err := h.view(r.Context(), p)
	if err != nil {
		return err
	}
	l, err := h.limit(r.Context(), v, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, jsonview.LimitOf(&l, h.cfg.Now()))
	return nil
}

// setLimit creates a limit, or updates the one with the same owner,
// scope, value, metric and window, as `budget limit set` does: 201 when
// it created one, 200 when it updated one.
func (h *Handler) setLimit(w http.ResponseWriter, r *http.Request, p *Principal) error {
	var in limitIn
	if err := decode(w, r, &in); err != nil {
		return err
	}
	spec := budget.LimitSpec{ID: in.ID, Key: in.Key, Team: in.Team, Org: in.Org, Default: in.Default, Scope: in.Scope,
		ScopeValue: in.Value, Metric: in.Metric, Window: in.Window, ResetTime: in.ResetTime, Timezone: in.Timezone,
		Enabled: in.Enabled, Alerts: in.Alerts}
	if spec.Scope == "" {
		spec.Scope = string(budget.ScopeGlobal)
	}
	if in.Limit != nil {
		max, err := amount("limit", budget.Metric(cmp.Or(strings.TrimSpace(in.Metric), string(budget.MetricTokens))), in.Limit)
		if err != nil {
			return err
		}
		spec.Max = &max
	}
	if err := spec.Validate(); err != nil {
		return err
	}
	v, err := h.view(r.Context(), p)
	if err != nil {
		return err
	}
	if err := v.change(budget.ObjectLimit, "of "+ownerText(&spec), v.specPlaced(&spec)); err != nil {
		return err
	}
	l, created, err := h.cfg.Tracker.SetLimit(r.Context(), spec)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, jsonview.LimitOf(&l, h.cfg.Now()))
	return nil
}

// patchLimit changes only the fields given of the limit id, as `budget
// limit set --id ID` does: its identity fills what was not given.
func (h *Handler) patchLimit(w http.ResponseWriter, r *http.Request, p *Principal) error {
	var in limitPatch
	if err := decode(w, r, &in); err != nil {
		return err
	}
	cur, err := h.changeableLimit(r, p)
	if err != nil {
		return err
	}
	spec := budget.LimitSpec{ID: cur.ID, Key: cur.Key, Team: cur.Team, Org: cur.Org, Default: cur.IsDefault(),
		Scope: string(cur.Scope), ScopeValue: cur.ScopeValue, Metric: string(cur.Metric), Window: cur.Window.String(),
		ResetTime: in.ResetTime, Timezone: in.Timezone, Enabled: in.Enabled, Alerts: in.Alerts, MustExist: true}
	if cur.Window.Kind == budget.NoWindow {
		spec.Window = ""
	}
	// The identity may be given (a client sending the whole object back),
	// but not changed: a limit of another scope, metric or window is
	// another limit, with counters of its own.
	for _, f := range []struct {
		name string
		v    *string
		cur  string
	}{{"scope", in.Scope, spec.Scope}, {"value", in.Value, spec.ScopeValue}, {"metric", in.Metric, spec.Metric}, {"window", in.Window, spec.Window}} {
		if f.v != nil && strings.TrimSpace(*f.v) != f.cur {
			return budget.Invalid(f.name, *f.v, "is part of the limit's identity and cannot change (it is "+strconv.Quote(f.cur)+"): create a new limit and delete this one")
		}
	}
	if in.Limit != nil {
		max, err := amount("limit", budget.Metric(strings.TrimSpace(spec.Metric)), in.Limit)
		if err != nil {
			return err
		}
		spec.Max = &max
	}
	if err := spec.Validate(); err != nil {
		return err
	}
	l, _, err := h.cfg.Tracker.SetLimit(r.Context(), spec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, jsonview.LimitOf(&l, h.cfg.Now()))
	return nil
}

func (h *Handler) deleteLimit(w http.ResponseWriter, r *http.Request, p *Principal) error {
	l, err := h.changeableLimit(r, p)
	if err != nil {
		return err
	}
	if err := h.cfg.Tracker.DeleteLimit(r.Context(), l.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// raiseLimit adds to the limit id for a while or for good, as `budget
// limit raise` does, and answers the limit as it stands.
func (h *Handler) raiseLimit(w http.ResponseWriter, r *http.Request, p *Principal) error {
	var in raiseIn
	if err := decode(w, r, &in); err != nil {
		return err
	}
	if in.By == nil {
		return invalid("by", "by is required")
	}
	now := h.cfg.Now()
	var until time.Time
	if in.Until != nil {
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(*in.Until))
		if err != nil {
			return budget.Invalid("until", *in.Until, "want an RFC3339 time such as 2026-03-02T09:00:00Z")
		}
		if !t.After(now) {
			return budget.Invalid("until", *in.Until, "must be in the future")
		}
		until = t
	}
	cur, err := h.changeableLimit(r, p)
	if err != nil {
		return err
	}
	by, err := amount("by", cur.Metric, in.By)
	if err != nil {
		return err
	}
	if by <= 0 || by > budget.MaxTokens {
		return budget.Invalid("by", string(in.By), "want an amount greater than 0 and at most 2^53-1 in the limit's unit")
	}
	l, _, err := h.cfg.Tracker.RaiseLimit(r.Context(), cur.ID, by, until)
	if errors.Is(err, budget.ErrNotFound) {
		return notFound("no limit has id %q", cur.ID)
	}
	if err != nil {
		return err
	}
	// As it stands once raised: the raise is recorded at the tracker's
	// instant, after now.
	writeJSON(w, http.StatusCreated, jsonview.LimitOf(&l, h.cfg.Now()))
	return nil
}

// ownerText names a spec's owner for messages: "key K", "team T", ...
func ownerText(s *budget.LimitSpec) string {
	switch {
	case s.Key != "":
		return "key " + s.Key
	case s.Team != "":
		return "team " + s.Team
	case s.Org != "":
		return "org " + s.Org
	}
	return "the defaults"
}
