package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// The JSON shapes of contract section 7: snake_case, times RFC3339 in UTC
// with whole seconds, null for what does not apply, [] for empty lists.

// limitJSON is a limit object.
type limitJSON struct {
	ID         string  `json:"id"`
	Key        *string `json:"key"` // null for a default limit
	Scope      string  `json:"scope"`
	ScopeValue string  `json:"scope_value"`
	Metric     string  `json:"metric"`
	Limit      int64   `json:"limit"`
	Window     *string `json:"window"`     // null for concurrent limits
	ResetTime  *string `json:"reset_time"` // null unless calendar
	Timezone   *string `json:"timezone"`   // null unless calendar
	Enabled    bool    `json:"enabled"`
}

// statusJSON is a limit status: the limit in its window at an instant.
type statusJSON struct {
	limitJSON
	WindowStart *string `json:"window_start"` // null for concurrent limits
	ResetAt     *string `json:"reset_at"`     // null for concurrent limits
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

func limitObj(l *budget.Limit) limitJSON {
	o := limitJSON{ID: l.ID, Scope: string(l.Scope), ScopeValue: l.ScopeValue,
		Metric: string(l.Metric), Limit: l.Max, Enabled: l.Enabled}
	if !l.IsDefault() {
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

func limitObjs(ls []budget.Limit) []limitJSON {
	out := make([]limitJSON, len(ls))
	for i := range ls {
		out[i] = limitObj(&ls[i])
	}
	return out
}

func statusObj(s *budget.Status) statusJSON {
	return statusJSON{limitJSON: limitObj(&s.Limit), WindowStart: tsp(s.WindowStart), ResetAt: tsp(s.ResetAt),
		Used: s.Used, Reserved: s.Reserved, Remaining: s.Remaining()}
}

func statusObjs(ss []budget.Status) []statusJSON {
	out := make([]statusJSON, len(ss))
	for i := range ss {
		out[i] = statusObj(&ss[i])
	}
	return out
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

func decisionObj(d *budget.Decision) decisionJSON {
	o := decisionJSON{Allowed: d.Allowed, Limits: statusObjs(d.Limits)}
	if b := d.Breach; b != nil {
		o.Breach = &breachJSON{statusJSON: statusObj(&b.Status), RetryAfterSeconds: b.RetryAfterSeconds, Retryable: b.Retryable}
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
const statusHeader = "ID\tKEY\tSCOPE\tMETRIC\tWINDOW\tLIMIT\tUSED\tRESERVED\tREMAINING\tWINDOW START\tRESET AT\tENABLED"

func statusLine(s *budget.Status) string {
	l := &s.Limit
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", l.ID, keyText(l), l.ScopeString(), l.Metric,
		windowText(l), amountText(l, l.Max), amountText(l, s.Used), amountText(l, s.Reserved), amountText(l, s.Remaining()),
		tsText(s.WindowStart), tsText(s.ResetAt), yesNo(l.Enabled))
}
