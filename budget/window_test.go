package budget_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// instant parses an RFC 3339 time (with optional fractional seconds) or
// panics: test tables are written by hand.
func instant(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// mustWindow parses a window or fails the test.
func mustWindow(t *testing.T, s, resetTime, tz string) budget.Window {
	t.Helper()
	w, err := budget.ParseWindow(s, resetTime, tz)
	if err != nil {
		t.Fatalf("ParseWindow(%q, %q, %q): %v", s, resetTime, tz, err)
	}
	return w
}

// wantInvalid checks that err wraps budget.ErrInvalid and names the field and
// the value, as the CLI prints it on stderr.
func wantInvalid(t *testing.T, call string, err error, field, value string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: got nil error; want ErrInvalid naming %s %q", call, field, value)
		return
	}
	if !errors.Is(err, budget.ErrInvalid) {
		t.Errorf("%s: got error %v; want it to wrap ErrInvalid", call, err)
	}
	if msg := err.Error(); !strings.Contains(msg, field+" ") || !strings.Contains(msg, `"`+value+`"`) {
		t.Errorf("%s: got error %q; want it to name field %s and value %q", call, msg, field, value)
	}
}

func TestParseWindowFixed(t *testing.T) {
	tests := []struct {
		in     string
		length time.Duration
		name   string // canonical String()
	}{
		{"1s", time.Second, "1s"},
		{"59s", 59 * time.Second, "59s"},
		{"1m", time.Minute, "1m"},
		{"60s", time.Minute, "1m"},
		{"90s", 90 * time.Second, "1m30s"},
		{"10m", 10 * time.Minute, "10m"},
		{"1h", time.Hour, "1h"},
		{"60m", time.Hour, "1h"},
		{"3600s", time.Hour, "1h"},
		{"1h0m0s", time.Hour, "1h"},
		{"1.5h", 90 * time.Minute, "1h30m"},
		{"90m", 90 * time.Minute, "1h30m"},
		{"5h", 5 * time.Hour, "5h"},
		{"300m", 5 * time.Hour, "5h"},
		{"1h0m30s", time.Hour + 30*time.Second, "1h0m30s"},
		{"10h", 10 * time.Hour, "10h"},
		{"24h", 24 * time.Hour, "24h"},
		{"168h", 168 * time.Hour, "168h"},
		{"1000ms", time.Second, "1s"},
		{"0.5m", 30 * time.Second, "30s"},
		{" 1h ", time.Hour, "1h"},
	}
	for _, tt := range tests {
		w, err := budget.ParseWindow(tt.in, "", "")
		if err != nil {
			t.Errorf("ParseWindow(%q): %v", tt.in, err)
			continue
		}
		if w.Kind != budget.Fixed || w.Length != tt.length {
			t.Errorf("ParseWindow(%q) = kind %d length %v; want kind %d length %v", tt.in, w.Kind, w.Length, budget.Fixed, tt.length)
		}
		if got := w.String(); got != tt.name {
			t.Errorf("ParseWindow(%q).String() = %q; want %q", tt.in, got, tt.name)
		}
		if got := w.ResetTimeString(); got != "" {
			t.Errorf("ParseWindow(%q).ResetTimeString() = %q; want \"\"", tt.in, got)
		}
		if got := w.ZoneName(); got != "" {
			t.Errorf("ParseWindow(%q).ZoneName() = %q; want \"\"", tt.in, got)
		}
		if w.Calendar() {
			t.Errorf("ParseWindow(%q).Calendar() = true; want false", tt.in)
		}
		if got := w.Nominal(); got != tt.length {
			t.Errorf("ParseWindow(%q).Nominal() = %v; want %v", tt.in, got, tt.length)
		}
		// The canonical name parses back to the same window.
		if w2, err := budget.ParseWindow(tt.name, "", ""); err != nil || w2 != w {
			t.Errorf("ParseWindow(%q) = %+v, %v; want %+v (round trip of %q)", tt.name, w2, err, w, tt.in)
		}
	}
}

func TestWindowSameIdentity(t *testing.T) {
	// 60m and 1h are the same window: equal values, equal names.
	groups := [][]string{
		{"1h", "60m", "3600s", "1h0m0s", "0.5h30m"},
		{"1.5h", "90m", "1h30m", "5400s"},
		{"1m", "60s", "60000ms"},
	}
	for _, g := range groups {
		first := mustWindow(t, g[0], "", "")
		for _, s := range g[1:] {
			w := mustWindow(t, s, "", "")
			if w != first {
				t.Errorf("ParseWindow(%q) = %+v; want %+v as for %q", s, w, first, g[0])
			}
			if got, want := w.String(), first.String(); got != want {
				t.Errorf("ParseWindow(%q).String() = %q; want %q as for %q", s, got, want, g[0])
			}
		}
	}
}

