package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

// BenchmarkListLimits lists 1,000 key limits (100 teams of 10 keys) as the
// global token and as one team's token, which the scope cuts to 10: the
// price of reading the teams and placing every limit on each request.
func BenchmarkListLimits(b *testing.B) {
	f := newFixture(b, false)
	ctx := context.Background()
	max := int64(1000)
	for i := range 100 {
		team := fmt.Sprintf("t%03d", i)
		if _, err := f.db.SetTeam(ctx, team, "bench"); err != nil {
			b.Fatal(err)
		}
		for j := range 10 {
			key := fmt.Sprintf("%s-k%d", team, j)
			if err := f.db.KeyStore().InsertKey(ctx, gatekey.Key{Name: key, Hash: gatekey.HashSecret(key), CreatedAt: t0}); err != nil {
				b.Fatal(err)
			}
			if err := f.db.SetKeyTeam(ctx, key, team); err != nil {
				b.Fatal(err)
			}
			if _, _, err := f.db.SetLimit(ctx, budget.LimitSpec{Key: key, Window: "daily", Max: &max}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := gatekey.AddAdminToken(ctx, f.store, "t042-lead", budget.AdminScope{Team: "t042"}, t0); err != nil {
		b.Fatal(err)
	}
	secret, err := gatekey.AddAdminToken(ctx, f.store, "t007-lead", budget.AdminScope{Team: "t007"}, t0)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, token string }{{"global", globalToken}, {"team", secret}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest("GET", "http://127.0.0.1/admin/v1/limits", nil)
				r.Header.Set("Authorization", "Bearer "+c.token)
				w := httptest.NewRecorder()
				f.h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}
