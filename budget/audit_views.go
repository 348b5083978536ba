package budget

import (
	"bytes"
	"context"
	"encoding/json"
	"time"
)

// The objects as the audit log and a config diff show them: each a small
// JSON view, compared as JSON to tell whether a change changed anything.

type limitView struct {
	ID         string      `json:"id"`
	Level      Level       `json:"level"`
	Owner      *string     `json:"owner"`
	Scope      Scope       `json:"scope"`
	ScopeValue string      `json:"scope_value"`
	Metric     Metric      `json:"metric"`
	Limit      int64       `json:"limit"`
	Window     string      `json:"window,omitempty"`
	ResetTime  string      `json:"reset_time,omitempty"`
	Timezone   string      `json:"timezone,omitempty"`
	Enabled    bool        `json:"enabled"`
	Alerts     []int       `json:"alerts"`
	Raises     []raiseView `json:"raises"`
}

type raiseView struct {
	ID    string     `json:"id"`
	By    int64      `json:"by"`
	Until *time.Time `json:"until"`
}

// limitJSON is l's view.
func limitJSON(l *Limit) json.RawMessage {
	v := limitView{ID: l.ID, Level: l.Level(), Scope: l.Scope, ScopeValue: l.ScopeValue, Metric: l.Metric, Limit: l.Max,
		Window: l.Window.String(), ResetTime: l.Window.ResetTimeString(), Timezone: l.Window.ZoneName(), Enabled: l.Enabled,
		Alerts: append([]int{}, l.Alerts...), Raises: make([]raiseView, len(l.Raises))}
	if !l.IsDefault() {
		o := l.Owner()
		v.Owner = &o
	}
	for i, r := range l.Raises {
		v.Raises[i] = raiseView{ID: r.ID, By: r.Amount}
		if !r.Until.IsZero() {
			u := r.Until.UTC()
			v.Raises[i].Until = &u
		}
	}
	return mustJSON(v)
}

type teamView struct {
	Name string   `json:"name"`
	Org  string   `json:"org"`
	Keys []string `json:"keys"`
}

func teamJSON(t *Team) json.RawMessage {
	return mustJSON(teamView{Name: t.Name, Org: t.Org, Keys: append([]string{}, t.Keys...)})
}

type priceView struct {
	Provider   string    `json:"provider"`
	Model      string    `json:"model"`
	Tier       string    `json:"tier"`
	AboveInput int64     `json:"above_input"`
	From       time.Time `json:"from"`
	Input      string    `json:"input"`
	Output     string    `json:"output"`
	CacheRead  string    `json:"cache_read"`
	CacheWrite string    `json:"cache_write"`
	Reasoning  string    `json:"reasoning"`
	// CacheWrite1h is the 1-hour cache-write price.
	CacheWrite1h string `json:"cache_write_1h"`
}

func priceJSON(p *Price) json.RawMessage {
	return mustJSON(priceView{Provider: p.Provider, Model: p.Model, Tier: p.Tier, AboveInput: p.AboveInput, From: p.From.UTC(),
		Input: FormatUSD(p.Input), Output: FormatUSD(p.Output), CacheRead: FormatUSD(p.CacheRead), CacheWrite: FormatUSD(p.CacheWrite),
		Reasoning: FormatUSD(p.Reasoning), CacheWrite1h: FormatUSD(p.CacheWrite1h)})
}

type placementView struct {
	Key  string `json:"key"`
	Team string `json:"team"`
}

// mustJSON marshals a view, which holds nothing json can refuse.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("budget: audit view: " + err.Error())
	}
	return b
}

// logChange appends the entry of a change made in tx, unless before and
// after are the same (a write that changed nothing is no change).
func (t *Tracker) logChange(ctx context.Context, tx Tx, now time.Time, c Change) error {
	if c.Before != nil && c.After != nil && bytes.Equal(c.Before, c.After) {
		return nil
	}
	a, ok := tx.(AuditTx)
	if !ok {
		return nil // a store without the audit role logs nothing (roles.go)
	}
	e, err := NewAudit(ctx, now, c.Action, c.Object, c.ObjectID, c.Placed(), c.Before, c.After)
	if err != nil {
		return err
	}
	e.WasTeam, e.WasOrg = c.WasTeam, c.WasOrg
	return a.AppendAudit(ctx, e)
}