func TestParseWindowInvalid(t *testing.T) {
	tests := []struct {
		window, resetTime, tz string
		field, value          string // the field and value the error names
	}{
		{"1500ms", "", "", "window", "1500ms"},
		{"1.5s", "", "", "window", "1.5s"},
		{"500ms", "", "", "window", "500ms"},
		{"1ns", "", "", "window", "1ns"},
		{"0s", "", "", "window", "0s"},
		{"0", "", "", "window", "0"},
		{"-1h", "", "", "window", "-1h"},
		{"-1s", "", "", "window", "-1s"},
		{"abc", "", "", "window", "abc"},
		{"1", "", "", "window", "1"},
		{"1d", "", "", "window", "1d"},
		{"hourly", "", "", "window", "hourly"},
		{"", "", "", "window", ""},
		{"   ", "", "", "window", ""},
		// --reset-time and --tz belong to calendar windows only.
		{"1h", "09:00", "", "reset_time", "09:00"},
		{"1h", "00:00", "", "reset_time", "00:00"},
		{"5h", "", "UTC", "timezone", "UTC"},
		{"1m", "", "Europe/Berlin", "timezone", "Europe/Berlin"},
		// Calendar windows with a bad reset time or zone.
		{"daily", "24:00", "", "reset_time", "24:00"},
		{"daily", "9:30", "", "reset_time", "9:30"},
		{"weekly", "09:60", "", "reset_time", "09:60"},
		{"monthly", "x", "", "reset_time", "x"},
		{"daily", "", "Local", "timezone", "Local"},
		{"weekly", "", "Nowhere/Special", "timezone", "Nowhere/Special"},
		{"monthly", "09:30", "Mars/Olympus_Mons", "timezone", "Mars/Olympus_Mons"},
	}
	for _, tt := range tests {
		w, err := budget.ParseWindow(tt.window, tt.resetTime, tt.tz)
		call := "ParseWindow(" + strings.Join([]string{tt.window, tt.resetTime, tt.tz}, ", ") + ")"
		wantInvalid(t, call, err, tt.field, tt.value)
		if err != nil && w.Kind != budget.NoWindow {
			t.Errorf("%s = kind %d with an error; want the zero Window", call, w.Kind)
		}
	}
}

func TestParseWindowCalendar(t *testing.T) {
	tests := []struct {
		window, resetTime, tz string
		kind                  budget.WindowKind
		name                  string
		reset                 int // minutes after midnight
		resetName, zone       string
		nominal               time.Duration
	}{
		{"daily", "", "", budget.Daily, "daily", 0, "00:00", "UTC", 24 * time.Hour},
		{"Daily", "", "", budget.Daily, "daily", 0, "00:00", "UTC", 24 * time.Hour},
		{" DAILY ", "", "", budget.Daily, "daily", 0, "00:00", "UTC", 24 * time.Hour},
		{"weekly", "", "", budget.Weekly, "weekly", 0, "00:00", "UTC", 7 * 24 * time.Hour},
		{"monthly", "", "", budget.Monthly, "monthly", 0, "00:00", "UTC", 31 * 24 * time.Hour},
		{"daily", "00:00", "UTC", budget.Daily, "daily", 0, "00:00", "UTC", 24 * time.Hour},
		{"daily", "09:30", "", budget.Daily, "daily", 570, "09:30", "UTC", 24 * time.Hour},
		{"daily", "09:30", "Europe/Berlin", budget.Daily, "daily", 570, "09:30", "Europe/Berlin", 24 * time.Hour},
		{"weekly", "23:59", "America/New_York", budget.Weekly, "weekly", 1439, "23:59", "America/New_York", 7 * 24 * time.Hour},
		{"monthly", "02:15", "Australia/Lord_Howe", budget.Monthly, "monthly", 135, "02:15", "Australia/Lord_Howe", 31 * 24 * time.Hour},
	}
	for _, tt := range tests {
		w, err := budget.ParseWindow(tt.window, tt.resetTime, tt.tz)
		if err != nil {
			t.Errorf("ParseWindow(%q, %q, %q): %v", tt.window, tt.resetTime, tt.tz, err)
			continue
		}
		if w.Kind != tt.kind || w.ResetTime != tt.reset || w.Length != 0 {
			t.Errorf("ParseWindow(%q, %q, %q) = kind %d reset %d length %v; want kind %d reset %d length 0",
				tt.window, tt.resetTime, tt.tz, w.Kind, w.ResetTime, w.Length, tt.kind, tt.reset)
		}
		if !w.Calendar() {
			t.Errorf("ParseWindow(%q).Calendar() = false; want true", tt.window)
		}
		if got := w.String(); got != tt.name {
			t.Errorf("ParseWindow(%q).String() = %q; want %q", tt.window, got, tt.name)
		}
		if got := w.ResetTimeString(); got != tt.resetName {
			t.Errorf("ParseWindow(%q, %q).ResetTimeString() = %q; want %q", tt.window, tt.resetTime, got, tt.resetName)
		}
		if got := w.ZoneName(); got != tt.zone {
			t.Errorf("ParseWindow(%q, %q, %q).ZoneName() = %q; want %q", tt.window, tt.resetTime, tt.tz, got, tt.zone)
		}
		if w.Zone == nil {
			t.Errorf("ParseWindow(%q, %q, %q).Zone = nil; want a location", tt.window, tt.resetTime, tt.tz)
		}
		if got := w.Nominal(); got != tt.nominal {
			t.Errorf("ParseWindow(%q).Nominal() = %v; want %v", tt.window, got, tt.nominal)
		}
	}
}

