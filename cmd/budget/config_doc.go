package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

// configVersion is the version of the document 'budget config export'
// writes and 'config import' reads.
const configVersion = 1

// configDoc is a database's configuration as one JSON document: what
// 'budget config import' needs to recreate it, apart from the history
// ('budget export'). Times are RFC3339 with nanoseconds in UTC, exact (a
// price's from is part of its identity); null is what does not apply.
type configDoc struct {
	Version *int          `json:"version"` // required: configVersion
	Limits  []configLimit `json:"limits"`
	Prices  []configPrice `json:"prices"`
	Teams   []configTeam  `json:"teams"`
	Keys    []configKey   `json:"keys"` // gateway keys
}

// configLimit is a limit as set: limit is its base (raises are listed
// apart), in its metric's unit (micro-dollars for usd).
type configLimit struct {
	ID         string        `json:"id"`
	Level      string        `json:"level"` // key, team, org or default
	Owner      *string       `json:"owner"` // null for a default limit
	Scope      string        `json:"scope"`
	ScopeValue string        `json:"scope_value"`
	Metric     string        `json:"metric"`
	Limit      int64         `json:"limit"`
	Window     *string       `json:"window"`     // null for concurrent limits
	ResetTime  *string       `json:"reset_time"` // calendar windows only
	Timezone   *string       `json:"timezone"`   // calendar windows only
	Anchor     *string       `json:"anchor"`     // once windows only: where the balance starts
	Enabled    *bool         `json:"enabled"`    // default true
	Raises     []configRaise `json:"raises"`
	Alerts     []int         `json:"alerts"` // thresholds in percent; null or absent: none
}

type configRaise struct {
	ID    string  `json:"id"`
	By    int64   `json:"by"`
	Until *string `json:"until"` // null: for good
	At    *string `json:"at"`    // when it was added (default: the import's instant)
}

// configPrice is a price version, in dollars per million tokens.
type configPrice struct {
	Provider   string     `json:"provider"`
	Model      string     `json:"model"`
	Tier       string     `json:"tier,omitempty"`        // "" (absent): the standard tier
	AboveInput int64      `json:"above_input,omitempty"` // 0 (absent): any prompt size
	From       string     `json:"from"`
	Input      usdAmount  `json:"input"`
	Output     usdAmount  `json:"output"`
	CacheRead  *usdAmount `json:"cache_read"`
	CacheWrite *usdAmount `json:"cache_write"`
	Reasoning  *usdAmount `json:"reasoning"`

	CacheWrite1h *usdAmount `json:"cache_write_1h"` // absent: the cache-write price
}

// usdAmount is a dollar amount: written as a decimal string, exact (as
// 'price ls --json' writes prices), read from a string or a number.
type usdAmount string

