// Package wire holds what every API kind's usage parser shares: the Tokens a
// response reports, already mapped to the tracker's counting rules, and the
// JSON token count that tells an absent count from 0.
//
// Each kind's package (and package proxy) maps its own usage shape to Tokens;
// nothing here knows a provider.
package wire

import (
	"errors"
	"strconv"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Tokens is the usage a response reports, already mapped to the tracker's
// counting rules (docs: counting): Input counts every prompt token, cached or
// not, with CacheRead and CacheWrite a breakdown inside it; Output counts
// generated tokens other than reasoning; Reasoning is separate.
type Tokens struct {
	// Model is the model name the response reports (often a dated name such
	// as "gpt-4.1-2025-04-14"); informational only, limits match the
	// request's model.
	Model      string
	Input      int64
	Output     int64
	Reasoning  int64
	CacheRead  int64
	CacheWrite int64
	// CacheWrite1h is the part of CacheWrite written to a 1-hour cache
	// (Anthropic), priced apart.
	CacheWrite1h int64
	// ServiceTier is the tier the response says it was served at ("flex",
	// "priority", "default"), "" when it says none; prices may depend on it.
	ServiceTier string
}

// Billable is Input + Output + Reasoning: every token once.
func (t Tokens) Billable() int64 { return t.Input + t.Output + t.Reasoning }

// Fill copies the token counts and the service tier into u (a tier
// the response does not name keeps u's: the request's); it leaves u's
// model and every other field alone.
func (t Tokens) Fill(u *budget.Usage) {
	u.Input, u.Output, u.Reasoning = t.Input, t.Output, t.Reasoning
	u.CacheRead, u.CacheWrite, u.CacheWrite1h = t.CacheRead, t.CacheWrite, t.CacheWrite1h
	if t.ServiceTier != "" {
		u.ServiceTier = t.ServiceTier
	}
}

// ErrCount reports a token count that is not an integer from 0 to 2^53-1.
var ErrCount = errors.New("token count is not an integer from 0 to 2^53-1")

// Count is one optional token count of a usage object. It decodes without
// allocating and tells an absent or null count (OK false) from 0.
type Count struct {
	V  int64
	OK bool
}

// UnmarshalJSON accepts null (absent) or an integer from 0 to 2^53-1.
func (c *Count) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*c = Count{}
		return nil
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || v < 0 || v > budget.MaxTokens {
		return ErrCount
	}
	*c = Count{v, true}
	return nil
}
