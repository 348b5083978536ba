package jsonview

import (
	"slices"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// The objects of `team ls --json`, `price ls --json` and `export`, which
// the admin API (package admin) serves as well (keys.go has `key ls`'s):
// the CLI and the API both build them here, so the two cannot drift.

// Secret is what creating or rotating a key answers: the secret, shown
// this once.
type Secret struct {
	Name   string `json:"name"`
	Secret string `json:"secret"`
}

// Team is a team: org null when it has none, keys [] when it has none.
type Team struct {
	Name string   `json:"name"`
	Org  *string  `json:"org"`
	Keys []string `json:"keys"`
}

// TeamOf is t as an object.
func TeamOf(t *budget.Team) Team {
	o := Team{Name: t.Name, Keys: slices.Clone(t.Keys)}
	if o.Keys == nil {
		o.Keys = []string{}
	}
	if t.Org != "" {
		o.Org = ptr(t.Org)
	}
	return o
}

// Price is a price version; prices are decimal strings of dollars per
// million tokens.
type Price struct {
	Provider   string `json:"provider"`
	Model      string `json:"model"`
	Tier       string `json:"tier"`
	AboveInput int64  `json:"above_input"`
	From       string `json:"from"`
	Input      string `json:"input"`
	Output     string `json:"output"`
	CacheRead  string `json:"cache_read"`
	CacheWrite string `json:"cache_write"`
	Reasoning  string `json:"reasoning"`

	CacheWrite1h string `json:"cache_write_1h"` // a write to a 1-hour cache
}

// PriceOf is p as an object.
func PriceOf(p *budget.Price) Price {
	return Price{p.Provider, p.Model, p.Tier, p.AboveInput, Time(p.From), budget.FormatUSD(p.Input), budget.FormatUSD(p.Output),
		budget.FormatUSD(p.CacheRead), budget.FormatUSD(p.CacheWrite), budget.FormatUSD(p.Reasoning), budget.FormatUSD(p.CacheWrite1h)}
}

// Event is one usage event as `budget export` writes it and `budget
// import` reads it.
type Event struct {
	RequestID  string `json:"request_id"`
	Key        string `json:"key"`
	Provider   string `json:"provider"`
	Model      string `json:"model"`
	User       string `json:"user,omitempty"`
	Team       string `json:"team"` // always written, "" for none: import keeps it so
	Org        string `json:"org"`
	Input      int64  `json:"input"`
	Output     int64  `json:"output"`
	Reasoning  int64  `json:"reasoning"`
	CacheRead  int64  `json:"cache_read"`
	CacheWrite int64  `json:"cache_write"`
	At         string `json:"at"`
	// Cost is in micro-dollars; null when no price matched.
	Cost *int64 `json:"cost"`
	// Tags are the request's, an object of names to values; left out for
	// none.
	Tags budget.Tags `json:"tags,omitempty"`
}

// EventOf is u as an export line.
func EventOf(u *budget.Usage) Event {
	e := Event{RequestID: u.RequestID, Key: u.Key, Provider: u.Provider, Model: u.Model, User: u.User, Team: u.Team,
		Org: u.Org, Input: u.Input, Output: u.Output, Reasoning: u.Reasoning, CacheRead: u.CacheRead,
		CacheWrite: u.CacheWrite, At: u.At.UTC().Format(time.RFC3339Nano), Tags: u.Tags}
	if !u.NoPrice {
		e.Cost = ptr(u.Cost)
	}
	return e
}
