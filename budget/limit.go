package budget

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Scope says which requests of a key a limit applies to.
type Scope string

const (
	ScopeGlobal   Scope = "global"   // every request of the key
	ScopeProvider Scope = "provider" // requests to one provider
	ScopeModel    Scope = "model"    // requests for one model
	ScopeUser     Scope = "user"     // requests of one end user, or of each (AllUsers)
)

// AllUsers is the value of a user-scope limit that applies to each end user
// separately: every user gets a counter of their own, created on first use.
// It is the one place "*" means "each" rather than a pattern.
const AllUsers = "*"

// SubjectSep joins the key and the end user in the subject of a default
// per-user limit's counter. Names cannot contain control characters, so
// the join is unambiguous.
const SubjectSep = "\x1f"

// ParseScope validates a scope name; "" is global.
func ParseScope(s string) (Scope, error) {
	switch Scope(strings.TrimSpace(s)) {
	case "", ScopeGlobal:
		return ScopeGlobal, nil
	case ScopeProvider:
		return ScopeProvider, nil
	case ScopeModel:
		return ScopeModel, nil
	case ScopeUser:
		return ScopeUser, nil
	case ScopeTag:
		return ScopeTag, nil
	}
	return "", invalid("scope", s, "want global, provider, model, user or tag")
}

func (s Scope) rank() int {
	switch s {
	case ScopeGlobal:
		return 0
	case ScopeProvider:
		return 1
	case ScopeModel:
		return 2
	case ScopeUser:
		return 3
	}
	return 4
}

// Level says whose budget a limit is: one key's, a team's (shared by its
// keys), an organisation's (shared by its teams' keys), or a default that
// applies to each key separately.
type Level string

const (
	LevelKey     Level = "key"
	LevelTeam    Level = "team"
	LevelOrg     Level = "org"
	LevelDefault Level = "default"
)

// ParseLevel validates a level name.
func ParseLevel(s string) (Level, error) {
	switch l := Level(strings.TrimSpace(s)); l {
	case LevelKey, LevelTeam, LevelOrg, LevelDefault:
		return l, nil
	}
	return "", invalid("level", s, "want key, team, org or default")
}

// rank orders levels in listings: defaults first (as before levels
// existed, when their empty key sorted first), then keys, teams, orgs.
func (lv Level) rank() int {
	switch lv {
	case LevelDefault:
		return 0
	case LevelKey:
		return 1
	case LevelTeam:
		return 2
	}
	return 3
}

// Raise adds to a limit until an instant (for ever when Until is zero).
type Raise struct {
	ID     string
	Amount int64
	Until  time.Time // zero: it stays
	At     time.Time // when it was added
}

// Active reports whether the raise counts at t: from when it was added
// until Until.
func (r *Raise) Active(t time.Time) bool {
	return !t.Before(r.At) && (r.Until.IsZero() || t.Before(r.Until))
}

// Metric is what a limit counts.
type Metric string

const (
	MetricTokens     Metric = "tokens"     // billable: input + output + reasoning
	MetricInput      Metric = "input"      // prompt tokens
	MetricOutput     Metric = "output"     // output + reasoning
	MetricRequests   Metric = "requests"   // one per event
	MetricConcurrent Metric = "concurrent" // requests in flight (leases); no window
	MetricUSD        Metric = "usd"        // cost in micro-dollars, from the price table
)

// ParseMetric validates a metric name; "" is tokens.
func ParseMetric(s string) (Metric, error) {
	switch Metric(strings.TrimSpace(s)) {
	case "", MetricTokens:
		return MetricTokens, nil
	case MetricInput:
		return MetricInput, nil
	case MetricOutput:
		return MetricOutput, nil
	case MetricRequests:
		return MetricRequests, nil
	case MetricConcurrent:
		return MetricConcurrent, nil
	case MetricUSD:
		return MetricUSD, nil
	}
	return "", invalid("metric", s, "want tokens, input, output, requests, concurrent or usd")
}

