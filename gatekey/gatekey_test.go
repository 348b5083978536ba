package gatekey_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

func TestModelPatterns(t *testing.T) {
	t.Parallel()
	got, err := gatekey.ModelPatterns([]string{" GPT-4o* ", "openai/o3-2025-04-16", "o3"})
	if err != nil || !slices.Equal(got, []string{"gpt-4o*", "o3"}) {
		t.Fatalf("ModelPatterns = %q, %v; want normalised, duplicates dropped", got, err)
	}
	for _, bad := range [][]string{{""}, {"gpt 4"}, {"[a-z]"}} {
		if _, err := gatekey.ModelPatterns(bad); !errors.Is(err, budget.ErrInvalid) {
			t.Errorf("ModelPatterns(%q) = %v; want invalid", bad, err)
		}
	}
	k := gatekey.Key{Models: got}
	for model, want := range map[string]bool{"gpt-4o": true, "openai/GPT-4o-mini-2024-07-18": true, "o3": true, "o3-mini": false, "claude": false} {
		if k.AllowsModel(model) != want {
			t.Errorf("AllowsModel(%s) = %v; want %v", model, !want, want)
		}
	}
	if !(&gatekey.Key{}).AllowsModel("anything") {
		t.Error("a key without patterns refused a model")
	}
}

func TestCheckExpiry(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	if err := gatekey.CheckExpiry(now, now); !errors.Is(err, budget.ErrInvalid) {
		t.Errorf("an expiry at now: %v; want invalid", err)
	}
	if err := gatekey.CheckExpiry(now.Add(time.Nanosecond), now); err != nil {
		t.Errorf("an expiry after now: %v", err)
	}
	if err := gatekey.CheckExpiry(time.Time{}, now); err != nil {
		t.Errorf("no expiry: %v", err)
	}
}

func TestValidAdminName(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{"eng-lead": true, "ci.bot_1": true, "": false, "admin": false, "CLI": false,
		"config": false, "has space": false, "cli:alice": false} {
		if err := gatekey.ValidAdminName(name); (err == nil) != ok {
			t.Errorf("ValidAdminName(%q) = %v; want ok %v", name, err, ok)
		}
	}
}
