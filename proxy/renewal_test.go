package proxy_test

import (
	"sync"
	"time"

	"github.com/tokenbudget/tokenbudget/proxy"
)

// renewals stand in for the proxy's renewal timers (envOptions.renewals):
// each time the proxy arms or re-arms one, the arming is handed to the
// test on armed, and nothing renews until the test fires it. The test
// says when a renewal happens and the tracker's clock (envOptions.clock)
// says at which instant; no test waits for the wall clock to get there.
type renewals struct{ armed chan renewal }

// renewal is one arming of a renewal timer.
type renewal struct {
	every time.Duration // the delay the proxy asked for
	t     *renewTimer
}

// renewTimer is a proxy.RenewTimer that goes off only when fired.
type renewTimer struct {
	r       *renewals
	f       func()
	mu      sync.Mutex
	pending bool // armed, neither fired nor stopped since
	stopped bool // Stop was called
}

func newRenewals() *renewals { return &renewals{armed: make(chan renewal, 64)} }

func (r *renewals) after(d time.Duration, f func()) proxy.RenewTimer {
	t := &renewTimer{r: r, f: f}
	t.arm(d)
	return t
}

func (t *renewTimer) arm(d time.Duration) {
	t.mu.Lock()
	t.pending = true
	t.mu.Unlock()
	t.r.armed <- renewal{every: d, t: t}
}

func (t *renewTimer) Reset(d time.Duration) bool {
	t.mu.Lock()
	was := t.pending
	t.mu.Unlock()
	t.arm(d)
	return was
}

func (t *renewTimer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.pending
	t.pending, t.stopped = false, true
	return was
}

// fire sets the timer off in the caller's goroutine: when it returns, the
// renewal it runs is over, written to the store or failed. It reports
// false, running nothing, when the timer is not pending (stopped).
func (r renewal) fire() bool {
	r.t.mu.Lock()
	was := r.t.pending
	r.t.pending = false
	r.t.mu.Unlock()
	if was {
		r.t.f()
	}
	return was
}

// stopped reports whether the proxy stopped the timer.
func (r renewal) stopped() bool {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	return r.t.stopped
}

// renewal is the next arming of a renewal timer (envOptions.renewals).
func (e *env) renewal() renewal {
	e.t.Helper()
	select {
	case r := <-e.renewals.armed:
		return r
	case <-time.After(20 * time.Second):
		e.t.Fatal("the proxy armed no renewal in 20s")
		return renewal{}
	}
}

// armedRenewals is how many armings of renewal timers the test has not
// taken (envOptions.renewals).
func (e *env) armedRenewals() int { return len(e.renewals.armed) }