// Limit is one budget rule (contract section 3). Its identity is (level
// and owner, Scope, ScopeValue, Metric, Window); ID addresses it. At most
// one of Key, Team and Org is set: the owner; none makes a default limit.
type Limit struct {
	ID         string
	Key        string // the key of a key-level limit
	Team       string // the team of a team-level limit: its keys share it
	Org        string // the organisation of an org-level limit: its teams' keys share it
	Scope      Scope
	ScopeValue string // empty for global
	Metric     Metric
	// Max is the limit as set, > 0; Raises add to it while they last (see
	// MaxAt).
	Max     int64
	Raises  []Raise
	Window  Window // NoWindow for concurrent limits
	Enabled bool
	// Alerts are thresholds in percent of the limit in force (MaxAt):
	// the usage of a window crossing one logs an alert, once per window
	// and threshold. Ascending, each from 1 to 1000.
	Alerts []int
	// Subject names whose counters of the limit these are, when the limit
	// counts for more than one: the key a default limit is applied to, the
	// end user of a per-user (AllUsers) limit, or both joined by
	// SubjectSep; "" otherwise. The Tracker fills it when it applies the
	// limit to a request.
	Subject string
}

// IsDefault reports whether l is a default limit (no owner of its own).
func (l *Limit) IsDefault() bool { return l.Key == "" && l.Team == "" && l.Org == "" }

// Level is whose budget l is.
func (l *Limit) Level() Level {
	switch {
	case l.Key != "":
		return LevelKey
	case l.Team != "":
		return LevelTeam
	case l.Org != "":
		return LevelOrg
	}
	return LevelDefault
}

// Owner is the name of the key, team or organisation l belongs to; "" for
// a default limit.
func (l *Limit) Owner() string { return cmp.Or(l.Key, l.Team, l.Org) }

// Covers reports whether l counts what happens at t: always, but a once
// limit only from its creation (its anchor) on.
func (l *Limit) Covers(t time.Time) bool {
	return l.Window.Kind != Once || !t.Before(l.Window.Anchor)
}

// EachUser reports whether l counts each end user separately (scope user,
// value AllUsers).
func (l *Limit) EachUser() bool { return l.Scope == ScopeUser && l.ScopeValue == AllUsers }

// MaxAt is the limit in force at t: Max plus the raises active at t,
// saturating at MaxTokens.
func (l *Limit) MaxAt(t time.Time) int64 {
	m := l.Max
	for i := range l.Raises {
		if l.Raises[i].Active(t) {
			m = min(m+l.Raises[i].Amount, MaxTokens)
		}
	}
	return m
}

// ActiveRaises are l's raises active at t.
func (l *Limit) ActiveRaises(t time.Time) []Raise {
	var out []Raise
	for _, r := range l.Raises {
		if r.Active(t) {
			out = append(out, r)
		}
	}
	return out
}

// Who is whose request or event it is: the key, the team and organisation
// it is charged to (the key's placement when it is decided, or what a
// reservation or an imported event carries) and the end user ("" when
// none is known).
type Who struct {
	Key, Team, Org, User string
	Tags                 Tags // normalized (NormalizeTags)
}

// subjectFor is the Subject of l's counter that a request of who counts
// in: l.Subject (set for defaults when applied to a key), or for a
// per-user limit, the user (after the key, for a default).
func (l *Limit) subjectFor(who *Who) string {
	if !l.Each() {
		return l.Subject
	}
	if l.IsDefault() {
		return who.Key + SubjectSep + l.eachValue(who)
	}
	return l.eachValue(who)
}

// SubjectKey is the key whose counter of a default limit l is (l.Subject
// names it, with the end user after it for a per-user default); "" for a
// limit of a key, team or org, or a default not applied to a key.
func (l *Limit) SubjectKey() string {
	if !l.IsDefault() {
		return ""
	}
	return DefaultSubjectKey(l.Subject)
}

