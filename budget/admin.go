package budget

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// LimitSpec is a `limit set`: the identity in full, and the attributes to
// change. A nil pointer leaves the attribute as it is on an update (and takes
// its default on a create).
type LimitSpec struct {
	ID string // optional: names a new limit or addresses an existing one
	// The owner: exactly one of Key, Team, Org and Default.
	Key  string
	Team string // a team's limit, shared by its keys; the team exists
	Org  string // an organisation's limit, shared by its teams' keys; it exists
	// Default makes a default limit, which applies to every key without an
	// enabled limit of its own of the same scope, value, metric and window,
	// and counts per key.
	Default    bool
	Scope      string // "" is global
	ScopeValue string
	Metric     string // "" is tokens
	Window     string // required except for concurrent limits
	ResetTime  *string
	Timezone   *string
	Max        *int64 // required on create
	Enabled    *bool
	// Alerts are the thresholds (percent; see Limit.Alerts); nil leaves
	// them as they are, empty removes them.
	Alerts *[]int
	// MustExist makes the spec an update only: ErrNotFound when no limit
	// has ID, so a limit removed since a caller read it is not recreated.
	MustExist bool
}

// Validate checks the spec as SetLimit will, without a store, so a tool can
// refuse bad input before it opens a database. It does not know whether the
// limit exists, so a missing Max is not an error here.
func (s LimitSpec) Validate() error {
	_, err := s.parse()
	return err
}

// parse validates the spec's identity into a Limit without id or max.
func (s LimitSpec) parse() (Limit, error) {
	l := Limit{ID: strings.TrimSpace(s.ID), Key: strings.TrimSpace(s.Key), Team: strings.TrimSpace(s.Team), Org: strings.TrimSpace(s.Org),
		Scope: Scope(s.Scope), ScopeValue: s.ScopeValue, Metric: Metric(s.Metric), Max: 1, Enabled: true}
	switch {
	case s.Default && l.Key != "":
		return l, invalid("key", l.Key, "a default limit applies to every key; give --default or --key, not both")
	case s.Default && l.Team != "":
		return l, invalid("team", l.Team, "a default limit applies to every key; give --default or --team, not both")
	case s.Default && l.Org != "":
		return l, invalid("org", l.Org, "a default limit applies to every key; give --default or --org, not both")
	case !s.Default && l.IsDefault():
		return l, invalid("key", l.Key, "must not be empty (or give --team, --org, or make a default limit)")
	}
	m, err := ParseMetric(s.Metric)
	if err != nil {
		return l, err
	}
	rt, tz := "", ""
	if s.ResetTime != nil {
		rt = *s.ResetTime
	}
	if s.Timezone != nil {
		tz = *s.Timezone
	}
	if m == MetricConcurrent {
		if strings.TrimSpace(s.Window) != "" {
			return l, invalid("window", s.Window, "concurrent limits take no window")
		}
		if rt != "" {
			return l, invalid("reset_time", rt, "concurrent limits have no window")
		}
		if tz != "" {
			return l, invalid("timezone", tz, "concurrent limits have no window")
		}
	} else if l.Window, err = ParseWindow(s.Window, rt, tz); err != nil {
		return l, err
	}
	if s.Max != nil {
		l.Max = *s.Max
	}
	if s.Enabled != nil {
		l.Enabled = *s.Enabled
	}
	if s.Alerts != nil {
		l.Alerts = *s.Alerts
	}
	return l.Validate()
}

