// Package sqlrow is what the SQL stores (SQLite in store, PostgreSQL in
// store/postgres) share: the rows of limits, reservations, providers and
// gateway keys as sqlx scans them, their conversion to budget and gatekey
// types, and
// instants as Unix nanoseconds (0 for the zero time). It is safe for
// concurrent use.
package sqlrow

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Ns stores an instant: Unix nanoseconds, 0 for the zero time.
func Ns(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromNs reads an instant stored by Ns.
func FromNs(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Limit is a limits row.
type Limit struct {
	ID            string `db:"id"`
	Key           string `db:"key"`
	Team          string `db:"team"`
	Org           string `db:"org"`
	Scope         string `db:"scope"`
	ScopeValue    string `db:"scope_value"`
	Metric        string `db:"metric"`
	Max           int64  `db:"max"`
	Window        string `db:"window"`
	WindowSeconds int64  `db:"window_seconds"`
	ResetTime     int    `db:"reset_time"`
	Timezone      string `db:"timezone"`
	Enabled       bool   `db:"enabled"`
	Alerts        string `db:"alerts"`     // thresholds, comma-separated
	CreatedAt     int64  `db:"created_at"` // a once window's anchor
}

var zones sync.Map // name -> *time.Location

// names interns the few strings every limit row repeats (scopes, metrics,
// provider and model names), so a cache of many limits holds one copy of
// each.
var names sync.Map

func intern(s string) string {
	if v, ok := names.Load(s); ok {
		return v.(string)
	}
	v, _ := names.LoadOrStore(s, s)
	return v.(string)
}

var calendar = map[string]budget.WindowKind{"daily": budget.Daily, "weekly": budget.Weekly, "monthly": budget.Monthly}

// Decode is the row as a budget.Limit.
func (r *Limit) Decode() (budget.Limit, error) {
	l := budget.Limit{ID: r.ID, Key: r.Key, Team: intern(r.Team), Org: intern(r.Org), Scope: budget.Scope(intern(r.Scope)), ScopeValue: intern(r.ScopeValue),
		Metric: budget.Metric(intern(r.Metric)), Max: r.Max, Enabled: r.Enabled}
	if r.Alerts != "" {
		for _, f := range strings.Split(r.Alerts, ",") {
			p, err := strconv.Atoi(f)
			if err != nil {
				return l, fmt.Errorf("limit %s: alert threshold %q: %w", r.ID, f, err)
			}
			l.Alerts = append(l.Alerts, p)
		}
	}
	switch r.Window {
	case "":
	case "once":
		l.Window = budget.Window{Kind: budget.Once, Anchor: FromNs(r.CreatedAt)}
	case "daily", "weekly", "monthly":
		l.Window.Kind = calendar[r.Window]
		l.Window.ResetTime = r.ResetTime
		if z, ok := zones.Load(r.Timezone); ok {
			l.Window.Zone = z.(*time.Location)
		} else {
			z, err := budget.LoadZone(r.Timezone)
			if err != nil {
				return l, fmt.Errorf("limit %s: %w", r.ID, err)
			}
			zones.Store(r.Timezone, z)
			l.Window.Zone = z
		}
	default:
		l.Window = budget.Window{Kind: budget.Fixed, Length: time.Duration(r.WindowSeconds) * time.Second}
	}
	return l, nil
}

// DecodeLimits decodes the rows of one query; the rows of one key share a
// single copy of the key string.
func DecodeLimits(rows []Limit) ([]budget.Limit, error) {
	out := make([]budget.Limit, 0, len(rows))
	for i := range rows {
		if i > 0 && rows[i].Key == rows[i-1].Key {
			rows[i].Key = rows[i-1].Key
		}
		l, err := rows[i].Decode()
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// LimitArgs are l's values in the order of the limits columns: id, key,
// team, org, scope, scope_value, metric, max, window, window_seconds,
// reset_time, timezone, enabled, alerts.
func LimitArgs(l budget.Limit) []any {
	var secs int64
	if l.Window.Kind == budget.Fixed {
		secs = int64(l.Window.Length / time.Second)
	}
	return []any{l.ID, l.Key, l.Team, l.Org, string(l.Scope), l.ScopeValue, string(l.Metric), l.Max, l.Window.String(), secs,
		l.Window.ResetTime, l.Window.ZoneName(), l.Enabled, AlertsText(l.Alerts)}
}

// AlertsText is the stored form of alert thresholds: "50,80,100".
func AlertsText(as []int) string {
	parts := make([]string, len(as))
	for i, p := range as {
		parts[i] = strconv.Itoa(p)
	}
	return strings.Join(parts, ",")
}

// OwnerColumn is the limits column (and usage column) naming a level's
// owner: team or org.
func OwnerColumn(level budget.Level) (string, error) {
	switch level {
	case budget.LevelTeam:
		return "team", nil
	case budget.LevelOrg:
		return "org", nil
	}
	return "", fmt.Errorf("no owned limits at level %q", level)
}

// Raise is a raises row.
type Raise struct {
	ID        string `db:"id"`
	LimitID   string `db:"limit_id"`
	Amount    int64  `db:"amount"`
	Until     int64  `db:"until"` // 0: it stays
	CreatedAt int64  `db:"created_at"`
}

// RaiseCols are the columns of a Raise, in order.
const RaiseCols = `id, limit_id, amount, until, created_at`

// RaiseArgs are r's values for limit id in RaiseCols order.
func RaiseArgs(id string, r budget.Raise) []any {
	return []any{r.ID, id, r.Amount, Ns(r.Until), Ns(r.At)}
}

// AttachRaises gives each limit of ls its raises among rows, oldest first.
func AttachRaises(ls []budget.Limit, rows []Raise) {
	if len(rows) == 0 {
		return
	}
	byID := make(map[string]int, len(ls))
	for i := range ls {
		byID[ls[i].ID] = i
	}
	slices.SortFunc(rows, func(a, b Raise) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	for _, r := range rows {
		if i, ok := byID[r.LimitID]; ok {
			ls[i].Raises = append(ls[i].Raises, budget.Raise{ID: r.ID, Amount: r.Amount, Until: FromNs(r.Until), At: FromNs(r.CreatedAt)})
		}
	}
}

// Team is a teams row with its keys, newline-separated in key order.
type Team struct {
	Name string `db:"name"`
	Org  string `db:"org"`
	Keys string `db:"keys"`
}

// Decode is the row as a budget.Team.
func (r *Team) Decode() budget.Team {
	t := budget.Team{Name: r.Name, Org: r.Org, Keys: []string{}}
	if r.Keys != "" {
		t.Keys = strings.Split(r.Keys, "\n")
		slices.Sort(t.Keys)
	}
	return t
}

// Reservation is a reservations row.
type Reservation struct {
	ID        string `db:"id"`
	Key       string `db:"key"`
	Team      string `db:"team"`
	Org       string `db:"org"`
	User      string `db:"end_user"`
	Provider  string `db:"provider"`
	Model     string `db:"model"`
	Tokens    int64  `db:"est_tokens"`
	Input     int64  `db:"est_input"`
	Output    int64  `db:"est_output"`
	At        int64  `db:"at"`
	ExpiresAt int64  `db:"expires_at"`
	State     string `db:"state"`
	SettledAt int64  `db:"settled_at"`
	OnExpiry  string `db:"on_expiry"`
	Holds     string `db:"holds"`
	Tags      string `db:"tags"`
}

// ReservationCols are the columns of a Reservation, in order.
const ReservationCols = `id, key, team, org, end_user, provider, model, est_tokens, est_input, est_output, at, expires_at, state, settled_at, on_expiry, holds, tags`

// Decode is the row as a budget.ReservationRow.
func (r *Reservation) Decode() budget.ReservationRow {
	return budget.ReservationRow{ID: r.ID, Key: r.Key, Team: r.Team, Org: r.Org, User: r.User, Tags: budget.Tags(r.Tags), Provider: r.Provider, Model: r.Model,
		Estimate: budget.Estimate{Tokens: r.Tokens, Input: r.Input, Output: r.Output},
		At:       FromNs(r.At), ExpiresAt: FromNs(r.ExpiresAt), State: budget.ReservationState(r.State), SettledAt: FromNs(r.SettledAt),
		OnExpiry: budget.ExpiryPolicy(r.OnExpiry), Holds: DecodeHolds(r.ID, r.Holds, FromNs(r.ExpiresAt))}
}

// EncodeHolds is the copy of a reservation's holds its row keeps: one line
// per hold, tab-separated limit id, subject, window start and amount, then
// R when it expires with the reservation or N when never (Forever). Ids
// and subjects hold no control characters (budget.CheckName).
func EncodeHolds(hs []budget.Hold) string {
	var b strings.Builder
	for i, h := range hs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(h.LimitID)
		b.WriteByte('\t')
		b.WriteString(h.Subject)
		b.WriteByte('\t')
		b.WriteString(strconv.FormatInt(Ns(h.WindowStart), 10))
		b.WriteByte('\t')
		b.WriteString(strconv.FormatInt(h.Amount, 10))
		if h.ExpiresAt.Equal(budget.Forever) {
			b.WriteString("\tN")
		} else {
			b.WriteString("\tR")
		}
	}
	return b.String()
}

// DecodeHolds reads EncodeHolds' form back for reservation id expiring at
// expires; a malformed line is skipped (it can only come from outside).
func DecodeHolds(id, s string, expires time.Time) []budget.Hold {
	if s == "" {
		return nil
	}
	var out []budget.Hold
	for line := range strings.SplitSeq(s, "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			continue
		}
		start, err1 := strconv.ParseInt(f[2], 10, 64)
		amount, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		h := budget.Hold{ReservationID: id, LimitID: f[0], Subject: f[1], WindowStart: FromNs(start), Amount: amount, ExpiresAt: expires}
		if f[4] == "N" {
			h.ExpiresAt = budget.Forever
		}
		out = append(out, h)
	}
	return out
}

// Provider is a providers row (the probe claim left out).
type Provider struct {
	Provider      string `db:"provider"`
	Kind          string `db:"kind"`
	ParkedAt      int64  `db:"parked_at"`
	RetryAfter    int64  `db:"retry_after"`
	ResumeAt      int64  `db:"resume_at"`
	Affected      string `db:"affected"`
	ProbeFailures int    `db:"probe_failures"`
}

// ProviderCols are the columns of a Provider, in order.
const ProviderCols = `provider, kind, parked_at, retry_after, resume_at, affected, probe_failures`

// Decode is the row as a budget.ProviderState; labels are stored one a line.
func (r *Provider) Decode() budget.ProviderState {
	p := budget.ProviderState{Provider: r.Provider, Kind: budget.ParkKind(r.Kind), ParkedAt: FromNs(r.ParkedAt),
		RetryAfter: time.Duration(r.RetryAfter), ResumeAt: FromNs(r.ResumeAt), ProbeFailures: r.ProbeFailures}
	if r.Affected != "" {
		p.Affected = strings.Split(r.Affected, "\n")
	}
	return p
}

// GatewayKey is a gateway_keys row.
type GatewayKey struct {
	Name      string `db:"name"`
	Hash      string `db:"hash"`
	CreatedAt int64  `db:"created_at"`
	RevokedAt int64  `db:"revoked_at"`
	PrevHash  string `db:"prev_hash"`
	PrevUntil int64  `db:"prev_until"`
	LastUsed  int64  `db:"last_used_at"`
	ExpiresAt int64  `db:"expires_at"`
	Models    string `db:"models"` // one pattern a line
}

// KeyCols are the columns of a GatewayKey, in order.
const KeyCols = `name, hash, created_at, revoked_at, prev_hash, prev_until, last_used_at, expires_at, models`

// OnExpiry is the stored form of a reservation's expiry policy.
func OnExpiry(p budget.ExpiryPolicy) string {
	if p == "" {
		return string(budget.ExpireRelease)
	}
	return string(p)
}

// Scanner is the part of a result row a scan callback needs.
type Scanner interface{ Scan(dest ...any) error }

// Rows is what EachRow reads: *sql.Rows, or sqlx's.
type Rows interface {
	Scanner
	Next() bool
	Err() error
	Close() error
}

// EachRow calls row for each row of a query's result (rows, err), stopping
// at the first error, and closes rows.
func EachRow[R Rows](rows R, err error, row func(Scanner) error) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