// SubjectUser is the end user whose counter of a per-user limit l is;
// "" for other limits, or when l is shown for no user.
func (l *Limit) SubjectUser() string {
	if !l.EachUser() {
		return ""
	}
	if !l.IsDefault() {
		return l.Subject
	}
	_, user, _ := strings.Cut(l.Subject, SubjectSep)
	return user
}

// SubjectText is a counter's subject as people read it: key/user for a
// default per-user limit's, else the subject as it is ("" for none).
func SubjectText(subject string) string {
	return strings.ReplaceAll(subject, SubjectSep, "/")
}

// DefaultSubjectKey is the key a default limit's counter subject names.
func DefaultSubjectKey(subject string) string {
	k, _, _ := strings.Cut(subject, SubjectSep)
	return k
}

// userless reports whether l is a per-user limit shown for no user (no
// user has used it yet): it counts nothing.
func (l *Limit) userless() bool {
	if !l.Each() {
		return false
	}
	return l.SubjectValue() == ""
}

// forWho is l as it counts a request of who: with the Subject of the
// counter that request counts in.
func (l *Limit) forWho(who *Who) *Limit {
	if !l.Each() {
		return l
	}
	c := *l
	c.Subject = l.subjectFor(who)
	return &c
}

// History says which events of the history a limit's counter sums: the
// events of one key, team or organisation (whichever is set), narrowed to
// a provider, a model (a name or a pattern, see MatchModel) or an end user.
// Stores build their seeding and verify queries from it.
type History struct {
	Key, Team, Org string
	Provider       string
	Model          string
	User           string
	Tag            string // name=value: events carrying that tag
}

// History is what l's counter for l.Subject sums.
func (l *Limit) History() History {
	h := History{Key: l.Key, Team: l.Team, Org: l.Org}
	subKey, subUser := l.Subject, ""
	if l.Each() {
		subKey, subUser = "", l.Subject
		if l.IsDefault() {
			subKey, subUser, _ = strings.Cut(l.Subject, SubjectSep)
		}
	}
	if l.IsDefault() {
		h.Key = subKey
	}
	switch l.Scope {
	case ScopeProvider:
		h.Provider = l.ScopeValue
	case ScopeModel:
		h.Model = l.ScopeValue
	case ScopeUser:
		h.User = l.ScopeValue
		if l.EachUser() {
			h.User = subUser
		}
	case ScopeTag:
		h.Tag = l.historyTag()
	}
	return h
}

// overrides reports whether own, a key's own enabled limit, takes the
// place of default d for that key: the same scope, value, metric and window.
func (own *Limit) overrides(d *Limit) bool {
	return own.Enabled && own.Scope == d.Scope && own.ScopeValue == d.ScopeValue &&
		own.Metric == d.Metric && own.Window.String() == d.Window.String()
}

// Effective is what applies to key out of ls, limits in any order: its own
// limits, each default that no enabled limit of its own overrides, with
// Subject set to key, and every team and organisation limit in ls (the
// caller passes those of the key's team and organisation). Other keys'
// limits are left out.
func Effective(ls []Limit, key string) []Limit {
	out := make([]Limit, 0, len(ls))
	for i := range ls {
		if ls[i].Key == key && key != "" {
			out = append(out, ls[i])
		}
	}
	own := len(out)
	for i := range ls {
		d := &ls[i]
		switch {
		case d.Team != "" || d.Org != "":
			out = append(out, *d)
			continue
		case !d.IsDefault() || key == "":
			continue
		}
		overridden := false
		for j := range own {
			if out[j].overrides(d) {
				overridden = true
				break
			}
		}
		if !overridden {
			e := *d
			e.Subject = key
			out = append(out, e)
		}
	}
	return out
}