func TestNoWindow(t *testing.T) {
	var w budget.Window
	if w.Kind != budget.NoWindow {
		t.Errorf("zero Window kind = %d; want NoWindow", w.Kind)
	}
	if got := w.String(); got != "" {
		t.Errorf("zero Window String() = %q; want \"\"", got)
	}
	if got := w.Nominal(); got != 0 {
		t.Errorf("zero Window Nominal() = %v; want 0", got)
	}
	if w.Calendar() || w.ResetTimeString() != "" || w.ZoneName() != "" {
		t.Errorf("zero Window: Calendar %v, ResetTimeString %q, ZoneName %q; want false, \"\", \"\"",
			w.Calendar(), w.ResetTimeString(), w.ZoneName())
	}
	start, end := w.Bounds(instant("2026-03-02T12:00:00Z"))
	if !start.IsZero() || !end.IsZero() {
		t.Errorf("zero Window Bounds = [%v, %v); want zero times", start, end)
	}
}

func TestCalendarWindowNilZoneIsUTC(t *testing.T) {
	// A Window built by hand without a zone behaves as UTC.
	w := budget.Window{Kind: budget.Daily, ResetTime: 90}
	if got := w.ZoneName(); got != "UTC" {
		t.Errorf("ZoneName() = %q; want UTC", got)
	}
	start, end := w.Bounds(instant("2026-03-02T01:00:00Z"))
	if want := instant("2026-03-01T01:30:00Z"); !start.Equal(want) {
		t.Errorf("Bounds start = %v; want %v", start, want)
	}
	if want := instant("2026-03-02T01:30:00Z"); !end.Equal(want) {
		t.Errorf("Bounds end = %v; want %v", end, want)
	}
}

func TestParseResetTime(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"", 0, true},
		{"00:00", 0, true},
		{"00:01", 1, true},
		{"09:30", 570, true},
		{"12:00", 720, true},
		{"23:59", 1439, true},
		{"24:00", 0, false},
		{"23:60", 0, false},
		{"09:60", 0, false},
		{"9:30", 0, false},
		{"09:3", 0, false},
		{"009:30", 0, false},
		{"0930", 0, false},
		{"09:30:00", 0, false},
		{"09-30", 0, false},
		{" 09:30", 0, false},
		{"09:30 ", 0, false},
		{"x", 0, false},
		{":", 0, false},
		{"ab:cd", 0, false},
		{"+9:30", 0, false},
		{"-0:30", 0, false},
		{"09:+5", 0, false},
		{"-1:00", 0, false},
		{"９:30", 0, false}, // non-ASCII digit
	}
	for _, tt := range tests {
		got, err := budget.ParseResetTime(tt.in)
		if !tt.ok {
			wantInvalid(t, "ParseResetTime("+tt.in+")", err, "reset_time", tt.in)
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseResetTime(%q) = %d, %v; want %d, nil", tt.in, got, err, tt.want)
		}
	}
}

func TestLoadZone(t *testing.T) {
	tests := []struct {
		in, name string
	}{
		{"", "UTC"},
		{"UTC", "UTC"},
		{"America/New_York", "America/New_York"},
		{"Europe/Berlin", "Europe/Berlin"},
		{"Australia/Lord_Howe", "Australia/Lord_Howe"},
		{"Asia/Kolkata", "Asia/Kolkata"},
		{"Pacific/Chatham", "Pacific/Chatham"},
	}
	for _, tt := range tests {
		loc, err := budget.LoadZone(tt.in)
		if err != nil {
			t.Errorf("LoadZone(%q): %v", tt.in, err)
			continue
		}
		if got := loc.String(); got != tt.name {
			t.Errorf("LoadZone(%q) = %q; want %q", tt.in, got, tt.name)
		}
	}
	for _, in := range []string{"Local", "Nowhere/Special", "Mars/Olympus_Mons", "America/New York", "../etc/passwd", "+05:00"} {
		loc, err := budget.LoadZone(in)
		wantInvalid(t, "LoadZone("+in+")", err, "timezone", in)
		if loc != nil {
			t.Errorf("LoadZone(%q) = %v with an error; want nil", in, loc)
		}
	}
}

