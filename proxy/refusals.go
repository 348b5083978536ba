package proxy

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// DefaultRefusals is how many refusals NewRefusals keeps when asked for
// none.
const DefaultRefusals = 100

// Refusal is one request a budget limit refused.
type Refusal struct {
	At    time.Time
	Key   string // the gateway key's name ("" when it could not be looked up)
	Limit string // the id of the limit that refused (X-Tokenbudget-Limit)
	Scope string // its scope, "global" or "model=gpt-4o" (X-Tokenbudget-Limit-Scope)
	Level string // whose limit it is: key, team, org or default
	// Code is the refusal's error code: CodeBudgetExceeded, or
	// CodeUnpriced for a model with no price under a dollar limit (Limit
	// is then that dollar limit).
	Code string
}

// Refusals keeps the most recent budget refusals of a handler in a ring
// of fixed size, for a dashboard: memory only, per process, lost on
// restart. Wrap records them. It is safe for concurrent use.
type Refusals struct {
	// Now stamps each refusal. (Optional; default time.Now.)
	Now func() time.Time

	mu   sync.Mutex
	ring []Refusal
	next int // where the next refusal goes
	full bool
}

// NewRefusals returns a ring of the n most recent refusals
// (DefaultRefusals when n <= 0).
func NewRefusals(n int) *Refusals {
	if n <= 0 {
		n = DefaultRefusals
	}
	return &Refusals{ring: make([]Refusal, n)}
}

// Add records r, dropping the oldest refusal when the ring is full.
func (rs *Refusals) Add(r Refusal) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.ring[rs.next] = r
	rs.next = (rs.next + 1) % len(rs.ring)
	if rs.next == 0 {
		rs.full = true
	}
}

// List returns the refusals kept, newest first.
func (rs *Refusals) List() []Refusal {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	n := rs.next
	if rs.full {
		n = len(rs.ring)
	}
	out := make([]Refusal, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, rs.ring[(rs.next-i+len(rs.ring))%len(rs.ring)])
	}
	return out
}

// Wrap returns next (a handler that serves the Middleware, such as
// NewHandler's) recording each budget refusal the Middleware answers: a
// request over a limit, or for a model with no price under a dollar
// limit. The Middleware says so through the request's context, so an
// upstream's own 429 or a parked provider's is never taken for one. The
// key's name is looked up in keys with the request's secret, read before
// next removes it and kept only while the request lasts; keys caches it,
// as the middleware's lookup just did.
func (rs *Refusals) Wrap(next http.Handler, keys KeyLookup) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret := RequestSecret(r)
		note := &refusalNote{}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), refusalNoteKey{}, note)))
		if !note.refused {
			return
		}
		ref := Refusal{Limit: note.limit, Scope: note.scope, Level: note.level, Code: note.code}
		if rs.Now != nil {
			ref.At = rs.Now()
		} else {
			ref.At = time.Now()
		}
		if keys != nil && secret != "" {
			ref.Key, _ = keys.Lookup(context.WithoutCancel(r.Context()), secret)
		}
		rs.Add(ref)
	})
}

// refusalNote is where the Middleware tells Refusals.Wrap of the budget
// refusal it answered (Middleware.writeRefusal), on the request's own
// goroutine, before Wrap reads it.
type refusalNote struct {
	refused                   bool
	limit, scope, level, code string
}

type refusalNoteKey struct{}