// SetLimit creates or updates a limit (contract section 3) in one
// transaction and reports whether it created one.
func (t *Tracker) SetLimit(ctx context.Context, s LimitSpec) (Limit, bool, error) {
	want, err := s.parse()
	if err != nil {
		return Limit{}, false, err
	}
	var out Limit
	var created bool
	now := t.now()
	err = t.store.Update(ctx, func(tx Tx) error {
		if len(want.Alerts) > 0 {
			if _, err := alertTx(tx); err != nil {
				return fmt.Errorf("alert thresholds: %w", err)
			}
		}
		if err := tx.LockDefinitions(ctx); err != nil {
			return err
		}
		created = false
		var ls []Limit
		var err error
		switch want.Level() {
		case LevelTeam, LevelOrg:
			if err := checkOwnerExists(ctx, tx, want.Level(), want.Owner()); err != nil {
				return err
			}
			ls, err = tx.OwnedLimits(ctx, want.Level(), want.Owner())
		default:
			ls, err = tx.Limits(ctx, want.Key)
		}
		if err != nil {
			return err
		}
		var same, byID *Limit
		for i := range ls {
			if ls[i].SameIdentity(&want) {
				same = &ls[i]
			}
		}
		if want.ID != "" {
			l, err := tx.Limit(ctx, want.ID)
			switch {
			case err == nil:
				byID = &l
			case !errors.Is(err, ErrNotFound):
				return err
			}
			if byID != nil && !byID.SameIdentity(&want) {
				return invalid("id", want.ID, "names a limit with another owner, scope, value, metric or window")
			}
			if byID == nil && same != nil {
				return invalid("id", want.ID, "limit "+same.ID+" already has this owner, scope, value, metric and window")
			}
		}
		cur := byID
		if cur == nil {
			cur = same
		}
		if cur == nil && s.MustExist {
			return fmt.Errorf("limit %q: %w", want.ID, ErrNotFound)
		}
		if cur == nil {
			if s.Max == nil {
				return invalid("limit", "", "is required to create a limit")
			}
			out = want
			if out.ID == "" {
				out.ID = NewID("lim_")
			}
			created = true
			if out.Window.Kind == Once {
				out.Window.Anchor = now.UTC() // the balance counts from its creation
			}
			if err := seedable(ctx, tx, &out, now); err != nil {
				return err
			}
			if err := tx.InsertLimit(ctx, out, now); err != nil {
				return err
			}
			return t.logLimit(ctx, tx, now, AuditCreate, nil, &out)
		}
		before := *cur
		out = *cur
		if s.Max != nil {
			out.Max = want.Max
		}
		if s.Enabled != nil {
			out.Enabled = want.Enabled
		}
		if s.ResetTime != nil {
			out.Window.ResetTime = want.Window.ResetTime
		}
		if s.Timezone != nil {
			out.Window.Zone = want.Window.Zone
		}
		if s.Alerts != nil {
			out.Alerts = want.Alerts
		}
		if err := tx.UpdateLimit(ctx, out, now); err != nil {
			return err
		}
		return t.logLimit(ctx, tx, now, AuditUpdate, &before, &out)
	})
	if err != nil {
		return Limit{}, false, err
	}
	t.InvalidateLimits(out.Key) // a default, team or org limit ("") changes many keys' limits
	return out, created, nil
}

// seedable refuses a new limit whose current window starts before the
// prune horizon at an instant that is not a UTC midnight: the daily
// rollups cannot give the pruned part of its first day, so its counters
// would be seeded short.
func seedable(ctx context.Context, tx Tx, l *Limit, now time.Time) error {
	if l.Metric == MetricConcurrent {
		return nil
	}
	horizon, err := prunedBefore(ctx, tx)
	if err != nil || horizon.IsZero() {
		return err
	}
	start, _ := l.Window.Bounds(now)
	if start.Before(horizon) && !Day(start).Equal(start) {
		return invalid("window", l.Window.String(), "its current window starts at "+start.UTC().Format(time.RFC3339)+
			", before the prune horizon "+horizon.Format(time.RFC3339)+" and not at a UTC midnight: the pruned part of that day cannot be counted (use a UTC window, or create it once its window starts after the horizon)")
	}
	return nil
}

// DeleteLimit removes a limit with its counters and holds.
func (t *Tracker) DeleteLimit(ctx context.Context, id string) error {
	var key string
	now := t.now()
	err := t.store.Update(ctx, func(tx Tx) error {
		l, err := tx.Limit(ctx, id)
		if err != nil {
			return err
		}
		key = l.Key
		if err := t.logLimit(ctx, tx, now, AuditDelete, &l, nil); err != nil {
			return err
		}
		return tx.DeleteLimit(ctx, id)
	})
	if err == nil {
		t.InvalidateLimits(key)
	}
	return err
}

// Limits lists the limits of key (every key when key is ""), in listing
// order, read from the store.
func (t *Tracker) Limits(ctx context.Context, key string) ([]Limit, error) {
	var ls []Limit
	err := t.store.View(ctx, func(tx Tx) error {
		var err error
		ls, err = tx.Limits(ctx, key)
		return err
	})
	sortLimits(ls)
	return ls, err
}

func sortLimits(ls []Limit) {
	slices.SortFunc(ls, func(a, b Limit) int { return a.Compare(&b) })
}

// Report is what `budget inspect` shows.
type Report struct {
	At     time.Time
	Limits []Status // every limit, disabled ones too, in listing order
	// Forecasts are the Limits' forecasts at At (nil for concurrent
	// limits).
	Forecasts []*Forecast
	Rollovers []Rollover
	Providers []ProviderState // parked providers
}

