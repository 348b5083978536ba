package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// The JSON shapes of contract section 7: snake_case, times RFC3339 in UTC
// with whole seconds, null for what does not apply, [] for empty lists.

// limitJSON is a limit object. Limit is the limit in force at the
// instant the object describes (now for limit set and ls, the status's
// instant otherwise): BaseLimit plus the Raises active then.
type limitJSON struct {
	ID         string      `json:"id"`
	Level      string      `json:"level"` // key, team, org or default
	Owner      *string     `json:"owner"` // the key, team or org; null for a default limit
	Key        *string     `json:"key"`   // the key of a key-level limit; null otherwise
	Scope      string      `json:"scope"`
	ScopeValue string      `json:"scope_value"`
	Metric     string      `json:"metric"`
	Limit      int64       `json:"limit"`
	BaseLimit  int64       `json:"base_limit"`
	Raises     []raiseJSON `json:"raises"`
	Window     *string     `json:"window"`     // null for concurrent limits
	ResetTime  *string     `json:"reset_time"` // null unless calendar
	Timezone   *string     `json:"timezone"`   // null unless calendar
	Enabled    bool        `json:"enabled"`
}

// raiseJSON is a raise of a limit, in the limit's unit (micro-dollars for
// usd, as limit and base_limit).
type raiseJSON struct {
	ID    string  `json:"id"`
	By    int64   `json:"by"`
	Until *string `json:"until"` // null: it stays
	At    string  `json:"at"`
}

// statusJSON is a limit status: the limit in its window at an instant.
type statusJSON struct {
	limitJSON
	// User is the end user whose counter this is, for a per-user ('*')
	// limit; null for other limits.
	User        *string `json:"user"`
	WindowStart *string `json:"window_start"` // null for concurrent limits
	ResetAt     *string `json:"reset_at"`     // null for concurrent and once limits
	Used        int64   `json:"used"`
	Reserved    int64   `json:"reserved"`
	Remaining   int64   `json:"remaining"`
}

type breachJSON struct {
	statusJSON
	RetryAfterSeconds int64 `json:"retry_after_seconds"`
	Retryable         bool  `json:"retryable"`
}

type providerJSON struct {
	Provider      string  `json:"provider"`
	Kind          string  `json:"kind"`
	ParkedAt      *string `json:"parked_at"`
	ResumeAt      *string `json:"resume_at"`
	ProbeFailures int     `json:"probe_failures"`
}

type parkedJSON struct {
	providerJSON
	RetryAfterSeconds int64 `json:"retry_after_seconds"`
}

// reservationJSON is what reserve --json prints: the reservation and what
// it holds on each applicable limit (1 on concurrent limits: its lease).
type reservationJSON struct {
	ID        string     `json:"id"`
	ExpiresAt string     `json:"expires_at"`
	Limits    []holdJSON `json:"limits"`
}

type holdJSON struct {
	LimitID string `json:"limit_id"`
	Amount  int64  `json:"amount"`
}

type rolloverJSON struct {
	LimitID         string `json:"limit_id"`
	PrevWindowStart string `json:"prev_window_start"`
	PrevUsed        int64  `json:"prev_used"`
	WindowStart     string `json:"window_start"`
	LoggedAt        string `json:"logged_at"`
}

type decisionJSON struct {
	Allowed bool         `json:"allowed"`
	Breach  *breachJSON  `json:"breach"`
	Parked  *parkedJSON  `json:"parked"`
	Limits  []statusJSON `json:"limits"`
	// Unpriced is present only when a dollar limit refuses an unpriced model.
	Unpriced *unpricedJSON `json:"unpriced,omitempty"`
}