func TestFixedWindowBounds(t *testing.T) {
	tests := []struct {
		window     string
		at         string
		start, end string
	}{
		// 1m
		{"1m", "2026-03-02T12:34:56.789Z", "2026-03-02T12:34:00Z", "2026-03-02T12:35:00Z"},
		{"1m", "2026-03-02T12:34:00Z", "2026-03-02T12:34:00Z", "2026-03-02T12:35:00Z"},
		{"1m", "2026-03-02T12:34:59.999999999Z", "2026-03-02T12:34:00Z", "2026-03-02T12:35:00Z"},
		{"1m", "2026-03-02T12:35:00Z", "2026-03-02T12:35:00Z", "2026-03-02T12:36:00Z"}, // boundary: new window
		{"60s", "2026-03-02T12:35:00Z", "2026-03-02T12:35:00Z", "2026-03-02T12:36:00Z"},
		// 1h
		{"1h", "2026-03-02T12:00:00Z", "2026-03-02T12:00:00Z", "2026-03-02T13:00:00Z"},
		{"1h", "2026-03-02T12:59:59.999999999Z", "2026-03-02T12:00:00Z", "2026-03-02T13:00:00Z"},
		{"1h", "2026-03-02T13:00:00Z", "2026-03-02T13:00:00Z", "2026-03-02T14:00:00Z"},
		{"1h", "2026-12-31T23:30:00Z", "2026-12-31T23:00:00Z", "2027-01-01T00:00:00Z"},
		// An instant in another zone lands in the same window, reported in UTC.
		{"1h", "2026-03-02T17:45:00+05:30", "2026-03-02T12:00:00Z", "2026-03-02T13:00:00Z"},
		// 5h: aligned to the epoch, not to midnight (86400 / 18000 = 4.8).
		{"5h", "1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "1970-01-01T05:00:00Z"},
		{"5h", "1970-01-01T23:59:59Z", "1970-01-01T20:00:00Z", "1970-01-02T01:00:00Z"},
		{"5h", "2026-03-02T12:00:00Z", "2026-03-02T09:00:00Z", "2026-03-02T14:00:00Z"},
		{"5h", "2026-03-02T13:59:59Z", "2026-03-02T09:00:00Z", "2026-03-02T14:00:00Z"},
		{"5h", "2026-03-02T14:00:00Z", "2026-03-02T14:00:00Z", "2026-03-02T19:00:00Z"},
		{"5h", "2026-03-02T23:59:59Z", "2026-03-02T19:00:00Z", "2026-03-03T00:00:00Z"},
		// 1.5h divides a day: windows at 00:00, 01:30, 03:00, ...
		{"1.5h", "2026-03-02T00:00:00Z", "2026-03-02T00:00:00Z", "2026-03-02T01:30:00Z"},
		{"1.5h", "2026-03-02T01:29:59Z", "2026-03-02T00:00:00Z", "2026-03-02T01:30:00Z"},
		{"1.5h", "2026-03-02T01:30:00Z", "2026-03-02T01:30:00Z", "2026-03-02T03:00:00Z"},
		{"1.5h", "2026-03-02T23:00:00Z", "2026-03-02T22:30:00Z", "2026-03-03T00:00:00Z"},
		{"90m", "2026-03-02T23:00:00Z", "2026-03-02T22:30:00Z", "2026-03-03T00:00:00Z"},
		// Before 1970: floor, not truncation toward zero.
		{"1m", "1969-12-31T23:59:59Z", "1969-12-31T23:59:00Z", "1970-01-01T00:00:00Z"},
		{"1m", "1969-12-31T23:59:59.5Z", "1969-12-31T23:59:00Z", "1970-01-01T00:00:00Z"},
		{"1m", "1969-12-31T23:59:00Z", "1969-12-31T23:59:00Z", "1970-01-01T00:00:00Z"},
		{"1m", "1969-12-31T23:58:59.999999999Z", "1969-12-31T23:58:00Z", "1969-12-31T23:59:00Z"},
		{"1s", "1969-12-31T23:59:59.999999999Z", "1969-12-31T23:59:59Z", "1970-01-01T00:00:00Z"},
		{"1h", "1969-12-31T23:00:00Z", "1969-12-31T23:00:00Z", "1970-01-01T00:00:00Z"},
		{"5h", "1969-12-31T23:59:59Z", "1969-12-31T19:00:00Z", "1970-01-01T00:00:00Z"},
		{"5h", "1969-12-31T19:00:00Z", "1969-12-31T19:00:00Z", "1970-01-01T00:00:00Z"},
		{"5h", "1960-06-15T12:34:56Z", "1960-06-15T08:00:00Z", "1960-06-15T13:00:00Z"},
		{"1.5h", "1960-06-15T12:34:56Z", "1960-06-15T12:00:00Z", "1960-06-15T13:30:00Z"},
		// Far from the epoch, outside the years UnixNano can represent.
		{"5h", "1500-01-01T00:00:00Z", "1499-12-31T20:00:00Z", "1500-01-01T01:00:00Z"},
		{"1h", "1500-01-01T00:30:00Z", "1500-01-01T00:00:00Z", "1500-01-01T01:00:00Z"},
		{"5h", "3000-01-01T00:00:00Z", "3000-01-01T00:00:00Z", "3000-01-01T05:00:00Z"},
		{"1.5h", "3000-06-01T12:34:56Z", "3000-06-01T12:00:00Z", "3000-06-01T13:30:00Z"},
	}
	for _, tt := range tests {
		w := mustWindow(t, tt.window, "", "")
		start, end := w.Bounds(instant(tt.at))
		if want := instant(tt.start); !start.Equal(want) || start.Location() != time.UTC {
			t.Errorf("%s Bounds(%s) start = %v; want %v (UTC)", tt.window, tt.at, start, want)
		}
		if want := instant(tt.end); !end.Equal(want) || end.Location() != time.UTC {
			t.Errorf("%s Bounds(%s) end = %v; want %v (UTC)", tt.window, tt.at, end, want)
		}
	}
}

func TestCalendarWindowBounds(t *testing.T) {
	const (
		ny  = "America/New_York"
		ber = "Europe/Berlin"
		lh  = "Australia/Lord_Howe" // DST moves the clock by 30 minutes
	)
	tests := []struct {
		window, reset, tz string
		at                string
		start, end        string
	}{
		// Daily, UTC, midnight. The boundary instant starts the new day.
		{"daily", "", "", "2026-03-02T10:00:00Z", "2026-03-02T00:00:00Z", "2026-03-03T00:00:00Z"},
		{"daily", "", "", "2026-03-02T00:00:00Z", "2026-03-02T00:00:00Z", "2026-03-03T00:00:00Z"},
		{"daily", "", "", "2026-03-02T23:59:59.999999999Z", "2026-03-02T00:00:00Z", "2026-03-03T00:00:00Z"},
		{"daily", "00:00", "UTC", "2026-03-03T00:00:00Z", "2026-03-03T00:00:00Z", "2026-03-04T00:00:00Z"},
		{"daily", "", "", "2026-12-31T12:00:00Z", "2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z"},
		{"daily", "", "", "2024-02-28T12:00:00Z", "2024-02-28T00:00:00Z", "2024-02-29T00:00:00Z"},
		{"daily", "", "", "2024-02-29T12:00:00Z", "2024-02-29T00:00:00Z", "2024-03-01T00:00:00Z"},
		{"daily", "", "", "1969-12-31T12:00:00Z", "1969-12-31T00:00:00Z", "1970-01-01T00:00:00Z"},
		// Daily at 09:30: before the reset time the window began yesterday.
		{"daily", "09:30", "", "2026-03-02T09:29:59Z", "2026-03-01T09:30:00Z", "2026-03-02T09:30:00Z"},
		{"daily", "09:30", "", "2026-03-02T09:30:00Z", "2026-03-02T09:30:00Z", "2026-03-03T09:30:00Z"},
		{"daily", "09:30", "", "2026-03-01T00:00:00Z", "2026-02-28T09:30:00Z", "2026-03-01T09:30:00Z"},
		{"daily", "09:30", "", "2027-01-01T09:00:00Z", "2026-12-31T09:30:00Z", "2027-01-01T09:30:00Z"},
		{"daily", "23:59", "", "2026-03-02T23:58:00Z", "2026-03-01T23:59:00Z", "2026-03-02T23:59:00Z"},
		// The local date decides, not the UTC one: 2026-03-02T02:00Z is
		// still March 1st in New York.
		{"daily", "", ny, "2026-03-02T02:00:00Z", "2026-03-01T05:00:00Z", "2026-03-02T05:00:00Z"},
		{"daily", "", ny, "2026-03-02T05:00:00Z", "2026-03-02T05:00:00Z", "2026-03-03T05:00:00Z"},
		{"daily", "09:30", ber, "2026-03-02T08:29:59Z", "2026-03-01T08:30:00Z", "2026-03-02T08:30:00Z"},
		{"daily", "09:30", ber, "2026-03-02T08:30:00Z", "2026-03-02T08:30:00Z", "2026-03-03T08:30:00Z"},
		{"daily", "09:30", ber, "2026-07-02T07:30:00Z", "2026-07-02T07:30:00Z", "2026-07-03T07:30:00Z"},
		// DST in New York: 2024-03-10 has 23 hours, 2024-11-03 has 25.
		{"daily", "", ny, "2024-03-10T12:00:00Z", "2024-03-10T05:00:00Z", "2024-03-11T04:00:00Z"},
		{"daily", "", ny, "2024-11-03T12:00:00Z", "2024-11-03T04:00:00Z", "2024-11-04T05:00:00Z"},
		// A reset time in the spring-forward gap (02:00-03:00 EST->EDT) means
		// the first instant after it: 03:00 EDT, 07:00Z.
		{"daily", "02:30", ny, "2024-03-10T06:59:59Z", "2024-03-09T07:30:00Z", "2024-03-10T07:00:00Z"},
		{"daily", "02:30", ny, "2024-03-10T07:00:00Z", "2024-03-10T07:00:00Z", "2024-03-11T06:30:00Z"},
		{"daily", "02:00", ny, "2024-03-10T07:00:00Z", "2024-03-10T07:00:00Z", "2024-03-11T06:00:00Z"},
		// A reset time in the fall-back overlap (01:00-02:00 twice) means its
		// first occurrence: 01:30 EDT, 05:30Z, not 01:30 EST, 06:30Z.
		{"daily", "01:30", ny, "2024-11-03T05:29:59Z", "2024-11-02T05:30:00Z", "2024-11-03T05:30:00Z"},
		{"daily", "01:30", ny, "2024-11-03T05:30:00Z", "2024-11-03T05:30:00Z", "2024-11-04T06:30:00Z"},
		{"daily", "01:30", ny, "2024-11-03T06:30:00Z", "2024-11-03T05:30:00Z", "2024-11-04T06:30:00Z"},
		{"daily", "01:00", ny, "2024-11-03T06:00:00Z", "2024-11-03T05:00:00Z", "2024-11-04T06:00:00Z"},
		// DST in Berlin: 2024-03-31 (02:00 -> 03:00) and 2024-10-27 (03:00 -> 02:00).
		{"daily", "", ber, "2024-03-31T12:00:00Z", "2024-03-30T23:00:00Z", "2024-03-31T22:00:00Z"},
		{"daily", "", ber, "2024-10-27T12:00:00Z", "2024-10-26T22:00:00Z", "2024-10-27T23:00:00Z"},
		{"daily", "02:30", ber, "2024-03-31T00:59:59Z", "2024-03-30T01:30:00Z", "2024-03-31T01:00:00Z"},
		{"daily", "02:30", ber, "2024-03-31T01:00:00Z", "2024-03-31T01:00:00Z", "2024-04-01T00:30:00Z"},
		{"daily", "02:30", ber, "2024-10-27T01:00:00Z", "2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"},
		// Lord Howe: 02:00 -> 02:30 on 2024-10-06, 02:00 -> 01:30 on 2024-04-07.
		{"daily", "", lh, "2024-10-06T00:00:00Z", "2024-10-05T13:30:00Z", "2024-10-06T13:00:00Z"},
		{"daily", "", lh, "2024-04-07T00:00:00Z", "2024-04-06T13:00:00Z", "2024-04-07T13:30:00Z"},
		{"daily", "02:15", lh, "2024-10-05T15:29:59Z", "2024-10-04T15:45:00Z", "2024-10-05T15:30:00Z"},
		{"daily", "02:15", lh, "2024-10-05T15:30:00Z", "2024-10-05T15:30:00Z", "2024-10-06T15:15:00Z"},
		{"daily", "01:45", lh, "2024-04-06T15:00:00Z", "2024-04-06T14:45:00Z", "2024-04-07T15:15:00Z"},
		{"daily", "01:45", lh, "2024-04-06T15:15:00Z", "2024-04-06T14:45:00Z", "2024-04-07T15:15:00Z"},

		// Weekly: weeks start on Monday. 2026-03-02 is a Monday.
		{"weekly", "", "", "2026-03-02T00:00:00Z", "2026-03-02T00:00:00Z", "2026-03-09T00:00:00Z"},
		{"weekly", "", "", "2026-03-04T12:00:00Z", "2026-03-02T00:00:00Z", "2026-03-09T00:00:00Z"},
		{"weekly", "", "", "2026-03-08T23:59:59Z", "2026-03-02T00:00:00Z", "2026-03-09T00:00:00Z"},
		{"weekly", "", "", "2026-03-09T00:00:00Z", "2026-03-09T00:00:00Z", "2026-03-16T00:00:00Z"},
		// The Monday lies in the previous month or year.
		{"weekly", "", "", "2026-03-01T23:59:59Z", "2026-02-23T00:00:00Z", "2026-03-02T00:00:00Z"},
		{"weekly", "", "", "2024-03-02T10:00:00Z", "2024-02-26T00:00:00Z", "2024-03-04T00:00:00Z"},
		{"weekly", "", "", "2025-01-01T12:00:00Z", "2024-12-30T00:00:00Z", "2025-01-06T00:00:00Z"},
		{"weekly", "", "", "2026-01-04T12:00:00Z", "2025-12-29T00:00:00Z", "2026-01-05T00:00:00Z"},
		// Monday before the reset time belongs to the previous week.
		{"weekly", "09:30", "", "2026-03-02T09:29:59Z", "2026-02-23T09:30:00Z", "2026-03-02T09:30:00Z"},
		{"weekly", "09:30", "", "2026-03-02T09:30:00Z", "2026-03-02T09:30:00Z", "2026-03-09T09:30:00Z"},
		{"weekly", "09:30", "", "2026-03-03T00:00:00Z", "2026-03-02T09:30:00Z", "2026-03-09T09:30:00Z"},
		// Local Monday: 2026-03-01T23:30Z is Monday 00:30 in Berlin.
		{"weekly", "", ber, "2026-03-01T23:30:00Z", "2026-03-01T23:00:00Z", "2026-03-08T23:00:00Z"},
		{"weekly", "", ber, "2026-03-01T22:59:59Z", "2026-02-22T23:00:00Z", "2026-03-01T23:00:00Z"},
		{"weekly", "", ny, "2024-03-02T10:00:00Z", "2024-02-26T05:00:00Z", "2024-03-04T05:00:00Z"},
		{"weekly", "", ny, "2024-03-04T00:00:00Z", "2024-02-26T05:00:00Z", "2024-03-04T05:00:00Z"},
		// A week holding a DST change is 7 days minus or plus an hour.
		{"weekly", "", ny, "2024-03-10T12:00:00Z", "2024-03-04T05:00:00Z", "2024-03-11T04:00:00Z"},
		{"weekly", "", ny, "2024-11-03T12:00:00Z", "2024-10-28T04:00:00Z", "2024-11-04T05:00:00Z"},

		// Monthly: from the 1st.
		{"monthly", "", "", "2026-03-15T12:00:00Z", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"},
		{"monthly", "", "", "2026-03-01T00:00:00Z", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"},
		{"monthly", "", "", "2026-02-28T23:59:59Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"},
		{"monthly", "", "", "2025-12-31T23:59:59Z", "2025-12-01T00:00:00Z", "2026-01-01T00:00:00Z"},
		{"monthly", "", "", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"},
		{"monthly", "", "", "2024-02-29T12:00:00Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"},
		{"monthly", "", "", "2023-02-15T12:00:00Z", "2023-02-01T00:00:00Z", "2023-03-01T00:00:00Z"},
		{"monthly", "", "", "2000-02-29T00:00:00Z", "2000-02-01T00:00:00Z", "2000-03-01T00:00:00Z"},
		{"monthly", "", "", "1969-12-31T23:59:59Z", "1969-12-01T00:00:00Z", "1970-01-01T00:00:00Z"},
		// The 1st before the reset time belongs to the previous month.
		{"monthly", "09:30", "", "2026-03-01T09:00:00Z", "2026-02-01T09:30:00Z", "2026-03-01T09:30:00Z"},
		{"monthly", "09:30", "", "2026-01-01T09:29:59Z", "2025-12-01T09:30:00Z", "2026-01-01T09:30:00Z"},
		{"monthly", "09:30", "", "2026-01-01T09:30:00Z", "2026-01-01T09:30:00Z", "2026-02-01T09:30:00Z"},
		{"monthly", "", ny, "2024-03-15T12:00:00Z", "2024-03-01T05:00:00Z", "2024-04-01T04:00:00Z"},
		{"monthly", "", ny, "2026-01-01T04:59:59Z", "2025-12-01T05:00:00Z", "2026-01-01T05:00:00Z"},
		{"monthly", "", ber, "2025-12-31T23:00:00Z", "2025-12-31T23:00:00Z", "2026-01-31T23:00:00Z"},
	}
	for _, tt := range tests {
		w := mustWindow(t, tt.window, tt.reset, tt.tz)
		start, end := w.Bounds(instant(tt.at))
		if want := instant(tt.start); !start.Equal(want) || start.Location() != time.UTC {
			t.Errorf("%s %s %s Bounds(%s) start = %v; want %v (UTC)", tt.window, tt.reset, tt.tz, tt.at, start, want)
		}
		if want := instant(tt.end); !end.Equal(want) || end.Location() != time.UTC {
			t.Errorf("%s %s %s Bounds(%s) end = %v; want %v (UTC)", tt.window, tt.reset, tt.tz, tt.at, end, want)
		}
	}
}

func TestCalendarDayLength(t *testing.T) {
	tests := []struct {
		tz, reset string
		at        string // an instant inside the day
		length    time.Duration
	}{
		{"UTC", "", "2024-03-10T12:00:00Z", 24 * time.Hour},
		{"America/New_York", "", "2024-03-09T17:00:00Z", 24 * time.Hour},
		{"America/New_York", "", "2024-03-10T17:00:00Z", 23 * time.Hour},
		{"America/New_York", "", "2024-11-03T17:00:00Z", 25 * time.Hour},
		// From 09:30 the short day is the one that holds 02:00 of the 10th.
		{"America/New_York", "09:30", "2024-03-09T17:00:00Z", 23 * time.Hour},
		{"America/New_York", "09:30", "2024-03-10T12:00:00Z", 23 * time.Hour},
		{"America/New_York", "09:30", "2024-03-10T17:00:00Z", 24 * time.Hour},
		{"America/New_York", "09:30", "2024-11-03T12:00:00Z", 25 * time.Hour},
		{"America/New_York", "09:30", "2024-11-03T17:00:00Z", 24 * time.Hour},
		{"Europe/Berlin", "", "2024-03-31T12:00:00Z", 23 * time.Hour},
		{"Europe/Berlin", "", "2024-10-27T12:00:00Z", 25 * time.Hour},
		{"Europe/Berlin", "", "2024-07-01T12:00:00Z", 24 * time.Hour},
		{"Australia/Lord_Howe", "", "2024-10-06T00:00:00Z", 23*time.Hour + 30*time.Minute},
		{"Australia/Lord_Howe", "", "2024-04-07T00:00:00Z", 24*time.Hour + 30*time.Minute},
		{"Asia/Kolkata", "", "2024-03-10T12:00:00Z", 24 * time.Hour},
	}
	for _, tt := range tests {
		w := mustWindow(t, "daily", tt.reset, tt.tz)
		start, end := w.Bounds(instant(tt.at))
		if got := end.Sub(start); got != tt.length {
			t.Errorf("daily %s %s Bounds(%s) = [%v, %v), %v long; want %v", tt.reset, tt.tz, tt.at, start, end, got, tt.length)
		}
	}
}

// TestCalendarWindowsTile walks a year and a half of instants through many
// calendar windows and checks the windows tile time: each holds its
// instant, starts at the reset time on the right day, and the windows either
// side meet it exactly.
func TestCalendarWindowsTile(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata", "America/Sao_Paulo", "Pacific/Apia"}
	resets := []string{"00:00", "00:30", "01:30", "02:15", "02:30", "09:30", "23:59"}
	first, last := instant("2023-12-20T00:00:00Z"), instant("2025-03-10T00:00:00Z")
	const step = 13*time.Hour + 17*time.Minute + 7*time.Second // drifts through every hour of the day
	for _, kind := range []string{"daily", "weekly", "monthly"} {
		for _, tz := range zones {
			for _, reset := range resets {
				w := mustWindow(t, kind, reset, tz)
				loc := w.Zone
				rt := w.ResetTime
				failed := false
				for at := first; at.Before(last) && !failed; at = at.Add(step) {
					start, end := w.Bounds(at)
					fail := func(format string, args ...any) {
						t.Errorf("%s %s %s Bounds(%v) = [%v, %v): "+format,
							append([]any{kind, reset, tz, at.Format(time.RFC3339), start.Format(time.RFC3339), end.Format(time.RFC3339)}, args...)...)
						failed = true
					}
					if at.Before(start) || !at.Before(end) {
						fail("does not hold the instant")
						continue
					}
					if s2, e2 := w.Bounds(start); !s2.Equal(start) || !e2.Equal(end) {
						fail("Bounds(start) = [%v, %v); want the same window", s2, e2)
					}
					if s2, _ := w.Bounds(end); !s2.Equal(end) {
						fail("Bounds(end) starts at %v; want %v", s2, end)
					}
					if _, e2 := w.Bounds(start.Add(-time.Nanosecond)); !e2.Equal(start) {
						fail("Bounds(start-1ns) ends at %v; want %v", e2, start)
					}
					// The start is the reset time on the window's first
					// day, or the end of a gap hiding it (then the clock
					// just before shows an earlier time of day).
					ls := start.In(loc)
					if min := ls.Hour()*60 + ls.Minute(); min != rt || ls.Second() != 0 {
						before := start.Add(-time.Nanosecond).In(loc)
						_, offBefore := before.Zone()
						_, offAt := ls.Zone()
						if offAt <= offBefore || min < rt || before.Hour()*60+before.Minute() >= rt {
							fail("starts at %s local; want %s or the end of a DST gap hiding it", ls.Format("15:04:05"), reset)
						}
					}
					switch kind {
					case "daily":
						if d := end.Sub(start); d < 22*time.Hour || d > 26*time.Hour {
							fail("is %v long", d)
						}
					case "weekly":
						if ls.Weekday() != time.Monday && !gapDay(start, loc) {
							fail("starts on a %v; want Monday", ls.Weekday())
						}
						if d := end.Sub(start); d < 166*time.Hour || d > 170*time.Hour {
							fail("is %v long", d)
						}
					case "monthly":
						if ls.Day() != 1 && !gapDay(start, loc) {
							fail("starts on day %d; want the 1st", ls.Day())
						}
						if d := end.Sub(start); d < 28*24*time.Hour-2*time.Hour || d > 31*24*time.Hour+2*time.Hour {
							fail("is %v long", d)
						}
					}
				}
			}
		}
	}
}

// gapDay reports whether a DST gap ends at t, moving it past midnight.
func gapDay(t time.Time, loc *time.Location) bool {
	return t.In(loc).Day() != t.Add(-time.Nanosecond).In(loc).Day()
}
