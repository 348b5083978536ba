package budget

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // every machine must know every zone (contract section 2)
)

// WindowKind tells fixed windows from calendar ones.
type WindowKind uint8

const (
	// NoWindow is the window of a concurrent limit: it has none.
	NoWindow WindowKind = iota
	Fixed
	Daily
	Weekly
	Monthly
	// Once never resets: one window from Anchor (the limit's creation) on,
	// a prepaid balance topped up by raises.
	Once
)

// Window is the period a limit's usage is counted over. The zero Window is
// NoWindow. Windows are values and safe for concurrent use.
//
// Fixed windows are aligned to the Unix epoch: start = floor(t/Length)*Length.
// Calendar windows start at ResetTime (minutes after local midnight) in Zone:
// daily every day, weekly on Mondays, monthly on the 1st.
type Window struct {
	Kind      WindowKind
	Length    time.Duration // Fixed only: a whole number of seconds, >= 1s
	ResetTime int           // calendar only: minutes after midnight, 0..1439
	Zone      *time.Location
	Anchor    time.Time // Once only: where its one window starts (the limit's creation)
}

// Forever is the largest instant Unix nanoseconds hold: the end of a Once
// window (it never resets), and the ExpiresAt of a hold that counts until
// its reservation is settled (the window holds of an ExpireCharge
// reservation), which every "expires after now" comparison keeps.
var Forever = time.Unix(0, math.MaxInt64).UTC()

// beforeAll is the start of the window before a Once window's anchor,
// where events older than the limit fall: the smallest instant Unix
// nanoseconds hold.
var beforeAll = time.Unix(0, math.MinInt64).UTC()

// ParseWindow parses "1m", "1h", "1.5h" (any Go duration of whole seconds, at
// least 1s) or "daily", "weekly", "monthly". resetTime ("HH:MM") and tz (an
// IANA zone) apply to calendar windows only; empty means 00:00 and UTC.
func ParseWindow(s, resetTime, tz string) (Window, error) {
	s = strings.TrimSpace(s)
	var w Window
	switch strings.ToLower(s) {
	case "daily":
		w.Kind = Daily
	case "weekly":
		w.Kind = Weekly
	case "monthly":
		w.Kind = Monthly
	case "once":
		if resetTime != "" {
			return w, invalid("reset_time", resetTime, "applies to calendar windows only")
		}
		if tz != "" {
			return w, invalid("timezone", tz, "applies to calendar windows only")
		}
		return Window{Kind: Once}, nil
	case "":
		return w, invalid("window", s, "is required")
	default:
		d, err := time.ParseDuration(s)
		if err != nil {
			return w, invalid("window", s, "want a duration such as 1m, 1h, 5h or daily, weekly, monthly, once")
		}
		if d < time.Second || d%time.Second != 0 {
			return w, invalid("window", s, "must be a whole number of seconds, at least 1s")
		}
		if resetTime != "" {
			return w, invalid("reset_time", resetTime, "applies to calendar windows only")
		}
		if tz != "" {
			return w, invalid("timezone", tz, "applies to calendar windows only")
		}
		return Window{Kind: Fixed, Length: d}, nil
	}
	rt, err := ParseResetTime(resetTime)
	if err != nil {
		return Window{}, err
	}
	loc, err := LoadZone(tz)
	if err != nil {
		return Window{}, err
	}
	w.ResetTime, w.Zone = rt, loc
	return w, nil
}

// ParseResetTime parses "HH:MM" into minutes after midnight; "" is 0.
func ParseResetTime(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	h, m, ok := strings.Cut(s, ":")
	if !ok || !twoDigits(h) || !twoDigits(m) {
		return 0, invalid("reset_time", s, "want HH:MM between 00:00 and 23:59")
	}
	hh, _ := strconv.Atoi(h)
	mm, _ := strconv.Atoi(m)
	if hh > 23 || mm > 59 {
		return 0, invalid("reset_time", s, "want HH:MM between 00:00 and 23:59")
	}
	return hh*60 + mm, nil
}

// twoDigits reports whether s is exactly two ASCII digits: strconv.Atoi alone
// would take "+9" or "-0".
func twoDigits(s string) bool {
	return len(s) == 2 && '0' <= s[0] && s[0] <= '9' && '0' <= s[1] && s[1] <= '9'
}

// LoadZone loads an IANA zone; "" is UTC. "Local" is refused: a limit must
// mean the same thing on every machine.
func LoadZone(tz string) (*time.Location, error) {
	if tz == "" || tz == "UTC" {
		return time.UTC, nil
	}
	if tz == "Local" {
		return nil, invalid("timezone", tz, "Local differs between machines; name an IANA zone")
	}
	if loc, ok := zones.Load(tz); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, invalid("timezone", tz, "unknown IANA time zone")
	}
	zones.Store(tz, loc)
	return loc, nil
}

// zones are the zones loaded so far, by name: a Location is immutable
// once loaded, and each holds its transitions (kilobytes), which every
// limit read from the store would otherwise hold a copy of. Bounded by the
// zone database.
var zones sync.Map

// String is the window's canonical name: "daily", "weekly", "monthly", or the
// fixed length in short Go form ("1h", "90m" prints "1h30m", "1m30s").
// It is part of a limit's identity, so 60m and 1h are the same window.
func (w Window) String() string {
	switch w.Kind {
	case Fixed:
		s := w.Length.String()
		if strings.HasSuffix(s, "m0s") {
			s = s[:len(s)-2]
		}
		if strings.HasSuffix(s, "h0m") {
			s = s[:len(s)-2]
		}
		return s
	case Daily:
		return "daily"
	case Weekly:
		return "weekly"
	case Monthly:
		return "monthly"
	case Once:
		return "once"
	}
	return ""
}