// limitObj is l as it stands at at.
func limitObj(l *budget.Limit, at time.Time) limitJSON {
	o := limitJSON{ID: l.ID, Level: string(l.Level()), Scope: string(l.Scope), ScopeValue: l.ScopeValue,
		Metric: string(l.Metric), Limit: l.MaxAt(at), BaseLimit: l.Max, Raises: raiseObjs(l.ActiveRaises(at)), Enabled: l.Enabled}
	if !l.IsDefault() {
		o.Owner = ptr(l.Owner())
	}
	if l.Key != "" {
		o.Key = ptr(l.Key)
	}
	if l.Window.Kind != budget.NoWindow {
		o.Window = ptr(l.Window.String())
	}
	if l.Window.Calendar() {
		o.ResetTime = ptr(l.Window.ResetTimeString())
		o.Timezone = ptr(l.Window.ZoneName())
	}
	return o
}

func limitObjs(ls []budget.Limit, at time.Time) []limitJSON {
	out := make([]limitJSON, len(ls))
	for i := range ls {
		out[i] = limitObj(&ls[i], at)
	}
	return out
}

func raiseObjs(rs []budget.Raise) []raiseJSON {
	out := make([]raiseJSON, len(rs))
	for i, r := range rs {
		out[i] = raiseJSON{ID: r.ID, By: r.Amount, Until: tsp(r.Until), At: ts(r.At)}
	}
	return out
}

// statusObj is a status at at, the instant it was computed for.
func statusObj(s *budget.Status, at time.Time) statusJSON {
	o := statusJSON{limitJSON: limitObj(&s.Limit, at), WindowStart: tsp(windowStart(s)), ResetAt: resetAt(s.ResetAt),
		Used: s.Used, Reserved: s.Reserved, Remaining: s.Remaining()}
	o.Limit = s.Max // the domain's word on what was in force
	if u := statusUser(&s.Limit); u != "" {
		o.User = ptr(u)
	}
	return o
}

func statusObjs(ss []budget.Status, at time.Time) []statusJSON {
	out := make([]statusJSON, len(ss))
	for i := range ss {
		out[i] = statusObj(&ss[i], at)
	}
	return out
}

// windowStart is s's window start, or the zero time for the stretch
// before a once window's anchor (the limit's creation), which has no start
// of its own (the domain counts it from the earliest instant it holds).
func windowStart(s *budget.Status) time.Time {
	if w := s.Limit.Window; w.Kind == budget.Once && s.WindowStart.Before(w.Anchor) {
		return time.Time{}
	}
	return s.WindowStart
}

// resetAt is a window's end for JSON: null for concurrent limits (no
// window) and once windows (they never reset).
func resetAt(t time.Time) *string {
	if t.Equal(budget.Forever) {
		return nil
	}
	return tsp(t)
}

// statusUser is the end user whose counter of a per-user ('*') limit a
// status is about: the limit's Subject, after the key for a default
// limit; "" for other limits.
func statusUser(l *budget.Limit) string {
	if !l.EachUser() || l.Subject == "" {
		return ""
	}
	if l.IsDefault() {
		_, user, _ := strings.Cut(l.Subject, budget.SubjectSep)
		return user
	}
	return l.Subject
}

func providerObj(p *budget.ProviderState) providerJSON {
	return providerJSON{Provider: p.Provider, Kind: string(p.Kind), ParkedAt: tsp(p.ParkedAt),
		ResumeAt: tsp(p.ResumeAt), ProbeFailures: p.ProbeFailures}
}

func providerObjs(ps []budget.ProviderState) []providerJSON {
	out := make([]providerJSON, len(ps))
	for i := range ps {
		out[i] = providerObj(&ps[i])
	}
	return out
}

func reservationObj(r *budget.Reservation) reservationJSON {
	o := reservationJSON{ID: r.ID, ExpiresAt: ts(r.ExpiresAt), Limits: make([]holdJSON, len(r.Holds))}
	for i, h := range r.Holds {
		o.Limits[i] = holdJSON{LimitID: h.LimitID, Amount: h.Amount}
	}
	return o
}

func rolloverObjs(rs []budget.Rollover) []rolloverJSON {
	out := make([]rolloverJSON, len(rs))
	for i, r := range rs {
		out[i] = rolloverJSON{LimitID: r.LimitID, PrevWindowStart: ts(r.PrevWindowStart), PrevUsed: r.PrevUsed,
			WindowStart: ts(r.WindowStart), LoggedAt: ts(r.LoggedAt)}
	}
	return out
}

