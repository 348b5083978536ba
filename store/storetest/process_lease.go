package storetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Multi-process lease cases whose child runs on the wall clock: one
// killed while its goroutines are still reserving and committing, and one
// whose idle leases go back by its own timer.

// leaseRoles are the children of these cases, by role.
var leaseRoles = map[string]func(ctx context.Context, tr *budget.Tracker, n int) error{
	"leaseload": leaseLoad,
	"leaseidle": leaseIdle,
}

// leaseLoad reserves until killed, from goroutinesPerChild goroutines:
// ExpireCharge on even goroutines, ExpireRelease on odd ones; of every four
// reservations it commits two at loadUsage, releases one and leaves one in
// flight. Each answer is printed once its call returned, one line in one
// write(): "A <id> <charge|release> <commit|release|keep>" (what it does
// next), "C <id>", "R <id>". So every line is an outcome the child's
// caller had; what it had and not yet printed when killed is at most one
// call per goroutine: a reservation, or the settlement its A line named.
func leaseLoad(ctx context.Context, tr *budget.Tracker, _ int) error {
	say := func(s string) error {
		_, err := os.Stdout.WriteString(s + "\n")
		return err
	}
	return concurrently(goroutinesPerChild, func(g int) error {
		policy := budget.ExpireCharge
		if g%2 == 1 {
			policy = budget.ExpireRelease
		}
		for i := 0; ; i++ {
			r, err := tr.ReserveWith(ctx, budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: 40, Output: 60}},
				budget.ReserveOptions{TTL: 20 * time.Second, OnExpiry: policy})
			if err != nil {
				return err
			}
			next := [...]string{"commit", "commit", "release", "keep"}[i%4]
			if err := say("A " + r.ID + " " + string(policy) + " " + next); err != nil {
				return err
			}
			switch i % 4 {
			case 0, 1:
				if _, err := tr.Commit(ctx, r.ID, loadUsage(r.ID)); err != nil {
					return err
				}
				err = say("C " + r.ID)
			case 2:
				if err := tr.Release(ctx, r.ID); err != nil {
					return err
				}
				err = say("R " + r.ID)
			}
			if err != nil {
				return err
			}
		}
	})
}

// loadUsage is what a leaseload child commits for reservation id: a
// function of the id alone, so the parent knows it for an id it never
// saw committed, and never the estimate (40 + 60).
func loadUsage(id string) budget.Usage {
	h := fnv.New32a()
	h.Write([]byte(id))
	v := int64(h.Sum32())
	return budget.Usage{Input: 10 + v%25, Output: 20 + v/25%90}
}

