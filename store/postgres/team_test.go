package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/postgres"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// Every change to teams, organisations, placements and raises moves the
// limits version, and waits for a write transaction that read the version
// (holding the limit definitions shared) to end, so what that transaction
// resolved from the key's placement and limits stays true until it
// commits. So does a prune, for the prune horizon writers read with the
// version.
func TestDefinitionChangesWaitForWriters(t *testing.T) {
	ctx := context.Background()
	dsn := freshSchema(t)
	adminDSN, app := withApp(t, dsn)
	writer, admin := openHandle(t, dsn), openHandle(t, adminDSN)
	day := budget.Window{Kind: budget.Daily, Zone: time.UTC}
	lim := budget.Limit{ID: "lim_k", Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricTokens, Max: 100, Window: day, Enabled: true}
	if err := writer.Update(ctx, func(tx budget.Tx) error {
		if err := tx.InsertLimit(ctx, lim, time.Now()); err != nil {
			return err
		}
		for _, tm := range []string{"eng", "ops"} {
			if err := tx.PutTeam(ctx, budget.Team{Name: tm}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name   string
		change func(budget.Tx) error
	}{
		{"create a team in a new org", func(tx budget.Tx) error { return tx.PutTeam(ctx, budget.Team{Name: "new", Org: "acme"}) }},
		{"move a team", func(tx budget.Tx) error { return tx.PutTeam(ctx, budget.Team{Name: "eng", Org: "acme"}) }},
		{"place a key", func(tx budget.Tx) error { return tx.SetKeyTeam(ctx, "k", "eng") }},
		{"move a key", func(tx budget.Tx) error { return tx.SetKeyTeam(ctx, "k", "ops") }},
		{"unplace a key", func(tx budget.Tx) error { return tx.SetKeyTeam(ctx, "k", "") }},
		{"raise a limit", func(tx budget.Tx) error {
			return tx.AddRaise(ctx, lim.ID, budget.Raise{ID: "rse_1", Amount: 5, At: time.Now()})
		}},
		{"delete a team", func(tx budget.Tx) error { return tx.DeleteTeam(ctx, "new") }},
		{"prune", func(tx budget.Tx) error {
			_, err := tx.(budget.HistoryTx).Prune(ctx, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			held, release := make(chan int64, 1), make(chan struct{})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			defer free() // a failure must not leave the writer holding the lock
			writerDone := make(chan error, 1)
			go func() {
				writerDone <- writer.Update(ctx, func(tx budget.Tx) error {
					v, err := tx.LimitsVersion(ctx)
					if err != nil {
						return err
					}
					held <- v
					<-release
					return nil
				})
			}()
			var before int64
			select {
			case before = <-held:
			case err := <-writerDone:
				t.Fatalf("writer: %v", err)
			}
			changeDone := make(chan error, 1)
			go func() { changeDone <- admin.Update(ctx, c.change) }()
			waitForAdvisoryLock(t, app, 1)
			select {
			case err := <-changeDone:
				t.Fatalf("the change ended (%v) while a writer held the limit definitions", err)
			default:
			}
			free()
			if err := <-writerDone; err != nil {
				t.Fatalf("writer: %v", err)
			}
			if err := <-changeDone; err != nil {
				t.Fatalf("change: %v", err)
			}
			var after int64
			if err := writer.View(ctx, func(tx budget.Tx) error {
				var err error
				after, err = tx.LimitsVersion(ctx)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if after <= before {
				t.Fatalf("limits version %d after the change; want more than %d", after, before)
			}
		})
	}

	// What the changes left.
	err := writer.View(ctx, func(tx budget.Tx) error {
		teams, err := tx.Teams(ctx)
		if err != nil {
			return err
		}
		want := []budget.Team{{Name: "eng", Org: "acme", Keys: []string{}}, {Name: "ops", Keys: []string{}}}
		if !slices.EqualFunc(teams, want, func(a, b budget.Team) bool {
			return a.Name == b.Name && a.Org == b.Org && slices.Equal(a.Keys, b.Keys)
		}) {
			t.Errorf("Teams = %+v; want %+v", teams, want)
		}
		if orgs, err := tx.Orgs(ctx); err != nil || !slices.Equal(orgs, []string{"acme"}) {
			t.Errorf("Orgs = %v, %v; want [acme]", orgs, err)
		}
		l, err := tx.Limit(ctx, lim.ID)
		if err != nil {
			return err
		}
		if len(l.Raises) != 1 || l.Raises[0].ID != "rse_1" || l.Raises[0].Amount != 5 || !l.Raises[0].Until.IsZero() {
			t.Errorf("raises of %s = %+v; want rse_1 of 5, lasting", l.ID, l.Raises)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Admin writes check names under the limits lock: of two concurrent
// SetTeam calls, one creating team x and one creating team y in a new
// organisation x, exactly one succeeds and the other is refused (a team
// and an organisation may not share a name). Both are made to wait for a
// third transaction holding the lock (it changes a team), so both start
// before either checks.
func TestSetTeamNamesAreCheckedUnderTheLock(t *testing.T) {
	ctx := context.Background()
	dsn := freshSchema(t)
	adminDSN, app := withApp(t, dsn)
	holder := openHandle(t, dsn)
	c := storetest.NewClock(storetest.T0)
	a := storetest.NewTracker(t, openHandle(t, adminDSN), c, time.Second)
	b := storetest.NewTracker(t, openHandle(t, adminDSN), c, time.Second)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	holderDone := make(chan error, 1)
	go func() {
		holderDone <- holder.Update(ctx, func(tx budget.Tx) error {
			// A definition change: its trigger takes the lock exclusively.
			if err := tx.PutTeam(ctx, budget.Team{Name: "holder"}); err != nil {
				return err
			}
			close(held)
			<-release
			return nil
		})
	}()
	select {
	case <-held:
	case err := <-holderDone:
		t.Fatalf("holder: %v", err)
	}
	type result struct {
		who string
		err error
	}
	done := make(chan result, 2)
	go func() { _, err := a.SetTeam(ctx, "x", ""); done <- result{"team x", err} }()
	go func() { _, err := b.SetTeam(ctx, "y", "x"); done <- result{"team y in org x", err} }()
	waitForAdvisoryLock(t, app, 2)
	free()
	if err := <-holderDone; err != nil {
		t.Fatalf("holder: %v", err)
	}
	var won []string
	for range 2 {
		r := <-done
		switch {
		case r.err == nil:
			won = append(won, r.who)
		case !errors.Is(r.err, budget.ErrInvalid):
			t.Errorf("SetTeam (%s) = %v; want success or invalid input", r.who, r.err)
		}
	}
	if len(won) != 1 {
		t.Fatalf("SetTeam succeeded for %q; want exactly one of team x and team y in org x", won)
	}
	err := holder.View(ctx, func(tx budget.Tx) error {
		teams, err := tx.Teams(ctx)
		if err != nil {
			return err
		}
		orgs, err := tx.Orgs(ctx)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(teams, func(tm budget.Team) bool { return tm.Name == "x" }) && slices.Contains(orgs, "x") {
			t.Errorf("teams %+v and orgs %v share the name x", teams, orgs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// withApp is dsn with an application name of its own, and that name, so
// a test can watch its sessions in pg_stat_activity.
func withApp(t *testing.T, dsn string) (string, string) {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	app := "tbt_admin_" + hex.EncodeToString(b[:])
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String(), app
}

// openHandle opens a store handle closed by t.Cleanup.
func openHandle(t *testing.T, dsn string) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), dsn, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// waitForAdvisoryLock waits until n sessions of application app wait on
// an advisory lock (the limits lock).
func waitForAdvisoryLock(t *testing.T, app string, n int) {
	t.Helper()
	db := adminDB(t, testDSN(t))
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := db.Get(&waiting, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory'`, app); err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sessions waited for the limits lock", waiting, n)
		}
		time.Sleep(2 * time.Millisecond) // polling the server's view, not a stand-in for it
	}
}

// Teams list their keys sorted, placements name the team's org, and
// deleting a team unplaces its keys; DeleteTeam of an unknown team is
// ErrNotFound.
func TestTeamsAndPlacements(t *testing.T) {
	ctx := context.Background()
	s := newPostgres(t)()
	err := s.Update(ctx, func(tx budget.Tx) error {
		for _, tm := range []budget.Team{{Name: "ops", Org: "zeta"}, {Name: "eng", Org: "acme"}, {Name: "lab"}} {
			if err := tx.PutTeam(ctx, tm); err != nil {
				return err
			}
		}
		for _, k := range []string{"kb", "ka", "kc"} {
			if err := tx.SetKeyTeam(ctx, k, "eng"); err != nil {
				return err
			}
		}
		return tx.SetKeyTeam(ctx, "kd", "ops")
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.View(ctx, func(tx budget.Tx) error {
		teams, err := tx.Teams(ctx)
		if err != nil {
			return err
		}
		var names []string
		for _, tm := range teams {
			names = append(names, tm.Name)
		}
		if !slices.Equal(names, []string{"eng", "lab", "ops"}) || !slices.Equal(teams[0].Keys, []string{"ka", "kb", "kc"}) ||
			teams[0].Org != "acme" || len(teams[1].Keys) != 0 {
			t.Errorf("Teams = %+v; want eng (acme: ka, kb, kc), lab (no keys), ops", teams)
		}
		if orgs, err := tx.Orgs(ctx); err != nil || !slices.Equal(orgs, []string{"acme", "zeta"}) {
			t.Errorf("Orgs = %v, %v; want [acme zeta]", orgs, err)
		}
		for _, c := range []struct{ key, team, org string }{{"ka", "eng", "acme"}, {"kd", "ops", "zeta"}, {"nobody", "", ""}} {
			if team, org, err := tx.Placement(ctx, c.key); err != nil || team != c.team || org != c.org {
				t.Errorf("Placement(%s) = %q, %q, %v; want %q, %q", c.key, team, org, err, c.team, c.org)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx budget.Tx) error { return tx.DeleteTeam(ctx, "eng") }); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx budget.Tx) error { return tx.DeleteTeam(ctx, "eng") }); !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("DeleteTeam(deleted team) = %v; want ErrNotFound", err)
	}
	err = s.View(ctx, func(tx budget.Tx) error {
		if team, org, err := tx.Placement(ctx, "ka"); err != nil || team != "" || org != "" {
			t.Errorf("Placement(ka) after its team was deleted = %q, %q, %v; want none", team, org, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
