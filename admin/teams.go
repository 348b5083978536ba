package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

// Teams and prices: the calls of `budget team set|ls|rm` and `budget
// price set|ls`.

// teamIn is the body of PUT /admin/v1/teams/{name}: the team as it is to
// be. No org (absent or null) takes it out of any.
type teamIn struct {
	Org *string `json:"org"`
}

func (h *Handler) listTeams(w http.ResponseWriter, r *http.Request, p *Principal) error {
	v, err := h.view(r.Context(), p)
	if err != nil {
		return err
	}
	ts, err := h.cfg.Tracker.Teams(r.Context())
	if err != nil {
		return err
	}
	out := []jsonview.Team{}
	for i := range ts {
		if v.sees(budget.ObjectTeam, v.teamPlaced(ts[i].Name)) {
			out = append(out, jsonview.TeamOf(&ts[i]))
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Teams []jsonview.Team `json:"teams"`
	}{out})
	return nil
}

// putTeam creates the team, or moves it to another org (or none), as
// `budget team set` does: 201 when created.
func (h *Handler) putTeam(w http.ResponseWriter, r *http.Request, p *Principal) error {
	var in teamIn
	if r.ContentLength != 0 {
		if err := decode(w, r, &in); err != nil {
			return err
		}
	}
	name := strings.TrimSpace(r.PathValue("name"))
	if err := budget.CheckLabel("team", name); err != nil {
		return err
	}
	org := ""
	if in.Org != nil {
		org = strings.TrimSpace(*in.Org)
	}
	if err := budget.CheckLabel("org", org); err != nil {
		return err
	}
	if org != "" && org == name {
		return budget.Invalid("org", org, "is the name of the team; a team and an org may not share a name")
	}
	v, err := h.view(r.Context(), p)
	if err != nil {
		return err
	}
	places := []budget.Placed{{Team: name, Org: org}}
	if _, ok := v.teams[name]; ok {
		places = append(places, v.teamPlaced(name))
	}
	if err := v.change(budget.ObjectTeam, name, places...); err != nil {
		return err
	}
	created, err := h.cfg.Tracker.SetTeam(r.Context(), name, org)
	if err != nil {
		return err
	}
	t := budget.Team{Name: name, Org: org, Keys: v.teams[name].Keys}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, jsonview.TeamOf(&t))
	return nil
}

// deleteTeam removes the team; one that still has limits is 409.
func (h *Handler) deleteTeam(w http.ResponseWriter, r *http.Request, p *Principal) error {
	name := strings.TrimSpace(r.PathValue("name"))
	v, err := h.view(r.Context(), p)
	if err != nil {
		return err
	}
	if _, ok := v.teams[name]; !ok {
		return notFound("no team is named %q", name)
	}
	if !v.sees(budget.ObjectTeam, v.teamPlaced(name)) {
		return v.outside(budget.ObjectTeam, name)
	}
	if err := v.change(budget.ObjectTeam, name, v.teamPlaced(name)); err != nil {
		return err
	}
	err = h.cfg.Tracker.DeleteTeam(r.Context(), name)
	if errors.Is(err, budget.ErrInvalid) { // it has limits
		return conflict("team", "%v", err)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// priceIn is the body of POST /admin/v1/prices: one entry of a price
// file. Prices are dollars per million tokens, as numbers or strings.
type priceIn struct {
	Provider   string       `json:"provider" required:"true"`
	Model      string       `json:"model" required:"true"`
	Tier       string       `json:"tier"`
	AboveInput int64        `json:"above_input"`
	From       string       `json:"from"` // RFC3339; default now
	Input      json.Number  `json:"input" required:"true"`
	Output     json.Number  `json:"output" required:"true"`
	CacheRead  *json.Number `json:"cache_read"`  // default: the input price
	CacheWrite *json.Number `json:"cache_write"` // default: the input price
	Reasoning  *json.Number `json:"reasoning"`   // default: the output price

	CacheWrite1h *json.Number `json:"cache_write_1h"` // default: the cache-write price
}

func (h *Handler) listPrices(w http.ResponseWriter, r *http.Request, _ *Principal) error {
	ps, err := h.cfg.Tracker.ListPrices(r.Context())
	if err != nil {
		return err
	}
	out := make([]jsonview.Price, len(ps))
	for i := range ps {
		out[i] = jsonview.PriceOf(&ps[i])
	}
	writeJSON(w, http.StatusOK, struct {
		Prices []jsonview.Price `json:"prices"`
	}{out})
	return nil
}

// setPrice adds or replaces one price version; only a global token may.
func (h *Handler) setPrice(w http.ResponseWriter, r *http.Request, p *Principal) error {
	if err := (&view{p: p}).change(budget.ObjectPrice, "prices", budget.Placed{}); err != nil {
		return err
	}
	var in priceIn
	if err := decode(w, r, &in); err != nil {
		return err
	}
	now := h.cfg.Now()
	s := budget.PriceSpec{Provider: in.Provider, Model: in.Model, Tier: in.Tier, AboveInput: in.AboveInput, From: now,
		Input: in.Input.String(), Output: in.Output.String(), CacheRead: numText(in.CacheRead),
		CacheWrite: numText(in.CacheWrite), Reason: numText(in.Reasoning),
		CacheWrite1h: numText(in.CacheWrite1h)}
	if strings.TrimSpace(in.From) != "" {
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(in.From))
		if err != nil {
			return budget.Invalid("from", in.From, "want an RFC3339 time such as 2026-03-02T09:00:00Z")
		}
		s.From = t
	}
	if _, err := s.Parse(now); err != nil {
		return err
	}
	ps, err := h.cfg.Tracker.SetPrices(r.Context(), s)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, jsonview.PriceOf(&ps[0]))
	return nil
}

func numText(n *json.Number) *string {
	if n == nil {
		return nil
	}
	s := n.String()
	return &s
}