// ResetTimeString is "HH:MM" for calendar windows and "" otherwise.
func (w Window) ResetTimeString() string {
	if !w.Calendar() {
		return ""
	}
	return fmt.Sprintf("%02d:%02d", w.ResetTime/60, w.ResetTime%60)
}

// ZoneName is the IANA zone of a calendar window and "" otherwise.
func (w Window) ZoneName() string {
	if !w.Calendar() {
		return ""
	}
	if w.Zone == nil {
		return "UTC"
	}
	return w.Zone.String()
}

// Calendar reports whether w is daily, weekly or monthly.
func (w Window) Calendar() bool { return w.Kind >= Daily && w.Kind <= Monthly }

// Resets reports whether w has windows that end: every window kind but
// Once (and NoWindow, which has none).
func (w Window) Resets() bool { return w.Kind != Once && w.Kind != NoWindow }

// Nominal is a length used only for ordering limits: the real length of a
// calendar window varies with DST and month lengths.
func (w Window) Nominal() time.Duration {
	switch w.Kind {
	case Fixed:
		return w.Length
	case Daily:
		return 24 * time.Hour
	case Weekly:
		return 7 * 24 * time.Hour
	case Monthly:
		return 31 * 24 * time.Hour
	case Once:
		return math.MaxInt64
	}
	return 0
}

// Bounds returns the window holding t: start <= t < end. An instant exactly
// on a boundary belongs to the new window. For NoWindow both are zero. A
// Once window is [Anchor, Forever); instants before its anchor fall in
// one window before it, which its limit does not cover (Limit.Covers).
func (w Window) Bounds(t time.Time) (start, end time.Time) {
	switch w.Kind {
	case Once:
		if t.Before(w.Anchor) {
			return beforeAll, w.Anchor.UTC()
		}
		return w.Anchor.UTC(), Forever
	case Fixed:
		if w.Length%time.Second != 0 || w.Length < time.Second {
			// Not a valid fixed window; kept for callers that build one
			// by hand. UnixNano is only defined for years 1678 to 2262.
			n := int64(w.Length)
			u := t.UnixNano()
			s := u / n * n
			if s > u { // floor for instants before 1970
				s -= n
			}
			return time.Unix(0, s).UTC(), time.Unix(0, s+n).UTC()
		}
		// In whole seconds, so every representable year works.
		n := int64(w.Length / time.Second)
		u := t.Unix() // floors, also before 1970
		s := u / n * n
		if s > u { // floor for instants before 1970
			s -= n
		}
		return time.Unix(s, 0).UTC(), time.Unix(s+n, 0).UTC()
	case Daily, Weekly, Monthly:
		loc := w.Zone
		if loc == nil {
			loc = time.UTC
		}
		y, m, d := t.In(loc).Date()
		switch w.Kind {
		case Weekly:
			wd := int(time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday()+6) % 7 // Monday = 0
			// Normalise: the Monday may lie in the previous month or
			// year, and resetOn compares the date it is given.
			y, m, d = time.Date(y, m, d-wd, 12, 0, 0, 0, time.UTC).Date()
		case Monthly:
			d = 1
		}
		start = w.resetOn(y, m, d, loc)
		if start.After(t) {
			y, m, d = w.step(y, m, d, -1)
			start = w.resetOn(y, m, d, loc)
		}
		ny, nm, nd := w.step(y, m, d, 1)
		return start.UTC(), w.resetOn(ny, nm, nd, loc).UTC()
	}
	return time.Time{}, time.Time{}
}

// step moves a calendar date by n periods of w, normalised.
func (w Window) step(y int, m time.Month, d, n int) (int, time.Month, int) {
	var t time.Time
	switch w.Kind {
	case Daily:
		t = time.Date(y, m, d+n, 12, 0, 0, 0, time.UTC)
	case Weekly:
		t = time.Date(y, m, d+7*n, 12, 0, 0, 0, time.UTC)
	default:
		t = time.Date(y, m+time.Month(n), 1, 12, 0, 0, 0, time.UTC)
	}
	return t.Date()
}

// resetOn is the instant the wall clock in loc shows the reset time on the
// given date. In a spring-forward gap it is the first instant after the gap;
// in a fall-back overlap, the first occurrence.
func (w Window) resetOn(y int, m time.Month, d int, loc *time.Location) time.Time {
	hh, mm := w.ResetTime/60, w.ResetTime%60
	wall := time.Date(y, m, d, hh, mm, 0, 0, time.UTC).Unix() // the wall clock read as UTC
	var best time.Time
	found := false
	// Zone offsets a day either side cover any single transition near the date.
	for _, probe := range []int64{wall - 86400, wall, wall + 86400} {
		_, off := time.Unix(probe, 0).In(loc).Zone()
		c := time.Unix(wall-int64(off), 0).In(loc)
		if c.Year() == y && c.Month() == m && c.Day() == d && c.Hour() == hh && c.Minute() == mm {
			if !found || c.Before(best) {
				best, found = c, true
			}
		}
	}
	if found {
		return best
	}
	// The wall time does not exist: it falls in a gap. Read it with the
	// offset in force before the gap; that instant lies after the transition,
	// so the zone period it belongs to starts at the end of the gap.
	_, off := time.Unix(wall-86400, 0).In(loc).Zone()
	c := time.Unix(wall-int64(off), 0).In(loc)
	zs, _ := c.ZoneBounds()
	return zs
}