func (a *usdAmount) UnmarshalJSON(b []byte) error {
	var s string
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*a = usdAmount(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*a = usdAmount(n)
	return nil
}

type configTeam struct {
	Name string   `json:"name"`
	Org  *string  `json:"org"`  // null: in no organisation
	Keys []string `json:"keys"` // the keys placed in the team
}

// configKey is a gateway key as stored: the hash of its secret, never the
// secret.
type configKey struct {
	Name      string   `json:"name"`
	Hash      string   `json:"hash"`
	CreatedAt string   `json:"created_at"`
	RevokedAt *string  `json:"revoked_at"` // null while usable
	PrevHash  *string  `json:"prev_hash"`  // a rotation's previous secret, accepted until prev_until
	PrevUntil *string  `json:"prev_until"`
	ExpiresAt *string  `json:"expires_at,omitempty"` // absent or null: never
	Models    []string `json:"models,omitempty"`     // absent: any model
}

// nsTime formats t as RFC3339 with nanoseconds in UTC; nsTimep is nil for
// the zero time.
func nsTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func nsTimep(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	return ptr(nsTime(t))
}

// configObj is the document of d and the gateway keys ks.
func configObj(d *budget.Definitions, ks []gatekey.Key) configDoc {
	doc := configDoc{Version: ptr(configVersion), Limits: make([]configLimit, len(d.Limits)), Prices: make([]configPrice, len(d.Prices)),
		Teams: make([]configTeam, len(d.Teams)), Keys: make([]configKey, len(ks))}
	for i := range d.Limits {
		l := &d.Limits[i]
		o := configLimit{ID: l.ID, Level: string(l.Level()), Scope: string(l.Scope), ScopeValue: l.ScopeValue,
			Metric: string(l.Metric), Limit: l.Max, Enabled: ptr(l.Enabled), Raises: make([]configRaise, len(l.Raises)),
			Alerts: append([]int{}, l.Alerts...)}
		if !l.IsDefault() {
			o.Owner = ptr(l.Owner())
		}
		if l.Window.Kind != budget.NoWindow {
			o.Window = ptr(l.Window.String())
		}
		if l.Window.Calendar() {
			o.ResetTime, o.Timezone = ptr(l.Window.ResetTimeString()), ptr(l.Window.ZoneName())
		}
		if l.Window.Kind == budget.Once {
			o.Anchor = nsTimep(l.Window.Anchor)
		}
		for j, r := range l.Raises {
			o.Raises[j] = configRaise{ID: r.ID, By: r.Amount, Until: nsTimep(r.Until), At: nsTimep(r.At)}
		}
		doc.Limits[i] = o
	}
	for i, p := range d.Prices {
		num := func(v int64) usdAmount { return usdAmount(budget.FormatUSD(v)) }
		doc.Prices[i] = configPrice{Provider: p.Provider, Model: p.Model, Tier: p.Tier, AboveInput: p.AboveInput, From: nsTime(p.From), Input: num(p.Input), Output: num(p.Output),
			CacheRead: ptr(num(p.CacheRead)), CacheWrite: ptr(num(p.CacheWrite)), Reasoning: ptr(num(p.Reasoning)),
			CacheWrite1h: ptr(num(p.CacheWrite1h))}
	}
	for i, t := range d.Teams {
		doc.Teams[i] = configTeam{Name: t.Name, Org: nullIfEmpty(t.Org), Keys: append([]string{}, t.Keys...)}
	}
	for i, k := range ks {
		doc.Keys[i] = configKey{Name: k.Name, Hash: k.Hash, CreatedAt: nsTime(k.CreatedAt), RevokedAt: nsTimep(k.RevokedAt),
			PrevHash: nullIfEmpty(k.PrevHash), PrevUntil: nsTimep(k.PrevUntil), ExpiresAt: nsTimep(k.ExpiresAt), Models: k.Models}
	}
	return doc
}

// parseConfig reads and validates a whole document: the definitions it
// holds and its gateway keys. now is the instant of what gives none (a
// raise without at). Errors are invalid input naming the field.
func parseConfig(r io.Reader, now time.Time) (budget.Definitions, []gatekey.Key, error) {
	var d budget.Definitions
	data, err := io.ReadAll(r)
	if err != nil {
		return d, nil, err
	}
	if data, err = yamlToJSON(data); err != nil {
		return d, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	var doc configDoc
	if err := dec.Decode(&doc); err != nil {
		return d, nil, configDecodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return d, nil, budget.Invalid("json", "", "want one JSON document")
	}
	if version := doc.Version; version == nil {
		return d, nil, budget.Invalid("version", "", fmt.Sprintf("is required (this budget reads version %d)", configVersion))
	} else if *version != configVersion {
		return d, nil, budget.Invalid("version", *version, fmt.Sprintf("unknown; this budget reads version %d", configVersion))
	}
	ids := make(map[string]bool)
	for i := range doc.Limits {
		l, err := doc.Limits[i].limit(now)
		if err != nil {
			return d, nil, fmt.Errorf("limits[%d] (%s): %w", i, doc.Limits[i].ID, err)
		}
		if ids[l.ID] {
			return d, nil, fmt.Errorf("limits[%d]: %w", i, budget.Invalid("id", l.ID, "is given twice"))
		}
		ids[l.ID] = true
		d.Limits = append(d.Limits, l)
	}
	for i, p := range doc.Prices {
		pr, err := p.price()
		if err != nil {
			return d, nil, fmt.Errorf("prices[%d] (%s/%s): %w", i, p.Provider, p.Model, err)
		}
		d.Prices = append(d.Prices, pr)
	}
	placed := make(map[string]string)
	for i, t := range doc.Teams {
		tm := budget.Team{Name: strings.TrimSpace(t.Name), Keys: t.Keys}
		if t.Org != nil {
			tm.Org = strings.TrimSpace(*t.Org)
		}
		if err := budget.CheckLabel("team", tm.Name); err != nil || tm.Name == "" {
			if err == nil {
				err = budget.Invalid("name", t.Name, "is required")
			}
			return d, nil, fmt.Errorf("teams[%d]: %w", i, err)
		}
		if tm.Org != "" {
			if err := budget.CheckLabel("org", tm.Org); err != nil {
				return d, nil, fmt.Errorf("teams[%d] (%s): %w", i, tm.Name, err)
			}
		}
		for _, k := range tm.Keys {
			if err := budget.CheckLabel("keys", k); err != nil || strings.TrimSpace(k) == "" {
				if err == nil {
					err = budget.Invalid("keys", k, "a key name must not be empty")
				}
				return d, nil, fmt.Errorf("teams[%d] (%s): %w", i, tm.Name, err)
			}
			if other, ok := placed[k]; ok {
				return d, nil, fmt.Errorf("teams[%d] (%s): %w", i, tm.Name, budget.Invalid("keys", k, "is placed in team "+other+" too; a key belongs to one team"))
			}
			placed[k] = tm.Name
		}
		d.Teams = append(d.Teams, tm)
	}
	names, hashes := make(map[string]bool), make(map[string]bool)
	var ks []gatekey.Key
	for i, c := range doc.Keys {
		k, err := c.key()
		if err != nil {
			return d, nil, fmt.Errorf("keys[%d] (%s): %w", i, c.Name, err)
		}
		if names[k.Name] {
			return d, nil, fmt.Errorf("keys[%d]: %w", i, budget.Invalid("name", k.Name, "is given twice"))
		}
		for _, h := range []string{k.Hash, k.PrevHash} {
			if h != "" && hashes[h] {
				return d, nil, fmt.Errorf("keys[%d] (%s): %w", i, k.Name, budget.Invalid("hash", h, "is another key's too"))
			}
			hashes[h] = h != ""
		}
		names[k.Name] = true
		ks = append(ks, k)
	}
	return d, ks, nil
}

// configDecodeError names the field a decoding error is about.
func configDecodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return budget.Invalid(te.Field, te.Value, "want a "+te.Type.String())
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ := strings.CutPrefix(f, `"`)
		return budget.Invalid("field", strings.TrimSuffix(name, `"`), "unknown (see 'budget config -h')")
	}
	return budget.Invalid("json", "", err.Error())
}

