package budget

import (
	"strings"
	"time"
)

// Scope says which requests of a key a limit applies to.
type Scope string

const (
	ScopeGlobal   Scope = "global"   // every request of the key
	ScopeProvider Scope = "provider" // requests to one provider
	ScopeModel    Scope = "model"    // requests for one model
)

// ParseScope validates a scope name; "" is global.
func ParseScope(s string) (Scope, error) {
	switch Scope(strings.TrimSpace(s)) {
	case "", ScopeGlobal:
		return ScopeGlobal, nil
	case ScopeProvider:
		return ScopeProvider, nil
	case ScopeModel:
		return ScopeModel, nil
	}
	return "", invalid("scope", s, "want global, provider or model")
}

func (s Scope) rank() int {
	switch s {
	case ScopeGlobal:
		return 0
	case ScopeProvider:
		return 1
	}
	return 2
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

// Limit is one budget rule (contract section 3). Its identity is (Key,
// Scope, ScopeValue, Metric, Window); ID addresses it.
type Limit struct {
	ID         string
	Key        string // "" for a default limit, which applies to every key
	Scope      Scope
	ScopeValue string // empty for global
	Metric     Metric
	Max        int64  // the limit, > 0
	Window     Window // NoWindow for concurrent limits
	Enabled    bool
	// Subject is the key a default limit counts for: each key has its own
	// counters of it. The Tracker fills it when it applies a default limit
	// to a key ("" for a key's own limit, and for a default as defined).
	Subject string
}

// IsDefault reports whether l is a default limit (no key of its own).
func (l *Limit) IsDefault() bool { return l.Key == "" }

// Owner is the key whose usage l counts: its key, or for a default limit
// the key it was applied to.
func (l *Limit) Owner() string {
	if l.Key != "" {
		return l.Key
	}
	return l.Subject
}

// overrides reports whether own, a key's own enabled limit, takes the
// place of default d for that key: the same scope, value, metric and window.
func (own *Limit) overrides(d *Limit) bool {
	return own.Enabled && own.Scope == d.Scope && own.ScopeValue == d.ScopeValue &&
		own.Metric == d.Metric && own.Window.String() == d.Window.String()
}

// Effective is what applies to key out of ls, a key's own limits and the
// default limits in any order: its own limits, and each default that no
// enabled limit of its own overrides, with Subject set to key.
func Effective(ls []Limit, key string) []Limit {
	out := make([]Limit, 0, len(ls))
	for i := range ls {
		if ls[i].Key == key {
			out = append(out, ls[i])
		}
	}
	own := len(out)
	for i := range ls {
		d := &ls[i]
		if !d.IsDefault() || key == "" {
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
	l.ScopeValue = strings.TrimSpace(l.ScopeValue)
	if err := checkNames("id", l.ID, "key", l.Key, "value", l.ScopeValue); err != nil {
		return l, err
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
	if l.Scope == ScopeModel {
		if strings.ContainsAny(l.ScopeValue, "[]") {
			return l, invalid("value", l.ScopeValue, "a model name or pattern takes no brackets (patterns use * and ?)")
		}
		l.ScopeValue = NormalizeModel(l.ScopeValue)
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
	if l.Window.Kind > Monthly {
		return l, invalid("window", int(l.Window.Kind), "unknown window kind")
	}
	if l.Window.Kind == Fixed && (l.Window.ResetTime != 0 || l.Window.Zone != nil) {
		return l, invalid("reset_time", l.Window.ResetTime, "applies to calendar windows only")
	}
	if l.Window.Calendar() && (l.Window.ResetTime < 0 || l.Window.ResetTime >= 24*60) {
		return l, invalid("reset_time", l.Window.ResetTime, "must be minutes 0..1439 after midnight")
	}
	if l.Window.Calendar() && l.Window.Zone == nil {
		l.Window.Zone = time.UTC
	}
	return l, nil
}

// Applies reports whether the limit governs a request to provider and model.
// It does not look at Enabled.
//
// model must be normalised (NormalizeModel): a model-scope limit's value is
// a normalised name or a pattern over normalised names.
func (l *Limit) Applies(key, provider, model string) bool {
	if l.Owner() != key {
		return false
	}
	switch l.Scope {
	case ScopeProvider:
		return l.ScopeValue == provider
	case ScopeModel:
		return MatchModel(l.ScopeValue, model)
	}
	return true
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
	return l.Key == o.Key && l.Scope == o.Scope && l.ScopeValue == o.ScopeValue &&
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

// Less orders limits as the contract's listings do: key, scope, scope value,
// metric, window length, id.
func (l *Limit) Less(o *Limit) bool {
	if l.Key != o.Key {
		return l.Key < o.Key
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
	return l.ID < o.ID
}