// Inspect reports every limit that applies to key (its own, the defaults
// counted for it, its team's and its organisation's), or every limit but
// the defaults when key is "", in the window holding at, the newest
// rollovers and the parked providers. It reads one snapshot and writes
// nothing.
func (t *Tracker) Inspect(ctx context.Context, key string, at time.Time, rollovers int) (Report, error) {
	return t.inspect(ctx, LevelKey, key, at, rollovers, false)
}

// InspectOwned is Inspect of one team's (LevelTeam) or organisation's
// (LevelOrg) own limits, with their usage; an invalid-input error naming
// the field when it does not exist.
func (t *Tracker) InspectOwned(ctx context.Context, level Level, owner string, at time.Time, rollovers int) (Report, error) {
	return t.inspect(ctx, level, owner, at, rollovers, false)
}

// InspectBefore is Inspect (level LevelKey, owner the key or "") or
// InspectOwned as of a past instant at: each window's usage is what the
// history holds of it up to at, where a counter holds the whole window's
// (usage after at included). It reads the history once per limit, so the
// live views (at now) use Inspect. A window before the prune horizon is
// summed from the rollups (SumUsage).
func (t *Tracker) InspectBefore(ctx context.Context, level Level, owner string, at time.Time, rollovers int) (Report, error) {
	return t.inspect(ctx, level, owner, at, rollovers, true)
}

// usageBefore sets each window limit's Used to the history's usage of
// its window up to at (an event at at included, as a check at at counts
// it): a counter holds the whole window's usage, and an inspect of a past
// instant must not count what came after it. Holds are left as the store
// has them at at (live then).
func usageBefore(ctx context.Context, tx Tx, sts []Status, at time.Time) error {
	h, err := historyTx(tx)
	if err != nil {
		return err
	}
	for i := range sts {
		st := &sts[i]
		if st.Limit.Metric == MetricConcurrent || st.WindowStart.IsZero() {
			continue
		}
		used, err := h.SumUsage(ctx, &st.Limit, st.WindowStart, at.Add(time.Nanosecond))
		if err != nil {
			return err
		}
		st.Used = used
	}
	return nil
}

func (t *Tracker) inspect(ctx context.Context, level Level, owner string, at time.Time, rollovers int, past bool) (Report, error) {
	r := Report{At: at}
	err := t.store.View(ctx, func(tx Tx) error {
		var ls []Limit
		var err error
		switch {
		case level == LevelKey && owner != "":
			team, org, err := tx.Placement(ctx, owner)
			if err != nil {
				return err
			}
			ls, err = loadLimits(ctx, tx, owner, team, org) // with the defaults counted for it
			if err != nil {
				return err
			}
		case level == LevelKey:
			if ls, err = tx.Limits(ctx, ""); err != nil {
				return err
			}
			// A default limit has no usage of its own, only each key's:
			// inspect --key K shows it with K's.
			ls = slices.DeleteFunc(ls, func(l Limit) bool { return l.IsDefault() })
		default:
			if err := checkOwnerExists(ctx, tx, level, owner); err != nil {
				return err
			}
			if ls, err = tx.OwnedLimits(ctx, level, owner); err != nil {
				return err
			}
		}
		if ls, err = expandUsers(ctx, tx, ls, at); err != nil {
			return err
		}
		sortLimits(ls)
		if r.Limits, err = storedStatuses(ctx, tx, ls, at); err != nil {
			return err
		}
		if past {
			if err := usageBefore(ctx, tx, r.Limits, at); err != nil {
				return err
			}
		}
		r.Forecasts = make([]*Forecast, len(r.Limits))
		if err := forecasts(ctx, tx, r.Limits, at, r.Forecasts); err != nil {
			return err
		}
		if rollovers > 0 {
			if r.Rollovers, err = levelRollovers(ctx, tx, level, owner, ls, rollovers); err != nil {
				return err
			}
		}
		r.Providers, err = parkedProviders(ctx, tx)
		return err
	})
	return r, err
}