// Validate normalises names and checks every field.
func (l Limit) Validate() (Limit, error) {
	l.ID = strings.TrimSpace(l.ID)
	l.Key = strings.TrimSpace(l.Key)
	l.Team = strings.TrimSpace(l.Team)
	l.Org = strings.TrimSpace(l.Org)
	l.ScopeValue = strings.TrimSpace(l.ScopeValue)
	for _, f := range [...][2]string{{"id", l.ID}, {"key", l.Key}, {"team", l.Team}, {"org", l.Org}} {
		if err := CheckLabel(f[0], f[1]); err != nil {
			return l, err
		}
	}
	if err := CheckName("value", l.ScopeValue); err != nil { // a model or a user: the client's name, shown escaped
		return l, err
	}
	switch {
	case l.Key != "" && l.Team != "":
		return l, invalid("team", l.Team, "a limit belongs to a key, a team or an org; give --key or --team, not both")
	case l.Key != "" && l.Org != "":
		return l, invalid("org", l.Org, "a limit belongs to a key, a team or an org; give --key or --org, not both")
	case l.Team != "" && l.Org != "":
		return l, invalid("org", l.Org, "a limit belongs to a key, a team or an org; give --team or --org, not both")
	}
	sc, err := ParseScope(string(l.Scope))
	if err != nil {
		return l, err
	}
	l.Scope = sc
	if l.Scope == ScopeGlobal && l.ScopeValue != "" {
		return l, invalid("value", l.ScopeValue, "a global limit takes no scope value")
	}
	if l.Scope != ScopeGlobal && l.ScopeValue == "" {
		return l, invalid("value", l.ScopeValue, "a "+string(l.Scope)+" limit needs the "+string(l.Scope)+" name")
	}
	switch l.Scope {
	case ScopeModel:
		if strings.ContainsAny(l.ScopeValue, "[]") {
			return l, invalid("value", l.ScopeValue, "a model name or pattern takes no brackets (patterns use * and ?)")
		}
		l.ScopeValue = NormalizeModel(l.ScopeValue)
	case ScopeUser:
		if l.ScopeValue != AllUsers && strings.ContainsAny(l.ScopeValue, "*?") {
			return l, invalid("value", l.ScopeValue, "an end user is one name, or * for each user separately (no patterns)")
		}
	case ScopeTag:
		if l.ScopeValue, err = checkTagScope(l.ScopeValue); err != nil {
			return l, err
		}
	}
	m, err := ParseMetric(string(l.Metric))
	if err != nil {
		return l, err
	}
	l.Metric = m
	if l.Max <= 0 || l.Max > MaxTokens {
		return l, invalid("limit", l.Max, "must be between 1 and 2^53-1")
	}
	if m == MetricConcurrent && l.Window.Kind != NoWindow {
		return l, invalid("window", l.Window.String(), "concurrent limits take no window")
	}
	if m != MetricConcurrent && l.Window.Kind == NoWindow {
		return l, invalid("window", "", "is required")
	}
	if l.Window.Kind == Fixed && (l.Window.Length < time.Second || l.Window.Length%time.Second != 0) {
		return l, invalid("window", l.Window.Length, "must be a whole number of seconds, at least 1s")
	}
	if l.Window.Kind > Once {
		return l, invalid("window", int(l.Window.Kind), "unknown window kind")
	}
	if (l.Window.Kind == Fixed || l.Window.Kind == Once) && (l.Window.ResetTime != 0 || l.Window.Zone != nil) {
		return l, invalid("reset_time", l.Window.ResetTime, "applies to calendar windows only")
	}
	if l.Window.Calendar() && (l.Window.ResetTime < 0 || l.Window.ResetTime >= 24*60) {
		return l, invalid("reset_time", l.Window.ResetTime, "must be minutes 0..1439 after midnight")
	}
	if l.Window.Calendar() && l.Window.Zone == nil {
		l.Window.Zone = time.UTC
	}
	if len(l.Alerts) > 0 {
		if m == MetricConcurrent {
			return l, invalid("alert", l.Alerts, "concurrent limits have no usage to alert on")
		}
		as := slices.Clone(l.Alerts)
		slices.Sort(as)
		for i, p := range as {
			if p < 1 || p > 1000 {
				return l, invalid("alert", p, "a threshold is a percent of the limit from 1 to 1000")
			}
			if i > 0 && as[i-1] == p {
				return l, invalid("alert", p, "is given twice")
			}
		}
		l.Alerts = as
	}
	return l, nil
}