// A child with leases (its writer writing only when a caller waits, so
// most commits are in its journal alone) reserves, commits and releases
// from 16 goroutines without end; this process kills it (SIGKILL) after
// killAfter answers, in the middle of the stream. Recovery here then
// charges exactly what the child's callers were told, request by
// request: a reservation whose commit was answered its actual usage, one
// released nothing, one answered and never settled its estimate under
// charge and nothing under release, and the unused rest of its leases
// nothing. What the child answered but had not yet printed (at most one
// call per goroutine) is charged one of the two amounts its id allows.
func testProcLeaseKillUnderLoad(t *testing.T, p Processes) {
	const killAfter = 3000
	dsn, c, tr, tok, reqs := leaseParent(t, p)
	cmd, _, stdout := pipeChild(t, "leaseload", dsn, 0)
	policy, next := map[string]budget.ExpiryPolicy{}, map[string]string{}
	committed, released := map[string]bool{}, map[string]bool{}
	answers := 0
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 4 && f[0] == "A":
			policy[f[1]], next[f[1]] = budget.ExpiryPolicy(f[2]), f[3]
		case len(f) == 2 && f[0] == "C":
			committed[f[1]] = true
		case len(f) == 2 && f[0] == "R":
			released[f[1]] = true
		default:
			t.Fatalf("the child printed %q", sc.Text())
		}
		if answers++; answers == killAfter {
			// Its goroutines are still reserving and committing: the
			// lines already in the pipe are read below.
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	err := cmd.Wait()
	if answers < killAfter {
		t.Fatalf("the child stopped after %d answers (%v); want killed after %d", answers, err, killAfter)
	}
	journals := 0
	entries, _ := os.ReadDir(journalDir(dsn))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".journal") {
			journals++
		}
	}
	if journals == 0 {
		t.Fatal("the killed child left no lease journal: its admissions came from the store's path only")
	}
	c.Advance(2 * time.Minute)
	if _, err := tr.Recover(ctx, c.Now()); err != nil {
		t.Fatal(err)
	}
	// Each request's charge, by what the child printed of it: settled
	// (its commit's actual usage, or nothing), in flight (its estimate
	// under charge, nothing under release), or one of its goroutine's
	// last calls, whose outcome was not printed (one of the two outcomes
	// of the settlement it was in, or of the reservation: at most one per
	// goroutine).
	est := budget.Usage{Input: 40, Output: 60}
	seen := map[string]bool{}
	var tokens, events, unknown int64
	_, err = tr.Export(ctx, c.Now().Add(-time.Hour), c.Now().Add(time.Hour), "k", func(u budget.Usage) error {
		id, got := u.RequestID, budget.Usage{Input: u.Input, Output: u.Output}
		tokens += u.Billable()
		events++
		actual := loadUsage(id)
		isActual, isEst := got == budget.Usage{Input: actual.Input, Output: actual.Output}, got == est
		seen[id] = true
		pol, admitted := policy[id]
		charge := pol == budget.ExpireCharge
		ok := false
		switch {
		case committed[id]:
			ok = isActual
		case released[id]:
		case !admitted: // a reservation answered (or about to be) and not printed
			ok = isActual || isEst
			unknown++
		case next[id] == "keep":
			ok = charge && isEst
		case next[id] == "commit":
			ok = isActual || charge && isEst
		case next[id] == "release":
			ok = charge && isEst
		}
		if !ok {
			t.Errorf("%s (%s, then %s; committed %v, released %v) charged %d+%d; its commit would be %d+%d, its estimate %d+%d",
				id, pol, next[id], committed[id], released[id], got.Input, got.Output, actual.Input, actual.Output, est.Input, est.Output)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var inflight int64
	for id, pol := range policy {
		switch {
		case committed[id] && !seen[id]:
			t.Errorf("%s, committed, was charged nothing", id)
		case committed[id] || released[id]:
		case next[id] == "keep":
			inflight++
			if pol == budget.ExpireCharge && !seen[id] {
				t.Errorf("%s, in flight under charge, was charged nothing; want its estimate", id)
			}
		default:
			unknown++ // its settlement was under way, or done and not printed
		}
	}
	if unknown > goroutinesPerChild {
		t.Errorf("%d calls whose outcome the child had not printed; want at most one per goroutine (%d)", unknown, goroutinesPerChild)
	}
	req := budget.Request{Key: "k", Provider: "p", Model: "m"}
	used, reserved := Used(t, tr, req, c.Now(), tok.ID)
	count, _ := Used(t, tr, req, c.Now(), reqs.ID)
	if used != tokens || count != events || reserved != 0 {
		t.Errorf("after recovery: %d tokens in %d requests, %d reserved; want the history's %d in %d, 0 reserved", used, count, reserved, tokens, events)
	}
	t.Logf("killed after %d answers: %d admitted, %d committed, %d released, %d in flight, %d outcomes not printed; %d events, %d tokens",
		answers, len(policy), len(committed), len(released), inflight, unknown, events, tokens)
	if len(committed) == 0 || inflight == 0 {
		t.Fatalf("the child was killed with %d commits and %d in flight; want both", len(committed), inflight)
	}
	noDrift(t, tr)
}

// leaseIdle takes leases under load, 16 goroutines reserving and
// committing n each at the estimate (50), then prints "idle", with what
// it admitted, how many from a lease and what it holds reserved, and
// waits for its stdin to close: its own lease timer must give the room
// back.
func leaseIdle(ctx context.Context, tr *budget.Tracker, n int) error {
	var admitted atomic.Int64
	err := concurrently(goroutinesPerChild, func(int) error {
		for range n {
			r, err := tr.Reserve(ctx, leaseReq(idleEstimate), time.Minute)
			if err != nil {
				return err
			}
			if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: idleEstimate / 2, Output: idleEstimate - idleEstimate/2}); err != nil {
				return err
			}
			admitted.Add(1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	rep, err := tr.Inspect(ctx, "k", tr.Now(), 0)
	if err != nil || len(rep.Limits) != 1 {
		return fmt.Errorf("inspect: %+v, %v", rep, err)
	}
	fmt.Println("idle", admitted.Load(), tr.Stats().Leased, rep.Limits[0].Reserved)
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

const idleEstimate = 50

// A child takes leases under load and goes idle. Its own idle timer (no
// Flush, no call at all) gives the room back: within 2 s of the child
// saying it went idle, this process (on the store's path) admits all but
// at most one estimate of the room left, and never more than that room.
// Real time, as two processes share no clock: this process polls, with a
// deadline, for the room to come back.
func testProcLeaseIdle(t *testing.T, p Processes) {
	dsn := p.NewDSN(t)
	t.Cleanup(func() { os.RemoveAll(journalDir(dsn)) })
	tr := openParent(t, p, dsn, 0, nil)
	const limit = 5000
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, limit)
	cmd, stdin, stdout := pipeChild(t, "leaseidle", dsn, 3)
	line, _ := stdout.ReadString('\n')
	idleAt := time.Now()
	var word string
	var admitted, leased, held int64
	if _, err := fmt.Sscan(line, &word, &admitted, &leased, &held); err != nil || word != "idle" {
		t.Fatalf("child said %q; want idle and its counts", line)
	}
	if leased == 0 || held == 0 {
		t.Fatalf("the child went idle with %d reservations from a lease and %d held: the case would prove nothing", leased, held)
	}
	room := int64(limit) - admitted*idleEstimate
	deadline := idleAt.Add(2 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var n int64
	for {
		_, err := tr.Reserve(ctx, leaseReq(idleEstimate), time.Minute)
		var ex *budget.ExceededError
		if err == nil {
			n++
			continue
		}
		if !errors.As(err, &ex) {
			t.Fatal(err)
		}
		if n*idleEstimate >= room-idleEstimate {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2 s after the child went idle (it held %d): admitted %d x %d of the %d left; want all but at most one estimate",
				held, n, idleEstimate, room)
		}
		<-tick.C
	}
	t.Logf("the room came back %v after the child went idle (it held %d)", time.Since(idleAt).Round(time.Millisecond), held)
	if n*idleEstimate > room {
		t.Fatalf("admitted %d x %d of the %d left: more than the room", n, idleEstimate, room)
	}
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
}
