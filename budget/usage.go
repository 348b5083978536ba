package budget

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// MaxTokens is the largest token count accepted: 2^53-1, the largest integer
// a JSON number carries exactly.
const MaxTokens = 1<<53 - 1

// Usage is one request's usage event (contract section 1).
//
// Input counts every prompt token, cached or not; CacheRead and CacheWrite are
// a breakdown inside it. Output counts generated tokens other than reasoning;
// Reasoning is separate. Billable tokens are Input + Output + Reasoning.
type Usage struct {
	RequestID  string    `json:"request_id"`
	Key        string    `json:"key"`
	Provider   string    `json:"provider"`
	Model      string    `json:"model"`
	Input      int64     `json:"input"`
	Output     int64     `json:"output"`
	Reasoning  int64     `json:"reasoning"`
	CacheRead  int64     `json:"cache_read"`
	CacheWrite int64     `json:"cache_write"`
	At         time.Time `json:"at"`
	// Cost is what the event cost in micro-dollars at the price in force
	// at At. The Tracker fills it when it writes the event (a price added
	// later never re-prices it); Unpriced says no price matched, so it
	// counts 0 against usd limits.
	Cost     int64 `json:"cost"`
	Unpriced bool  `json:"-"`
	// CostKnown keeps Cost as given instead of pricing the event when it is
	// written (an import of exported history carries its cost); with
	// NoPrice, the event is kept as one no price matched. Events sets both
	// as stored.
	CostKnown bool `json:"-"`
	NoPrice   bool `json:"-"`
	// Placed says Team and Org are final as given, even when empty: an
	// event exported from a history, charged to no team when it was
	// written, is not placed again by its key's team at import. Events
	// sets it.
	Placed bool `json:"-"`
	// User is the end user the request was for ("" when none is known).
	User string `json:"user,omitempty"`
	// Team and Org are what the event is charged to beyond its key. The
	// Tracker fills them when it writes the event: from the reservation a
	// commit settles, else from the key's placement at that moment. An
	// event that already carries either (an import of exported history)
	// keeps both as given. What was charged stays where it was charged when
	// a key later moves.
	Team string `json:"team,omitempty"`
	Org  string `json:"org,omitempty"`
	// CacheWrite1h is the part of CacheWrite written to a 1-hour cache
	// (Anthropic's cache_creation.ephemeral_1h_input_tokens), priced at the
	// price's 1-hour cache-write price; the rest of CacheWrite is 5-minute
	// writes. Like ServiceTier, only the cost it yields is stored.
	CacheWrite1h int64 `json:"cache_write_1h,omitempty"`
	// ServiceTier is the tier the provider says it served the request at
	// ("flex", "priority", "batch"; "" standard, see NormalizeTier): the
	// event is priced at that tier's price and its prompt size's row
	// (Prices.For). Only the cost it yields is stored.
	ServiceTier string `json:"service_tier,omitempty"`
	// Tags are what the request was for ("project=atlas,feature=search"):
	// tag limits count by them, reports group by them (see Tags).
	Tags Tags `json:"tags,omitempty"`
}

// Who is whose event u is.
func (u *Usage) Who() Who {
	return Who{Key: u.Key, Team: u.Team, Org: u.Org, User: u.User, Tags: u.Tags}
}

// Billable is the number of tokens the event costs: every prompt token and
// every generated token, each once.
func (u Usage) Billable() int64 { return u.Input + u.Output + u.Reasoning }

// LateSuffix ends the request id of a late commit's event: what a commit
// added to a reservation recovery had already charged (see Settlement). It
// is the excess of a request the charge counted, so it counts tokens and
// dollars but no request; the stores' history sums agree.
const LateSuffix = ":late"

// isLate reports whether requestID is a late commit's (ends in LateSuffix).
func isLate(requestID string) bool { return strings.HasSuffix(requestID, LateSuffix) }

// Amount is the event's contribution to a limit of metric m.
func (u Usage) Amount(m Metric) int64 {
	switch m {
	case MetricTokens:
		return u.Billable()
	case MetricInput:
		return u.Input
	case MetricOutput:
		return u.Output + u.Reasoning
	case MetricRequests:
		if isLate(u.RequestID) {
			return 0 // the excess of a request already counted (see LateSuffix)
		}
		return 1
	case MetricUSD:
		return u.Cost
	}
	return 0
}

