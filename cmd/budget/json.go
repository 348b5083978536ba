package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

// The JSON shapes of contract section 7: snake_case, times RFC3339 in UTC
// with whole seconds, null for what does not apply, [] for empty lists.

// The limit and status objects are jsonview's, shared with the proxy's
// GET /v1/budget.

type breachJSON struct {
	jsonview.Status
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
	Allowed bool              `json:"allowed"`
	Breach  *breachJSON       `json:"breach"`
	Parked  *parkedJSON       `json:"parked"`
	Limits  []jsonview.Status `json:"limits"`
	// Unpriced is present only when a dollar limit refuses an unpriced model.
	Unpriced *unpricedJSON `json:"unpriced,omitempty"`
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

// decisionObj is a decision made at at, with the forecasts of its limits
// (decisionForecasts; nil: none).
func decisionObj(d *budget.Decision, fs []*budget.Forecast, at time.Time) decisionJSON {
	o := decisionJSON{Allowed: d.Allowed, Limits: jsonview.Statuses(d.Limits, fs, at)}
	if b := d.Breach; b != nil {
		var f *budget.Forecast
		if len(fs) > len(d.Limits) {
			f = fs[len(d.Limits)]
		}
		o.Breach = &breachJSON{Status: jsonview.StatusOf(&b.Status, f, at), RetryAfterSeconds: b.RetryAfterSeconds(), Retryable: b.Retryable}
	}
	if p := d.Parked; p != nil {
		o.Parked = &parkedJSON{providerJSON: providerObj(&p.ProviderState), RetryAfterSeconds: p.RetryAfterSeconds()}
	}
	if u := d.Unpriced; u != nil {
		o.Unpriced = &unpricedJSON{Provider: u.Provider, Model: u.Model}
	}
	return o
}

// decisionForecasts are the forecasts of d's limits at at, then of its
// breach, as decisionObj takes them, read in one snapshot.
func decisionForecasts(ctx context.Context, t *budget.Tracker, d *budget.Decision, at time.Time) ([]*budget.Forecast, error) {
	sts := d.Limits
	if d.Breach != nil {
		sts = append(slices.Clip(sts), d.Breach.Status)
	}
	return t.Forecasts(ctx, sts, at)
}

// unpricedJSON names a model with no price under a dollar limit.
type unpricedJSON struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
}

// ts formats t as RFC3339 in UTC with whole seconds (truncated).
func ts(t time.Time) string { return jsonview.Time(t) }

// tsp is ts, or nil (JSON null) for the zero time.
func tsp(t time.Time) *string { return jsonview.TimeOrNull(t) }

func ptr[T any](v T) *T { return &v }

// nullIfEmpty is s, or nil (JSON null) for "".
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

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
	if k := l.SubjectKey(); k != "" {
		return k + " (default)"
	}
	return "(default)"
}

// scopeString is l's scope for tables, each name through name: "global",
// "provider=openai", "user=*", and for one user's counter of a per-user
// limit "user=alice (*)", for one value's of a per-value tag limit
// "tag=project=atlas (*)". It has at most 9 runes more than a name.
func scopeString(l *budget.Limit, name func(string) string) string {
	if l.Scope == budget.ScopeGlobal {
		return l.ScopeString()
	}
	if u := jsonview.User(l); u != "" {
		return string(l.Scope) + "=" + name(u) + " (" + budget.AllUsers + ")"
	}
	if tag := l.SubjectTag(); tag != "" { // "tag=project=atlas (*)": one value's counter of project=*
		return string(l.Scope) + "=" + name(tag) + " (" + budget.AllValues + ")"
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
		tsText(jsonview.WindowStart(s)), resetText(s.ResetAt), yesNo(l.Enabled))
}

func identity(s string) string { return s }