// ParseAlerts parses "50,80,100" into thresholds ("" is none); Validate
// checks them.
func ParseAlerts(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return []int{}, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(f), "%")))
		if err != nil {
			return nil, invalid("alert", f, "want percents such as 50,80,100")
		}
		out = append(out, p)
	}
	return out, nil
}

// alertLevel is the usage at which threshold p (percent) of a limit of
// max is crossed: p% of max, rounded up (at least 1).
func alertLevel(limit int64, p int) int64 {
	// limit <= 2^53 and p <= 1000: the product fits an int64.
	return max((limit*int64(p)+99)/100, 1)
}

// Applies reports whether the limit governs a request of who to provider
// and model. It does not look at Enabled.
//
// model must be normalised (NormalizeModel): a model-scope limit's value is
// a normalised name or a pattern over normalised names.
func (l *Limit) Applies(who *Who, provider, model string) bool {
	switch {
	case l.Key != "":
		if l.Key != who.Key {
			return false
		}
	case l.Team != "":
		if l.Team != who.Team {
			return false
		}
	case l.Org != "":
		if l.Org != who.Org {
			return false
		}
	default: // a default, applied to a key by Effective
		if k, _, _ := strings.Cut(l.Subject, SubjectSep); k != who.Key {
			return false
		}
	}
	switch l.Scope {
	case ScopeProvider:
		return l.ScopeValue == provider
	case ScopeModel:
		return MatchModel(l.ScopeValue, model)
	case ScopeUser:
		if l.ScopeValue == AllUsers {
			return who.User != ""
		}
		return l.ScopeValue == who.User
	case ScopeTag:
		return l.appliesTag(who.Tags)
	}
	return true
}

// Describe names whose limit l is, as messages say it: "key k", "team t",
// "org o", or "default for key k" (the key it is applied to, when known).
func (l *Limit) Describe() string {
	if l.IsDefault() {
		if k, _, _ := strings.Cut(l.Subject, SubjectSep); k != "" {
			return "default for key " + k
		}
		return "default"
	}
	return string(l.Level()) + " " + l.Owner()
}

// ScopeString is "global", "provider=openai" or "model=gpt-4o".
func (l *Limit) ScopeString() string {
	if l.Scope == ScopeGlobal {
		return "global"
	}
	return string(l.Scope) + "=" + l.ScopeValue
}

// SameIdentity reports whether two limits have the same identity tuple.
func (l *Limit) SameIdentity(o *Limit) bool {
	return l.Key == o.Key && l.Team == o.Team && l.Org == o.Org && l.Scope == o.Scope && l.ScopeValue == o.ScopeValue &&
		l.Metric == o.Metric && l.Window.String() == o.Window.String()
}

// Compare is Less as a three-way comparison, for slices.SortFunc.
func (l *Limit) Compare(o *Limit) int {
	switch {
	case l.Less(o):
		return -1
	case o.Less(l):
		return 1
	}
	return 0
}

// Less orders limits as the listings do: level (default, key, team, org),
// owner, scope, scope value, metric, window length, id, subject.
func (l *Limit) Less(o *Limit) bool {
	if a, b := l.Level(), o.Level(); a != b {
		return a.rank() < b.rank()
	}
	if a, b := l.Owner(), o.Owner(); a != b {
		return a < b
	}
	if l.Scope != o.Scope {
		return l.Scope.rank() < o.Scope.rank()
	}
	if l.ScopeValue != o.ScopeValue {
		return l.ScopeValue < o.ScopeValue
	}
	if l.Metric != o.Metric {
		return l.Metric < o.Metric
	}
	if a, b := l.Window.Nominal(), o.Window.Nominal(); a != b {
		return a < b
	}
	if l.ID != o.ID {
		return l.ID < o.ID
	}
	return l.Subject < o.Subject
}
