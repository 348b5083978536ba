package storetest

import (
	"errors"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

func init() { extra = append(extra, suiteCase{"GatewayKeyMadeInItsTeam", testKeyMadeInTeam}) }

// A gateway key made for a team is created and placed in one transaction:
// one audit entry, in the team's scope, and nothing at all when the
// create is refused (a taken name, a secret another key has).
func testKeyMadeInTeam(t *testing.T, newDB NewDB) {
	tr, _, open := setup(t, newDB)
	ks := keyStore(t, open)
	setTeam(t, tr, "eng", "acme")
	place := func(k gatekey.Key, reuse bool) error {
		return tr.PlaceNewKey(ctx, k.Name, "eng", gatekey.CreateIn(k, reuse))
	}
	if err := place(gatekey.Key{Name: "app", Hash: "h-app", CreatedAt: T0}, false); err != nil {
		t.Fatalf("PlaceNewKey(app): %v", err)
	}
	if k := keyByHash(t, ks, "h-app"); k.Name != "app" || !k.CreatedAt.Equal(T0) {
		t.Fatalf("app's key: %+v", k)
	}
	es := audit(t, tr, budget.AuditFilter{})
	if len(es) != 2 || es[1].Action != budget.AuditCreate || es[1].Object != budget.ObjectKey || es[1].Team != "eng" || es[1].Org != "acme" {
		t.Fatalf("audit after the key: %+v; want the team's entry, then one create of key app in eng/acme", es)
	}
	if got := audit(t, tr, budget.AuditFilter{Scope: budget.AdminScope{Team: "eng"}}); len(got) != 2 {
		t.Errorf("team eng's audit log: %d entries; want its team and its key's creation", len(got))
	}
	for _, k := range []gatekey.Key{
		{Name: "app", Hash: "h-other", CreatedAt: T0}, // the name is taken
		{Name: "dup", Hash: "h-app", CreatedAt: T0},   // the secret is app's
	} {
		if err := place(k, false); !errors.Is(err, budget.ErrInvalid) {
			t.Errorf("PlaceNewKey(%s, hash %s) = %v; want ErrInvalid", k.Name, k.Hash, err)
		}
	}
	ts, err := tr.Teams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || len(ts[0].Keys) != 1 || ts[0].Keys[0] != "app" {
		t.Errorf("teams after the refused creates: %+v; want eng with app alone (dup not placed)", ts)
	}
	if n := len(audit(t, tr, budget.AuditFilter{})); n != 2 {
		t.Errorf("%d audit entries after the refused creates; want 2", n)
	}
	// A revoked name is taken again with reuse, in the same transaction.
	if _, err := ks.RevokeKey(ctx, "app", T0); err != nil {
		t.Fatal(err)
	}
	if err := place(gatekey.Key{Name: "app", Hash: "h-app2", CreatedAt: T0}, false); !errors.Is(err, budget.ErrInvalid) {
		t.Errorf("PlaceNewKey of a revoked name without reuse = %v; want ErrInvalid", err)
	}
	if err := place(gatekey.Key{Name: "app", Hash: "h-app2", CreatedAt: T0}, true); err != nil {
		t.Fatalf("PlaceNewKey of a revoked name with reuse: %v", err)
	}
	if k := keyByHash(t, ks, "h-app2"); k.Name != "app" || !k.RevokedAt.IsZero() {
		t.Errorf("app after reuse: %+v; want live with the new secret", k)
	}
}
