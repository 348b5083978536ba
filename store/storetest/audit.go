package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

func init() {
	extra = append(extra,
		suiteCase{"AuditLogsEveryChange", testAuditEveryChange},
		suiteCase{"AuditEntryLandsWithItsChange", testAuditWithChange},
		suiteCase{"AuditScopedAndKeptByPrune", testAuditScoped},
		suiteCase{"AdminTokens", testAdminTokens},
		suiteCase{"GatewayKeyRules", testKeyRules},
	)
}

// who is ctx with actor a.
func who(kind budget.ActorKind, name string) context.Context {
	return budget.WithActor(ctx, budget.Actor{Kind: kind, Name: name})
}

func audit(t *testing.T, tr *budget.Tracker, f budget.AuditFilter) []budget.AuditEntry {
	t.Helper()
	es, err := tr.Audit(ctx, f)
	if err != nil {
		t.Fatalf("Audit: %v", err)
	}
	return es
}

// entryLine is an entry in one line: actor action object id team/org.
func entryLine(e *budget.AuditEntry) string {
	return fmt.Sprintf("%s %s %s %s %s/%s", e.Actor, e.Action, e.Object, e.ObjectID, e.Team, e.Org)
}

// Every change to teams, placements, limits, raises, prices, gateway keys
// and admin tokens appends one entry naming its actor, with the object's
// JSON before and after and never a hash; a write that changes nothing
// appends none.
func testAuditEveryChange(t *testing.T, newDB NewDB) {
	tr, clock, open := setup(t, newDB)
	ks := keyStore(t, open)
	as := open().(gatekey.AdminStore)
	cli := who(budget.ActorCLI, "alice")
	if _, err := tr.SetTeam(cli, "eng", "acme"); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetKeyTeam(who(budget.ActorToken, "ops-bot"), "app", "eng"); err != nil {
		t.Fatal(err)
	}
	max := int64(100)
	l, _, err := tr.SetLimit(cli, budget.LimitSpec{Key: "app", Window: "daily", Max: &max})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.SetLimit(cli, budget.LimitSpec{ID: l.ID, MustExist: true, Key: "app", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err) // the same max: no change, no entry
	}
	max = 200
	if _, _, err := tr.SetLimit(who(budget.ActorConfig, "budget.yaml"), budget.LimitSpec{ID: l.ID, Key: "app", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.RaiseLimit(who(budget.ActorAdmin, ""), l.ID, 50, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.SetPrices(cli, budget.PriceSpec{Provider: "openai", Model: "gpt-4o", From: T0, Input: "2.5", Output: "10"}); err != nil {
		t.Fatal(err)
	}
	if err := ks.InsertKey(cli, gatekey.Key{Name: "app", Hash: "secret-hash-1", CreatedAt: T0}); err != nil {
		t.Fatal(err)
	}
	if err := ks.RotateKey(cli, "app", "secret-hash-2", T0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.RevokeKey(cli, "app", T0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.RevokeKey(cli, "app", T0.Add(time.Minute)); err != nil {
		t.Fatal(err) // revoked already: no change
	}
	if err := as.InsertAdminToken(cli, gatekey.AdminToken{Name: "lead", Hash: "admin-hash", Scope: budget.AdminScope{Team: "eng"}, CreatedAt: T0}); err != nil {
		t.Fatal(err)
	}
	if _, err := as.RevokeAdminToken(cli, "lead", T0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := tr.DeleteLimit(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetKeyTeam(cli, "app", ""); err != nil {
		t.Fatal(err)
	}
	if err := tr.DeleteTeam(cli, "eng"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	es := audit(t, tr, budget.AuditFilter{})
	got := make([]string, len(es))
	for i := range es {
		got[i] = entryLine(&es[i])
		for _, raw := range []string{string(es[i].Before), string(es[i].After)} {
			if strings.Contains(raw, "hash") || strings.Contains(raw, "secret") {
				t.Errorf("entry %s holds a hash: %s", got[i], raw)
			}
		}
	}
	want := []string{
		"cli:alice create team eng eng/acme",
		"ops-bot update key app eng/acme",
		"cli:alice create limit " + l.ID + " eng/acme",
		"config budget.yaml update limit " + l.ID + " eng/acme",
		"admin raise limit " + l.ID + " eng/acme",
		"cli:alice create price openai/gpt-4o/default/0/2026-03-02T09:00:00Z /",
		"cli:alice create key app eng/acme",
		"cli:alice rotate key app eng/acme",
		"cli:alice revoke key app eng/acme",
		"cli:alice create admin_token lead /",
		"cli:alice revoke admin_token lead /",
		"library delete limit " + l.ID + " eng/acme",
		"cli:alice update key app eng/acme",
		"cli:alice delete team eng eng/acme",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The update's before and after tell the change.
	up := es[3]
	if !strings.Contains(string(up.Before), `"limit":100`) || !strings.Contains(string(up.After), `"limit":200`) {
		t.Fatalf("limit update before %s after %s; want limit 100 then 200", up.Before, up.After)
	}
	if es[0].Before != nil || es[len(es)-1].After != nil {
		t.Fatalf("a create has no before (%s), a delete no after (%s)", es[0].Before, es[len(es)-1].After)
	}
	if !es[0].At.Equal(T0) {
		t.Fatalf("entry at %v; want the change's instant %v", es[0].At, T0)
	}
	// The revocations were at T0+1m; a rotation is logged at the wall
	// clock's now (RotateKey is given no instant), which is after T0.
	var since []string
	for _, e := range audit(t, tr, budget.AuditFilter{Since: T0.Add(time.Second)}) {
		since = append(since, string(e.Action)+" "+string(e.Object))
	}
	if got, want := strings.Join(since, ", "), "rotate key, revoke key, revoke admin_token"; got != want {
		t.Fatalf("entries since T0+1s: %s; want %s", got, want)
	}
	if last := audit(t, tr, budget.AuditFilter{Limit: 2}); len(last) != 2 || last[1].ID != es[len(es)-1].ID {
		t.Fatalf("Limit 2 gave %d entries; want the newest 2", len(last))
	}
}

// A change that fails appends nothing, and an entry appended in a
// transaction that fails is gone with it.
func testAuditWithChange(t *testing.T, newDB NewDB) {
	tr, _, open := setup(t, newDB)
	max := int64(10)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Team: "nope", Window: "daily", Max: &max}); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("limit of an unknown team: %v; want invalid", err)
	}
	setTeam(t, tr, "eng", "")
	SetLimit(t, tr, budget.LimitSpec{Team: "eng", Window: "daily"}, 10)
	if err := tr.DeleteTeam(ctx, "eng"); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("DeleteTeam with limits: %v; want invalid", err)
	}
	ks := keyStore(t, open)
	insertKey(t, ks, gatekey.Key{Name: "k", Hash: "h", CreatedAt: T0})
	if err := ks.InsertKey(ctx, gatekey.Key{Name: "k", Hash: "h2", CreatedAt: T0}); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("InsertKey of a taken name: %v; want invalid", err)
	}
	if n := len(audit(t, tr, budget.AuditFilter{})); n != 3 {
		t.Fatalf("%d entries; want 3 (team, limit, key): the failed changes log nothing", n)
	}
	s := open()
	boom := errors.New("boom")
	err := s.Update(ctx, func(tx budget.Tx) error {
		e, err := budget.NewAudit(ctx, T0, budget.AuditCreate, budget.ObjectTeam, "ghost", budget.Placed{}, nil, map[string]string{"name": "ghost"})
		if err != nil {
			return err
		}
		if err := tx.(budget.AuditTx).AppendAudit(ctx, e); err != nil {
			return err
		}
		if err := tx.PutTeam(ctx, budget.Team{Name: "ghost"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update: %v; want boom", err)
	}
	es := audit(t, tr, budget.AuditFilter{})
	for i := range es {
		if es[i].ObjectID == "ghost" {
			t.Fatal("the entry of a rolled-back transaction was kept")
		}
	}
	if err := s.View(ctx, func(tx budget.Tx) error {
		return tx.(budget.AuditTx).AppendAudit(ctx, budget.AuditEntry{ID: "aud_x", At: T0})
	}); err == nil {
		t.Fatal("AppendAudit inside View succeeded")
	}
}

// A team scope sees the entries about its team's objects, an org scope
// its teams' and its own; prices and admin tokens only a global scope.
// Prune deletes usage, never the log.
func testAuditScoped(t *testing.T, newDB NewDB) {
	tr, clock, open := setup(t, newDB)
	setTeam(t, tr, "eng", "acme", "a")
	setTeam(t, tr, "ops", "acme", "b")
	setTeam(t, tr, "web", "", "c")
	SetLimit(t, tr, budget.LimitSpec{Key: "a", Window: "daily"}, 10)
	SetLimit(t, tr, budget.LimitSpec{Key: "b", Window: "daily"}, 10)
	SetLimit(t, tr, budget.LimitSpec{Org: "acme", Window: "daily"}, 10)
	SetLimit(t, tr, budget.LimitSpec{Default: true, Window: "daily"}, 10)
	if err := open().(gatekey.AdminStore).InsertAdminToken(ctx, gatekey.AdminToken{Name: "x", Hash: "hx", CreatedAt: T0}); err != nil {
		t.Fatal(err)
	}
	ids := func(f budget.AuditFilter) string {
		var out []string
		for _, e := range audit(t, tr, f) {
			out = append(out, string(e.Action)+" "+string(e.Object)+" "+e.Team+"/"+e.Org)
		}
		return strings.Join(out, "; ")
	}
	if got, want := ids(budget.AuditFilter{Scope: budget.AdminScope{Team: "eng"}}),
		"create team eng/acme; update key eng/acme; create limit eng/acme"; got != want {
		t.Fatalf("team eng sees %q; want %q", got, want)
	}
	if got, want := ids(budget.AuditFilter{Scope: budget.AdminScope{Org: "acme", ReadOnly: true}}),
		"create team eng/acme; update key eng/acme; create team ops/acme; update key ops/acme; create limit eng/acme; create limit ops/acme; create limit /acme"; got != want {
		t.Fatalf("org acme sees %q; want %q", got, want)
	}
	// Moves: the scope an object left sees the move too.
	if err := tr.SetKeyTeam(ctx, "a", "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.SetTeam(ctx, "ops", "bigco"); err != nil {
		t.Fatal(err)
	}
	moves := func(s budget.AdminScope) string {
		var out []string
		for _, e := range audit(t, tr, budget.AuditFilter{Scope: s}) {
			if was, moved := e.Moved(); moved {
				out = append(out, string(e.Object)+" "+e.ObjectID+" "+was.Team+"/"+was.Org+" -> "+e.Team+"/"+e.Org)
			}
		}
		return strings.Join(out, "; ")
	}
	if got, want := moves(budget.AdminScope{Team: "eng"}), "key a eng/acme -> web/"; got != want {
		t.Fatalf("team eng sees the moves %q; want %q", got, want)
	}
	if got, want := moves(budget.AdminScope{Org: "acme"}), "key a eng/acme -> web/; team ops ops/acme -> ops/bigco"; got != want {
		t.Fatalf("org acme sees the moves %q; want %q", got, want)
	}
	if got, want := moves(budget.AdminScope{Team: "web"}), "key a eng/acme -> web/"; got != want {
		t.Fatalf("team web sees the moves %q; want %q", got, want)
	}
	all := ids(budget.AuditFilter{})
	RecordSync(t, tr, ev("r1", "a", "p", "m", 1, 0, T0))
	clock.Advance(72 * time.Hour)
	if _, err := tr.Prune(ctx, T0.Add(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := ids(budget.AuditFilter{}); got != all {
		t.Fatalf("after prune the log is %q; want it untouched: %q", got, all)
	}
}

// Admin tokens are found by their secret's hash while live, listed by
// name with their scope, revoked once; a name is taken once.
func testAdminTokens(t *testing.T, newDB NewDB) {
	open := newDB(t)
	as := open().(gatekey.AdminStore)
	other := open().(gatekey.AdminStore)
	secret, err := gatekey.AddAdminToken(ctx, as, "lead", budget.AdminScope{Team: "eng", ReadOnly: true}, T0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, gatekey.AdminPrefix) {
		t.Fatalf("secret %q lacks the prefix %s", secret, gatekey.AdminPrefix)
	}
	tok, err := gatekey.LookupAdminToken(ctx, other, secret)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Name != "lead" || tok.Scope != (budget.AdminScope{Team: "eng", ReadOnly: true}) || !tok.CreatedAt.Equal(T0) || tok.Hash == secret {
		t.Fatalf("token = %+v; want lead, team eng read-only, created T0, stored hashed", tok)
	}
	if _, err := gatekey.LookupAdminToken(ctx, other, secret+"x"); !errors.Is(err, gatekey.ErrUnknownAdminToken) {
		t.Fatalf("a wrong secret: %v; want ErrUnknownAdminToken", err)
	}
	if _, err := gatekey.AddAdminToken(ctx, other, "lead", budget.AdminScope{}, T0); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("a taken name: %v; want invalid", err)
	}
	if _, err := gatekey.AddAdminToken(ctx, other, "root", budget.AdminScope{}, T0); err != nil {
		t.Fatal(err)
	}
	ts, err := other.ListAdminTokens(ctx)
	if err != nil || len(ts) != 2 || ts[0].Name != "lead" || ts[1].Name != "root" || !ts[1].Scope.Global() {
		t.Fatalf("ListAdminTokens = %+v, %v; want lead, root (global)", ts, err)
	}
	for i, want := range []bool{true, false} {
		revoked, err := as.RevokeAdminToken(ctx, "lead", T0.Add(time.Minute))
		if err != nil || revoked != want {
			t.Fatalf("revoke %d: %v, %v; want %v", i+1, revoked, err, want)
		}
	}
	if _, err := gatekey.LookupAdminToken(ctx, other, secret); !errors.Is(err, gatekey.ErrUnknownAdminToken) {
		t.Fatalf("a revoked token: %v; want ErrUnknownAdminToken", err)
	}
	if _, err := as.RevokeAdminToken(ctx, "nobody", T0); !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("revoke an unknown token: %v; want not found", err)
	}
}

// A gateway key keeps its expiry and model patterns; UpdateKey changes
// only what it is given.
func testKeyRules(t *testing.T, newDB NewDB) {
	open := newDB(t)
	ks, other := keyStore(t, open), keyStore(t, open)
	exp := T0.Add(36*time.Hour + 7)
	insertKey(t, ks, gatekey.Key{Name: "app", Hash: "h", CreatedAt: T0, ExpiresAt: exp, Models: []string{"gpt-4o*", "claude-3-5-haiku"}})
	k := keyByHash(t, other, "h")
	if !k.ExpiresAt.Equal(exp) || strings.Join(k.Models, ",") != "gpt-4o*,claude-3-5-haiku" {
		t.Fatalf("key = %+v; want its expiry and models back", k)
	}
	if !k.AllowsModel("GPT-4o-mini") || k.AllowsModel("o3") || k.Expired(exp.Add(-1)) || !k.Expired(exp) {
		t.Fatal("AllowsModel/Expired disagree with the key's rules")
	}
	models := []string{"o3"}
	got, err := other.UpdateKey(ctx, "app", gatekey.KeyChange{Models: &models}, T0)
	if err != nil || !got.ExpiresAt.Equal(exp) || strings.Join(got.Models, ",") != "o3" {
		t.Fatalf("UpdateKey(models) = %+v, %v; want expiry kept, models o3", got, err)
	}
	never, none := time.Time{}, []string{}
	if _, err := ks.UpdateKey(ctx, "app", gatekey.KeyChange{ExpiresAt: &never, Models: &none}, T0); err != nil {
		t.Fatal(err)
	}
	if k := keyByHash(t, other, "h"); !k.ExpiresAt.IsZero() || len(k.Models) != 0 {
		t.Fatalf("key = %+v; want no expiry and any model", k)
	}
	if _, err := ks.UpdateKey(ctx, "nope", gatekey.KeyChange{}, T0); !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("UpdateKey of an unknown key: %v; want not found", err)
	}
}
