package budget

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Definitions are how a database is configured, apart from its history
// and gateway keys: limits (with their raises and, for once windows, their
// anchors), prices, and teams with their organisations and keys. Exported
// from one database and loaded into another (`budget config export` and
// `config import`), with the history imported after, they reproduce every
// counter.
type Definitions struct {
	Limits []Limit
	Prices []Price
	Teams  []Team
}

// Definitions reads every definition in one snapshot, limits in listing
// order, prices by provider, model and start, teams by name.
func (t *Tracker) Definitions(ctx context.Context) (Definitions, error) {
	var d Definitions
	err := t.store.View(ctx, func(tx Tx) error {
		var err error
		if d.Limits, err = tx.Limits(ctx, ""); err != nil {
			return err
		}
		if d.Prices, err = tx.Prices(ctx); err != nil {
			return err
		}
		d.Teams, err = tx.Teams(ctx)
		return err
	})
	sortLimits(d.Limits)
	slices.SortFunc(d.Prices, func(a, b Price) int {
		if c := slices.Compare([]string{a.Provider, a.Model}, []string{b.Provider, b.Model}); c != 0 {
			return c
		}
		return a.From.Compare(b.From)
	})
	return d, err
}

// validate checks d as LoadDefinitions and ApplyDefinitions need it and
// returns its limits validated (raises kept, no subject).
func (d *Definitions) validate() ([]Limit, error) {
	ls := make([]Limit, len(d.Limits))
	for i, l := range d.Limits {
		v, err := l.Validate()
		if err != nil {
			return nil, fmt.Errorf("limit %d (%s): %w", i+1, l.ID, err)
		}
		if v.ID == "" {
			return nil, invalid("id", "", fmt.Sprintf("limit %d has no id", i+1))
		}
		v.Raises = l.Raises
		v.Subject = ""
		ls[i] = v
	}
	for i, p := range d.Prices {
		if err := checkNames("provider", p.Provider, "model", p.Model); err != nil {
			return nil, fmt.Errorf("price %d: %w", i+1, err)
		}
		if p.Provider == "" || p.Model == "" {
			return nil, invalid("price", p.Provider+"/"+p.Model, fmt.Sprintf("price %d needs a provider and a model", i+1))
		}
		for _, v := range []int64{p.Input, p.Output, p.CacheRead, p.CacheWrite, p.Reasoning, p.CacheWrite1h} {
			if v < 0 {
				return nil, invalid("price", v, fmt.Sprintf("price %d: amounts must not be negative", i+1))
			}
		}
		if err := CheckInstant("from", p.From); err != nil {
			return nil, fmt.Errorf("price %d: %w", i+1, err)
		}
	}
	teamNames := make(map[string]bool, len(d.Teams))
	for _, tm := range d.Teams {
		if err := checkTeamName("team", tm.Name); err != nil {
			return nil, err
		}
		if err := CheckLabel("org", tm.Org); err != nil {
			return nil, err
		}
		for _, k := range tm.Keys {
			if err := CheckLabel("key", k); err != nil {
				return nil, err
			}
		}
		teamNames[tm.Name] = true
	}
	for _, tm := range d.Teams {
		if teamNames[tm.Org] {
			return nil, invalid("org", tm.Org, "is the name of a team; a team and an org may not share a name")
		}
	}
	return ls, nil
}

// LoadDefinitions writes d in one transaction: teams (creating their
// organisations) and their keys' placements, limits by id (created, or
// their limit, state, reset time and zone updated), raises by id (those
// not there yet), and prices. Each limit is validated; a limit whose
// identity another limit of the database already has under another id is
// invalid input. Nothing is written unless everything is.
func (t *Tracker) LoadDefinitions(ctx context.Context, d Definitions) error {
	_, err := t.define(ctx, d, ApplyOptions{}, func(ctx context.Context, tx Tx, _ *Definitions, ls []Limit, now time.Time) error {
		return loadDefinitions(ctx, tx, &d, ls, now)
	})
	return err
}

// loadDefinitions is LoadDefinitions' writes in tx.
func loadDefinitions(ctx context.Context, tx Tx, d *Definitions, ls []Limit, now time.Time) error {
	for _, tm := range d.Teams {
		if err := tx.PutTeam(ctx, Team{Name: tm.Name, Org: tm.Org}); err != nil {
			return err
		}
		for _, k := range tm.Keys {
			if err := tx.SetKeyTeam(ctx, k, tm.Name); err != nil {
				return err
			}
		}
	}
	for i := range ls {
		l := &ls[i]
		cur, err := tx.Limit(ctx, l.ID)
		switch {
		case errors.Is(err, ErrNotFound):
			created := now
			if l.Window.Kind == Once && !l.Window.Anchor.IsZero() {
				created = l.Window.Anchor // the balance counts from where it did
			}
			if err := tx.InsertLimit(ctx, *l, created); err != nil {
				return err
			}
			cur = *l
			cur.Raises = nil
		case err != nil:
			return err
		case !cur.SameIdentity(l):
			return invalid("id", l.ID, "names a limit of another owner, scope, value, metric or window in this database")
		default:
			if err := tx.UpdateLimit(ctx, *l, now); err != nil {
				return err
			}
		}
		if err := addRaises(ctx, tx, &cur, l.Raises, now); err != nil {
			return err
		}
	}
	if len(d.Prices) > 0 {
		return tx.PutPrices(ctx, d.Prices)
	}
	return nil
}