// Normalize trims names, fills a missing request id and returns the event
// validated. at is used when u.At is zero.
func (u Usage) Normalize(at time.Time) (Usage, error) {
	u.Key = strings.TrimSpace(u.Key)
	u.Provider = strings.TrimSpace(u.Provider)
	u.Model = strings.TrimSpace(u.Model)
	u.RequestID = strings.TrimSpace(u.RequestID)
	u.User = strings.TrimSpace(u.User)
	u.Team = strings.TrimSpace(u.Team)
	u.Org = strings.TrimSpace(u.Org)
	u.ServiceTier = NormalizeTier(u.ServiceTier)
	var err error
	if u.Tags, err = NormalizeTags("tags", u.Tags); err != nil {
		return u, err
	}
	if u.NoPrice && !u.CostKnown {
		return u, invalid("cost", "null", "no price is a known cost: set CostKnown too")
	}
	if u.NoPrice && u.Cost != 0 {
		return u, invalid("cost", u.Cost, "an event no price matched cost nothing")
	}
	if u.Key == "" {
		return u, invalid("key", u.Key, "must not be empty")
	}
	if err := checkNames("key", u.Key, "provider", u.Provider, "model", u.Model, "request_id", u.RequestID,
		"user", u.User, "team", u.Team, "org", u.Org, "service_tier", u.ServiceTier); err != nil {
		return u, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"input", u.Input}, {"output", u.Output}, {"reasoning", u.Reasoning}, {"cache_read", u.CacheRead}, {"cache_write", u.CacheWrite}, {"cache_write_1h", u.CacheWrite1h}} {
		if err := CheckTokens(f.name, f.v); err != nil {
			return u, err
		}
	}
	if u.CacheWrite1h > u.CacheWrite {
		return u, invalid("cache_write_1h", u.CacheWrite1h, "must not exceed cache_write "+strconv.FormatInt(u.CacheWrite, 10))
	}
	if u.CacheRead+u.CacheWrite > u.Input {
		return u, invalid("cache_read+cache_write", u.CacheRead+u.CacheWrite, "must not exceed input "+strconv.FormatInt(u.Input, 10))
	}
	if u.Billable() > MaxTokens {
		return u, invalid("input+output+reasoning", u.Billable(), "overflows 2^53-1")
	}
	if u.CostKnown {
		if err := CheckTokens("cost", u.Cost); err != nil {
			return u, err
		}
	}
	if u.At.IsZero() {
		u.At = at
	}
	if err := CheckInstant("at", u.At); err != nil {
		return u, err
	}
	if u.RequestID == "" {
		u.RequestID = NewID("req_")
	}
	return u, nil
}

// CheckTokens validates one token count: an integer from 0 to 2^53-1.
func CheckTokens(field string, v int64) error {
	if v < 0 || v > MaxTokens {
		return invalid(field, v, "must be between 0 and 2^53-1")
	}
	return nil
}

// NewID returns prefix followed by 16 random hex characters.
func NewID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return prefix + hex.EncodeToString(b[:])
}

// newReservationID is a reservation id that sorts by its instant at (then
// at random), so the store's index receives new ids at its end instead of
// all over it.
func newReservationID(at time.Time) string {
	var b [14]byte
	binary.BigEndian.PutUint64(b[:8], uint64(at.UnixNano()))
	_, _ = rand.Read(b[8:])
	return "rsv_" + hex.EncodeToString(b[:])
}

// CheckInstant refuses instants that Unix nanoseconds cannot hold (before
// 1678 or after 2261): stored, they would wrap around.
func CheckInstant(field string, t time.Time) error {
	if y := t.UTC().Year(); y < 1678 || y > 2261 {
		return invalid(field, t.Format(time.RFC3339), "must be between the years 1678 and 2261")
	}
	return nil
}

// HistoryStart and HistoryEnd bound the instants the history can hold (see
// CheckInstant): the defaults of a range's since, and of an export's until
// (the last nanosecond of 2261).
var (
	HistoryStart = time.Date(1678, 1, 1, 0, 0, 0, 0, time.UTC)
	HistoryEnd   = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Nanosecond)
)

// ParseInstant parses an RFC3339 instant or a date (YYYY-MM-DD), which is
// that day's UTC midnight, as the CLI's flags and the admin API's query
// parameters take them. field names it in the error.
func ParseInstant(field, s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, CheckInstant(field, t)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalid(field, s, "want an RFC3339 time such as 2026-03-02T09:00:00Z, or a date such as 2026-03-02 (UTC)")
	}
	return t, CheckInstant(field, t)
}

// ParseRange parses a range's since and until with ParseInstant: a blank
// since is HistoryStart, a blank until is defaultUntil. sinceName is how
// the caller's user spells since ("--since" on the command line, "since"
// in a query), for the error when until is not after it.
func ParseRange(since, until string, defaultUntil time.Time, sinceName string) (s, u time.Time, err error) {
	s, u = HistoryStart, defaultUntil
	if strings.TrimSpace(since) != "" {
		if s, err = ParseInstant("since", since); err != nil {
			return s, u, err
		}
	}
	if strings.TrimSpace(until) != "" {
		if u, err = ParseInstant("until", until); err != nil {
			return s, u, err
		}
	}
	if !s.Before(u) {
		return s, u, invalid("until", u.UTC().Format(time.RFC3339Nano), "must be after "+sinceName+" "+s.UTC().Format(time.RFC3339Nano))
	}
	return s, u, nil
}