// limit is c validated as a Limit.
func (c *configLimit) limit(now time.Time) (budget.Limit, error) {
	l := budget.Limit{ID: strings.TrimSpace(c.ID), Scope: budget.Scope(c.Scope), ScopeValue: c.ScopeValue,
		Metric: budget.Metric(c.Metric), Max: c.Limit, Enabled: c.Enabled == nil || *c.Enabled, Alerts: c.Alerts}
	if l.ID == "" {
		return l, budget.Invalid("id", c.ID, "is required")
	}
	if l.Scope == "" {
		l.Scope = budget.ScopeGlobal
	}
	if l.Metric == "" {
		l.Metric = budget.MetricTokens
	}
	owner := ""
	if c.Owner != nil {
		owner = strings.TrimSpace(*c.Owner)
	}
	lv, err := budget.ParseLevel(c.Level)
	if err != nil {
		return l, err
	}
	switch lv {
	case budget.LevelKey:
		l.Key = owner
	case budget.LevelTeam:
		l.Team = owner
	case budget.LevelOrg:
		l.Org = owner
	}
	if lv == budget.LevelDefault && owner != "" {
		return l, budget.Invalid("owner", owner, "a default limit has no owner (null)")
	}
	if lv != budget.LevelDefault && owner == "" {
		return l, budget.Invalid("owner", "", "a "+string(lv)+" limit names its "+string(lv))
	}
	rt, tz := "", ""
	if c.ResetTime != nil {
		rt = *c.ResetTime
	}
	if c.Timezone != nil {
		tz = *c.Timezone
	}
	if c.Window != nil && strings.TrimSpace(*c.Window) != "" {
		if l.Window, err = budget.ParseWindow(*c.Window, rt, tz); err != nil {
			return l, err
		}
	} else if rt != "" || tz != "" {
		return l, budget.Invalid("window", "", "reset_time and timezone need a calendar window")
	}
	if c.Anchor != nil {
		if l.Window.Kind != budget.Once {
			return l, budget.Invalid("anchor", *c.Anchor, "applies to once windows only")
		}
		if l.Window.Anchor, err = parseNs("anchor", *c.Anchor); err != nil {
			return l, err
		}
	}
	for j, r := range c.Raises {
		rs := budget.Raise{ID: strings.TrimSpace(r.ID), Amount: r.By, At: now}
		if rs.ID == "" {
			return l, fmt.Errorf("raises[%d]: %w", j, budget.Invalid("id", r.ID, "is required"))
		}
		if rs.Amount <= 0 || rs.Amount > budget.MaxTokens {
			return l, fmt.Errorf("raises[%d] (%s): %w", j, rs.ID, budget.Invalid("by", r.By, "must be between 1 and 2^53-1"))
		}
		if r.Until != nil {
			if rs.Until, err = parseNs("until", *r.Until); err != nil {
				return l, fmt.Errorf("raises[%d] (%s): %w", j, rs.ID, err)
			}
		}
		if r.At != nil {
			if rs.At, err = parseNs("at", *r.At); err != nil {
				return l, fmt.Errorf("raises[%d] (%s): %w", j, rs.ID, err)
			}
		}
		for _, o := range l.Raises {
			if o.ID == rs.ID {
				return l, fmt.Errorf("raises[%d]: %w", j, budget.Invalid("id", rs.ID, "is given twice"))
			}
		}
		l.Raises = append(l.Raises, rs)
	}
	v, err := l.Validate()
	if err != nil {
		return l, err
	}
	v.Raises = l.Raises
	return v, nil
}

