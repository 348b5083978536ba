package budget

import "time"

// ParkKind says why a provider was parked (contract section 6).
type ParkKind string

const (
	RateLimited ParkKind = "rate_limited" // upstream 429
	Overloaded  ParkKind = "overloaded"   // upstream 529, or repeated 503
	AuthMissing ParkKind = "auth_missing" // upstream 401/403: our credential is wrong
)

// ProviderState is the persisted parking state of one upstream provider.
type ProviderState struct {
	Provider      string
	Kind          ParkKind
	ParkedAt      time.Time
	RetryAfter    time.Duration
	ResumeAt      time.Time
	Affected      []string // informational labels of the requests that saw it
	ProbeFailures int
}

// Refusing reports whether the provider refuses work at now: it is parked
// and now is before its resume-at.
func (p *ProviderState) Refusing(now time.Time) bool { return now.Before(p.ResumeAt) }
