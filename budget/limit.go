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
	}
	return "", invalid("metric", s, "want tokens, input, output, requests or concurrent")
}

// Limit is one budget rule (contract section 3). Its identity is (Key,
// Scope, ScopeValue, Metric, Window); ID addresses it.
type Limit struct {
	ID         string
	Key        string
	Scope      Scope
	ScopeValue string // empty for global
	Metric     Metric
	Max        int64  // the limit, > 0
	Window     Window // NoWindow for concurrent limits
	Enabled    bool
}

// Validate normalises names and checks every field.
func (l Limit) Validate() (Limit, error) {
	l.ID = strings.TrimSpace(l.ID)
	l.Key = strings.TrimSpace(l.Key)
	l.ScopeValue = strings.TrimSpace(l.ScopeValue)
	if l.Key == "" {
		return l, invalid("key", l.Key, "must not be empty")
	}
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
	if l.Key != key {
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
