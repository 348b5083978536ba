// Package jsonview is the JSON form of limits and limit statuses: the
// objects `budget limit ls --json`, `inspect --json` and `check --json`
// print and the proxy's GET /v1/budget serves, built by one piece of code
// so they cannot drift apart. The same holds for the other objects the
// CLI prints and the admin API (package admin) serves: keys, teams,
// prices, audit entries, export lines, and the report's JSON and CSV
// (whose cells CSVCell keeps from running as spreadsheet formulas).
//
// The shapes follow the contract (section 7): snake_case, times RFC3339 in
// UTC with whole seconds, null for what does not apply, [] for empty
// lists. Amounts are in the limit's unit: tokens, requests, leases, or
// micro-dollars for usd limits.
//
// Everything here is a pure function of its arguments.
package jsonview

import (
	"math"
	"strconv"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Limit is a limit object. Limit is the limit in force at the instant the
// object describes (now for limit set and ls, the status's instant
// otherwise): BaseLimit plus the Raises active then.
type Limit struct {
	ID         string  `json:"id"`
	Level      string  `json:"level"` // key, team, org or default
	Owner      *string `json:"owner"` // the key, team or org; null for a default limit
	Key        *string `json:"key"`   // the key of a key-level limit; null otherwise
	Scope      string  `json:"scope"`
	ScopeValue string  `json:"scope_value"`
	Metric     string  `json:"metric"`
	Limit      int64   `json:"limit"`
	BaseLimit  int64   `json:"base_limit"`
	Raises     []Raise `json:"raises"`
	Window     *string `json:"window"`     // null for concurrent limits
	ResetTime  *string `json:"reset_time"` // null unless calendar
	Timezone   *string `json:"timezone"`   // null unless calendar
	Enabled    bool    `json:"enabled"`
	// Alerts are the thresholds, in percent of the limit in force, whose
	// crossing logs an alert; [] when none.
	Alerts []int `json:"alerts"`
}

// Raise is a raise of a limit, in the limit's unit.
type Raise struct {
	ID    string  `json:"id"`
	By    int64   `json:"by"`
	Until *string `json:"until"` // null: it stays
	At    string  `json:"at"`
}

// Status is a limit status: the limit in its window at an instant, with
// where the window is heading at its current pace (budget.Forecast).
type Status struct {
	Limit
	// User is the end user whose counter this is, for a per-user ('*')
	// limit; null for other limits.
	User *string `json:"user"`
	// Tag is the tag ("project=atlas") whose counter this is, for a
	// per-value tag limit ('project=*'); left out for other limits.
	Tag         *string `json:"tag,omitempty"`
	WindowStart *string `json:"window_start"` // null for concurrent limits
	ResetAt     *string `json:"reset_at"`     // null for concurrent and once limits
	Used        int64   `json:"used"`
	Reserved    int64   `json:"reserved"`
	Remaining   int64   `json:"remaining"`
	// ForecastUsed is what the window will hold at its reset at the
	// current pace; null for concurrent limits, windows that never reset,
	// and statuses printed without a forecast.
	ForecastUsed *int64 `json:"forecast_used"`
	// ExhaustsAt is when the room left runs out at the current pace;
	// null when it will not before the reset (or the pace is zero).
	ExhaustsAt *string `json:"exhausts_at"`
}

// LimitOf is l as it stands at at.
func LimitOf(l *budget.Limit, at time.Time) Limit {
	o := Limit{ID: l.ID, Level: string(l.Level()), Scope: string(l.Scope), ScopeValue: l.ScopeValue,
		Metric: string(l.Metric), Limit: l.MaxAt(at), BaseLimit: l.Max, Raises: raises(l.ActiveRaises(at)),
		Enabled: l.Enabled, Alerts: append([]int{}, l.Alerts...)}
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

// Limits is LimitOf of each of ls.
func Limits(ls []budget.Limit, at time.Time) []Limit {
	out := make([]Limit, len(ls))
	for i := range ls {
		out[i] = LimitOf(&ls[i], at)
	}
	return out
}

func raises(rs []budget.Raise) []Raise {
	out := make([]Raise, len(rs))
	for i, r := range rs {
		out[i] = Raise{ID: r.ID, By: r.Amount, Until: TimeOrNull(r.Until), At: Time(r.At)}
	}
	return out
}

// StatusOf is s, a status computed for at, with its forecast f (nil: none).
func StatusOf(s *budget.Status, f *budget.Forecast, at time.Time) Status {
	o := Status{Limit: LimitOf(&s.Limit, at), WindowStart: TimeOrNull(WindowStart(s)), ResetAt: resetAt(s.ResetAt),
		Used: s.Used, Reserved: s.Reserved, Remaining: s.Remaining()}
	o.Limit.Limit = s.Max // the domain's word on what was in force
	if u := User(&s.Limit); u != "" {
		o.User = ptr(u)
	}
	if tag := s.Limit.SubjectTag(); tag != "" {
		o.Tag = ptr(tag)
	}
	if f != nil {
		if f.ForecastUsed >= 0 {
			o.ForecastUsed = ptr(f.ForecastUsed)
		}
		o.ExhaustsAt = TimeOrNull(f.ExhaustsAt)
	}
	return o
}

// Statuses is StatusOf of each of ss with its forecast in fs, which is
// parallel to ss or nil (no forecasts).
func Statuses(ss []budget.Status, fs []*budget.Forecast, at time.Time) []Status {
	out := make([]Status, len(ss))
	for i := range ss {
		var f *budget.Forecast
		if i < len(fs) {
			f = fs[i]
		}
		out[i] = StatusOf(&ss[i], f, at)
	}
	return out
}

// WindowStart is s's window start, or the zero time for the stretch
// before a once window's anchor (the limit's creation), which has no start
// of its own (the domain counts it from the earliest instant it holds).
func WindowStart(s *budget.Status) time.Time {
	if w := s.Limit.Window; w.Kind == budget.Once && s.WindowStart.Before(w.Anchor) {
		return time.Time{}
	}
	return s.WindowStart
}

// resetAt is a window's end: null for concurrent limits (no window) and
// once windows (they never reset).
func resetAt(t time.Time) *string {
	if t.Equal(budget.Forever) {
		return nil
	}
	return TimeOrNull(t)
}

// User is the end user whose counter of a per-user ('*') limit a status is
// about: the limit's Subject, after the key for a default limit; "" for
// other limits.
func User(l *budget.Limit) string {
	return l.SubjectUser()
}

// Time formats t as RFC3339 in UTC with whole seconds (truncated).
func Time(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// TimeOrNull is Time, or nil (JSON null) for the zero time.
func TimeOrNull(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	return ptr(Time(t))
}

func ptr[T any](v T) *T { return &v }

// Short is x (>= 1,000) in at most four digits with a suffix, as the CLI's
// bars and the dashboard show amounts: "1.5k", "987.7M", "1.3B", "2T".
// Rounding never shows 1000 of a unit: 999,960 is "1M".
func Short(x float64) string {
	suffixes := [...]string{"k", "M", "B", "T"}
	for i, s := range suffixes {
		x /= 1000
		if r := math.Round(x*10) / 10; r < 1000 || i == len(suffixes)-1 {
			return strconv.FormatFloat(r, 'f', -1, 64) + s
		}
	}
	panic("unreachable")
}