// price is c validated as a Price.
func (c *configPrice) price() (budget.Price, error) {
	if strings.TrimSpace(c.From) == "" {
		return budget.Price{}, budget.Invalid("from", "", "is required")
	}
	from, err := parseNs("from", c.From)
	if err != nil {
		return budget.Price{}, err
	}
	str := func(n *usdAmount) *string {
		if n == nil {
			return nil
		}
		return ptr(string(*n))
	}
	return budget.PriceSpec{Provider: c.Provider, Model: c.Model, Tier: c.Tier, AboveInput: c.AboveInput, From: from, Input: string(c.Input), Output: string(c.Output),
		CacheRead: str(c.CacheRead), CacheWrite: str(c.CacheWrite), Reason: str(c.Reasoning), CacheWrite1h: str(c.CacheWrite1h)}.Parse(from)
}

// key is c validated as a gateway key.
func (c *configKey) key() (gatekey.Key, error) {
	k := gatekey.Key{Name: strings.TrimSpace(c.Name), Hash: strings.TrimSpace(c.Hash)}
	if k.Name == "" {
		return k, budget.Invalid("name", c.Name, "is required")
	}
	if err := budget.CheckLabel("name", k.Name); err != nil {
		return k, err
	}
	if !isHash(k.Hash) {
		return k, budget.Invalid("hash", c.Hash, "want the hex SHA-256 of the key's secret (64 hex digits)")
	}
	var err error
	if k.CreatedAt, err = parseNs("created_at", c.CreatedAt); err != nil {
		return k, err
	}
	if c.RevokedAt != nil {
		if k.RevokedAt, err = parseNs("revoked_at", *c.RevokedAt); err != nil {
			return k, err
		}
	}
	if c.PrevHash != nil && *c.PrevHash != "" {
		k.PrevHash = strings.TrimSpace(*c.PrevHash)
		if !isHash(k.PrevHash) || k.PrevHash == k.Hash {
			return k, budget.Invalid("prev_hash", *c.PrevHash, "want the hex SHA-256 of the previous secret (64 hex digits), not the current one's")
		}
		if c.PrevUntil == nil {
			return k, budget.Invalid("prev_until", "", "is required with prev_hash: when the previous secret stops working")
		}
		if k.PrevUntil, err = parseNs("prev_until", *c.PrevUntil); err != nil {
			return k, err
		}
	} else if c.PrevUntil != nil {
		return k, budget.Invalid("prev_until", *c.PrevUntil, "applies only with prev_hash")
	}
	if c.ExpiresAt != nil {
		if k.ExpiresAt, err = parseNs("expires_at", *c.ExpiresAt); err != nil {
			return k, err
		}
	}
	if k.Models, err = gatekey.ModelPatterns(c.Models); err != nil {
		return k, err
	}
	return k, nil
}

func isHash(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 32 && strings.ToLower(s) == s
}

// parseNs parses an RFC3339 instant (nanoseconds allowed).
func parseNs(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, budget.Invalid(field, s, "want an RFC3339 time such as 2026-03-02T09:00:00Z")
	}
	return t, budget.CheckInstant(field, t)
}