// expandUsers replaces each per-user limit of ls with one copy per end
// user who has a counter or a hold in the window holding at (Subject
// set), so a report shows each user's usage; a per-user limit no user has
// used yet is shown once, with no user.
func expandUsers(ctx context.Context, tx Tx, ls []Limit, at time.Time) ([]Limit, error) {
	if !slices.ContainsFunc(ls, func(l Limit) bool { return l.Each() }) {
		return ls, nil
	}
	out := make([]Limit, 0, len(ls))
	for _, l := range ls {
		if !l.Each() { // per-user and per-tag-value limits alike
			out = append(out, l)
			continue
		}
		h, err := historyTx(tx)
		if err != nil {
			return nil, err
		}
		start, _ := l.Window.Bounds(at)
		subs, err := h.Subjects(ctx, l.ID, start)
		if err != nil {
			return nil, err
		}
		prefix := ""
		if l.IsDefault() {
			prefix = l.Subject + SubjectSep
		}
		n := 0
		for _, sub := range subs {
			if strings.HasPrefix(sub, prefix) && len(sub) > len(prefix) {
				c := l
				c.Subject = sub
				out = append(out, c)
				n++
			}
		}
		if n == 0 {
			l.Subject = prefix // no user yet: the limit itself, unused
			out = append(out, l)
		}
	}
	return out, nil
}

// levelRollovers are the newest n rollovers of what a report shows.
func levelRollovers(ctx context.Context, tx Tx, level Level, owner string, ls []Limit, n int) ([]Rollover, error) {
	h, err := historyTx(tx)
	if err != nil {
		return nil, err
	}
	if level == LevelKey {
		return h.Rollovers(ctx, owner, n)
	}
	// A team's or an organisation's: the store lists by key, so filter.
	all, err := h.Rollovers(ctx, "", max(n*50, 10_000))
	if err != nil {
		return nil, err
	}
	ids := make(map[string]bool, len(ls))
	for i := range ls {
		ids[ls[i].ID] = true
	}
	out := all[:0]
	for _, r := range all {
		if ids[r.LimitID] && len(out) < n {
			out = append(out, r)
		}
	}
	return out, nil
}

// Drift is a counter row that disagrees with the history of its window.
type Drift struct {
	LimitID     string
	Subject     string // the key, for a default limit's counter
	WindowStart time.Time
	Counter     int64
	History     int64
}

// Verify compares every counter row with the history's sum over its window
// (see VerifyCounters) and returns the rows that disagree.
func (t *Tracker) Verify(ctx context.Context) ([]Drift, error) {
	res, err := t.VerifyCounters(ctx)
	return res.Drifted, err
}

// VerifyResult is what VerifyCounters found.
type VerifyResult struct {
	Drifted []Drift
	// NotCheckable counts the counter rows left unchecked: their window
	// starts before the prune horizon other than at a UTC midnight, or
	// ends before it other than at one. The pruned part of such a window
	// is only in daily rollups, which cannot tell its hours apart.
	NotCheckable int
}

// VerifyCounters compares every counter row the history can still check
// with the history's sum over its window: the events, and for the whole
// UTC days before the prune horizon the daily rollups.
func (t *Tracker) VerifyCounters(ctx context.Context) (VerifyResult, error) {
	var out VerifyResult
	err := t.store.View(ctx, func(tx Tx) error {
		out = VerifyResult{}
		h, err := historyTx(tx)
		if err != nil {
			return err
		}
		horizon, err := h.PrunedBefore(ctx)
		if err != nil {
			return err
		}
		ls, err := tx.Limits(ctx, "")
		if err != nil {
			return err
		}
		byID := make(map[string]*Limit, len(ls))
		for i := range ls {
			byID[ls[i].ID] = &ls[i]
		}
		rows, err := h.CounterRows(ctx)
		if err != nil {
			return err
		}
		for _, r := range rows {
			l := byID[r.LimitID]
			if l == nil {
				continue
			}
			if !checkable(r.WindowStart, r.WindowEnd, horizon) {
				out.NotCheckable++
				continue
			}
			eff := *l
			eff.Subject = r.Subject
			sum, err := h.SumUsage(ctx, &eff, r.WindowStart, r.WindowEnd)
			if err != nil {
				return err
			}
			if sum != r.Used {
				out.Drifted = append(out.Drifted, Drift{LimitID: r.LimitID, Subject: r.Subject, WindowStart: r.WindowStart, Counter: r.Used, History: sum})
			}
		}
		return nil
	})
	return out, err
}

// checkable reports whether the history can still sum [start, end) after
// a prune to horizon (a UTC midnight; zero when none): its part before the
// horizon, if any, must be whole UTC days, which the rollups hold.
func checkable(start, end, horizon time.Time) bool {
	if horizon.IsZero() || !start.Before(horizon) {
		return true
	}
	return start.Equal(Day(start)) && (!end.Before(horizon) || end.Equal(Day(end)))
}