// limitChange is the change of a limit from before to after (nil: none),
// placed where it sits in tx.
func limitChange(ctx context.Context, tx Tx, action AuditAction, before, after *Limit) (Change, error) {
	c := Change{Action: action, Object: ObjectLimit}
	l := after
	if l == nil {
		l = before
	} else {
		c.After = limitJSON(after)
	}
	if before != nil {
		c.Before = limitJSON(before)
	}
	c.ObjectID = l.ID
	p, err := limitPlaced(ctx, tx, l)
	c.Team, c.Org = p.Team, p.Org
	return c, err
}

// logLimit logs the change of a limit from before to after (nil: none).
func (t *Tracker) logLimit(ctx context.Context, tx Tx, now time.Time, action AuditAction, before, after *Limit) error {
	c, err := limitChange(ctx, tx, action, before, after)
	if err != nil {
		return err
	}
	return t.logChange(ctx, tx, now, c)
}

// logTeam logs the change of team name from before to after (nil: none),
// read in tx around the change.
func (t *Tracker) logTeam(ctx context.Context, tx Tx, now time.Time, action AuditAction, before, after *Team) error {
	c := Change{Action: action, Object: ObjectTeam}
	for _, tm := range []*Team{before, after} {
		if tm != nil {
			c.ObjectID, c.Team, c.Org = tm.Name, tm.Name, tm.Org
		}
	}
	if before != nil && after != nil && before.Org != after.Org {
		c.WasTeam, c.WasOrg = before.Name, before.Org
	}
	if before != nil {
		c.Before = teamJSON(before)
	}
	if after != nil {
		c.After = teamJSON(after)
	}
	return t.logChange(ctx, tx, now, c)
}

// findTeam is team name as tx has it, nil when there is none.
func findTeam(ctx context.Context, tx Tx, name string) (*Team, error) {
	ts, err := tx.Teams(ctx)
	if err != nil {
		return nil, err
	}
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i], nil
		}
	}
	return nil, nil
}

// logPlacement logs key moved from team old to team to ("" for none),
// placed where it went (where it was, when it left every team).
func (t *Tracker) logPlacement(ctx context.Context, tx Tx, now time.Time, key, old, to string) error {
	if old == to {
		return nil
	}
	c := Change{Action: AuditUpdate, Object: ObjectKey, ObjectID: key,
		Before: mustJSON(placementView{Key: key, Team: old}), After: mustJSON(placementView{Key: key, Team: to})}
	p, err := teamPlaced(ctx, tx, cmpOr(to, old))
	if err != nil {
		p = Placed{Team: cmpOr(to, old)}
	}
	c.Team, c.Org = p.Team, p.Org
	if old != "" && to != "" {
		was, err := teamPlaced(ctx, tx, old)
		if err != nil {
			was = Placed{Team: old}
		}
		c.WasTeam, c.WasOrg = was.Team, was.Org
	}
	return t.logChange(ctx, tx, now, c)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// samePrice reports whether a and b are one price version: same provider,
// model, tier, threshold and start.
func samePrice(a, b *Price) bool {
	return a.Provider == b.Provider && a.Model == b.Model && a.Tier == b.Tier && a.AboveInput == b.AboveInput && a.From.Equal(b.From)
}

// priceChange is p put over the prices cur: a create, or an update of
// the version it replaces.
func priceChange(cur []Price, p *Price) Change {
	c := Change{Action: AuditCreate, Object: ObjectPrice, ObjectID: PriceID(p), After: priceJSON(p)}
	for i := range cur {
		if samePrice(&cur[i], p) {
			c.Action, c.Before = AuditUpdate, priceJSON(&cur[i])
		}
	}
	return c
}

// ChangedFields lists an update's changed top-level fields as
// "field old -> new" (JSON values), in the after view's order.
func ChangedFields(c *Change) []string {
	var before, after map[string]json.RawMessage
	if json.Unmarshal(c.Before, &before) != nil || json.Unmarshal(c.After, &after) != nil {
		return []string{string(c.Before) + " -> " + string(c.After)}
	}
	var out []string
	for _, k := range objectKeys(c.After) {
		if b, a := before[k], after[k]; !bytes.Equal(b, a) {
			if b == nil {
				b = json.RawMessage("null")
			}
			out = append(out, k+" "+string(b)+" -> "+string(a))
		}
	}
	for k, b := range before {
		if _, ok := after[k]; !ok {
			out = append(out, k+" "+string(b)+" -> null")
		}
	}
	return out
}

// objectKeys are the keys of the JSON object raw in its order.
func objectKeys(raw json.RawMessage) []string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var keys []string
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return keys
		}
		k, _ := t.(string)
		keys = append(keys, k)
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return keys
		}
	}
	return keys
}