// decisionObj is a decision made at at.
func decisionObj(d *budget.Decision, at time.Time) decisionJSON {
	o := decisionJSON{Allowed: d.Allowed, Limits: statusObjs(d.Limits, at)}
	if b := d.Breach; b != nil {
		o.Breach = &breachJSON{statusJSON: statusObj(&b.Status, at), RetryAfterSeconds: b.RetryAfterSeconds, Retryable: b.Retryable}
	}
	if p := d.Parked; p != nil {
		o.Parked = &parkedJSON{providerJSON: providerObj(&p.ProviderState), RetryAfterSeconds: p.RetryAfterSeconds}
	}
	if u := d.Unpriced; u != nil {
		o.Unpriced = &unpricedJSON{Provider: u.Provider, Model: u.Model}
	}
	return o
}

// unpricedJSON names a model with no price under a dollar limit.
type unpricedJSON struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
}

// ts formats t as RFC3339 in UTC with whole seconds (truncated).
func ts(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// tsp is ts, or nil (JSON null) for the zero time.
func tsp(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	return ptr(ts(t))
}

func ptr[T any](v T) *T { return &v }

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Text helpers shared by the tables.

// windowText is a limit's window for humans: "1h", "daily 00:00 UTC", "-".
func windowText(l *budget.Limit) string {
	switch {
	case l.Window.Kind == budget.NoWindow:
		return "-"
	case l.Window.Calendar():
		return l.Window.String() + " " + l.Window.ResetTimeString() + " " + l.Window.ZoneName()
	}
	return l.Window.String()
}

// resetText is a window's end for tables: "never" for a once window, "-"
// without a window.
func resetText(t time.Time) string {
	if t.Equal(budget.Forever) {
		return "never"
	}
	return tsText(t)
}

// ownerText is whose limit l is, for tables: the key of a key limit,
// "team:T" or "org:O", and "(default)" for a default limit, after the key
// it was applied to when there is one ("demo (default)").
func ownerText(l *budget.Limit) string {
	switch l.Level() {
	case budget.LevelKey:
		return l.Key
	case budget.LevelTeam:
		return "team:" + l.Team
	case budget.LevelOrg:
		return "org:" + l.Org
	}
	if k, _, _ := strings.Cut(l.Subject, budget.SubjectSep); k != "" {
		return k + " (default)"
	}
	return "(default)"
}

// scopeString is l's scope for tables, each name through name: "global",
// "provider=openai", "user=*", and for one user's counter of a per-user
// limit "user=alice (*)". It has at most 9 runes more than a name.
func scopeString(l *budget.Limit, name func(string) string) string {
	if l.Scope == budget.ScopeGlobal {
		return l.ScopeString()
	}
	if u := statusUser(l); u != "" {
		return string(l.Scope) + "=" + name(u) + " (" + budget.AllUsers + ")"
	}
	return string(l.Scope) + "=" + name(l.ScopeValue)
}

// limitText is an amount in force for tables, with the base limit after
// it when raises change it: "1500 (base 1000)".
func limitText(l *budget.Limit, max int64) string {
	if max == l.Max {
		return amountText(l, max)
	}
	return amountText(l, max) + " (base " + amountText(l, l.Max) + ")"
}

// tsText is ts, or "-" for the zero time.
func tsText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return ts(t)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// statusLine is one status as a tab-separated table row; statusHeader heads it.
const statusHeader = "ID\tOWNER\tSCOPE\tMETRIC\tWINDOW\tLIMIT\tUSED\tRESERVED\tREMAINING\tWINDOW START\tRESET AT\tENABLED"

func statusLine(s *budget.Status) string {
	l := &s.Limit
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", l.ID, ownerText(l), scopeString(l, identity), l.Metric,
		windowText(l), limitText(l, s.Max), amountText(l, s.Used), amountText(l, s.Reserved), amountText(l, s.Remaining()),
		tsText(windowStart(s)), resetText(s.ResetAt), yesNo(l.Enabled))
}

func identity(s string) string { return s }
