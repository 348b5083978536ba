package storetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// The lease children of the multi-process cases (process_cases.go,
// process_lease.go): each runs a Tracker with leases, journaled in the
// database's journal directory.

// leaseRoles are the children of these cases, by role.
var leaseRoles = map[string]func(ctx context.Context, tr *budget.Tracker, n int) error{
	"leasekill": leaseKill,
	"leasestop": leaseStop,
	"leaseload": leaseLoad,
	"leaseidle": leaseIdle,
	"leasecli":  leaseCLI,
}

// leaseCLI warms its route's lease (three reservations, committed), then
// reserves once more with NoLease, as the CLI's reserve does, prints that
// reservation's id and exits, closing its Tracker (which gives its leases
// back and settles what they carved).
func leaseCLI(ctx context.Context, tr *budget.Tracker, _ int) error {
	for range 3 {
		r, err := tr.Reserve(ctx, leaseReq(100), time.Minute)
		if err != nil {
			return err
		}
		if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 50, Output: 50}); err != nil {
			return err
		}
	}
	if tr.Stats().Leased == 0 {
		return errors.New("no reservation came from a lease")
	}
	r, err := tr.ReserveWith(ctx, leaseReq(100), budget.ReserveOptions{TTL: time.Minute, NoLease: true})
	if err != nil {
		return err
	}
	fmt.Println(r.ID)
	return tr.Close(ctx)
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

// leaseKill: each goroutine reserves n (ExpireCharge) and commits two in three
// of them at a usage of its own; then the child says so and waits
// for SIGKILL with the rest in flight.
func leaseKill(ctx context.Context, tr *budget.Tracker, n int) error {
	err := concurrently(goroutinesPerChild, func(g int) error {
		for i := range n {
			r, err := reserveCharged(ctx, tr, 20*time.Second)
			if err != nil {
				return err
			}
			if i%3 != 2 {
				if _, err := tr.Commit(ctx, r.ID, killUsage(g, i)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if tr.Stats().Leased == 0 {
		// Killed now, it would prove only the store path's recovery.
		return errors.New("no reservation came from a lease")
	}
	fmt.Println("ready")
	select {}
}

// leaseStop: as leaseKill, committing one in two; after "ready" it is stopped
// (SIGSTOP) while another process recovers its leases, continued,
// and told on stdin to commit those still in flight.
func leaseStop(ctx context.Context, tr *budget.Tracker, n int) error {
	var inflight [goroutinesPerChild][]string
	err := concurrently(goroutinesPerChild, func(g int) error {
		for i := range n {
			r, err := reserveCharged(ctx, tr, time.Minute)
			if err != nil {
				return err
			}
			if i%2 == 1 {
				inflight[g] = append(inflight[g], r.ID)
				continue
			}
			if _, err := tr.Commit(ctx, r.ID, killUsage(g, i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Its commits written first: stopped inside a write transaction it
	// would hold row locks (on PostgreSQL) that the recovery waits for
	// until the server ends its session, a stall this case is not about.
	if _, err := tr.Flush(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	err = concurrently(goroutinesPerChild, func(g int) error {
		for j, id := range inflight[g] {
			if _, err := tr.Commit(ctx, id, stopUsage(2*j+1)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := tr.Flush(ctx); err != nil {
		return err
	}
	st := tr.Stats()
	fmt.Println(st.LeasesLost, st.LeaseLate)
	return nil
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

// reserveCharged is the lease children's reservation: 40 input and 60
// output tokens on key k, charged on expiry.
func reserveCharged(ctx context.Context, tr *budget.Tracker, ttl time.Duration) (*budget.Reservation, error) {
	return tr.ReserveWith(ctx, budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: 40, Output: 60}},
		budget.ReserveOptions{TTL: ttl, OnExpiry: budget.ExpireCharge})
}

// killUsage is what goroutine g of a leasekill child commits for its
// i-th reservation.
func killUsage(g, i int) budget.Usage {
	return budget.Usage{Input: int64(10 + g), Output: int64(20 + i%7*30)}
}

// stopUsage is what a leasestop child commits, once continued, for its
// i-th reservation (i odd): one in two is 20 output tokens over the
// estimate of 40 + 60.
func stopUsage(i int) budget.Usage {
	return budget.Usage{Input: 40, Output: int64(50 + i%4*10)}
}
