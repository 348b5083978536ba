package proxy

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

// BudgetPath is where a key holder asks what its budget has left
// (Middleware.Wrap answers it itself; nothing goes upstream).
const BudgetPath = "/v1/budget"

// Budget is what GET /v1/budget answers: the caller's key and the status
// of every limit that applies to it, the objects of `budget inspect
// --json`.
type Budget struct {
	Key    string            `json:"key"`
	Limits []jsonview.Status `json:"limits"`
}

// budget answers GET /v1/budget for a client with a valid gateway key: the
// limits that apply to that key (its own, its team's and its
// organisation's, and the default limits with its usage; its own per-user
// limits once per end user with usage in the window, a team's or an
// organisation's once with no user: their users may be other keys'), each
// in its window now with
// its forecast, read in one snapshot (budget.Tracker.Inspect). It costs no
// budget: nothing is reserved or recorded. Without a valid key it is the
// same 401 as on the other routes, in the shape of the family the request
// came from (Anthropic's when it carries anthropic-version).
func (m *Middleware) budget(x *exchange, r *http.Request) {
	f := familyOf(r)
	if !m.allowMethod(x, r, f, http.MethodGet) {
		return
	}
	key, ok := m.authenticate(x, r, f)
	if !ok {
		return
	}
	rep, err := m.t.Inspect(r.Context(), key, m.t.Now(), 0)
	if err != nil {
		m.unavailable(x, r, f, "read the budget", err)
		return
	}
	ownUsersOnly(&rep)
	m.outcome(x, OutcomeOK)
	x.Header().Set("Content-Type", "application/json")
	x.Header().Set("Cache-Control", "no-store")
	x.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_ = json.NewEncoder(x).Encode(Budget{Key: key, Limits: jsonview.Statuses(rep.Limits, rep.Forecasts, rep.At)})
	}
}

// ownUsersOnly replaces the per-user rows of a team's or an
// organisation's per-user limit (one per end user of the whole team or
// organisation, whichever key sent them) with one row of that limit with
// no user and no usage: a key holder sees no other key's end users. A
// per-value tag limit keeps its row per value: tags name the work (a
// project, a feature), not people, and every key of the team spends from
// those counters.
func ownUsersOnly(rep *budget.Report) {
	var sts []budget.Status
	var fs []*budget.Forecast
	seen := map[string]bool{}
	for i, st := range rep.Limits {
		l := &st.Limit
		if l.EachUser() && (l.Team != "" || l.Org != "") {
			if seen[l.ID] {
				continue
			}
			seen[l.ID] = true
			l.Subject = ""
			st.Used, st.Reserved, st.NextExpiry = 0, 0, time.Time{}
			sts, fs = append(sts, st), append(fs, nil)
			continue
		}
		sts, fs = append(sts, st), append(fs, rep.Forecasts[i])
	}
	rep.Limits, rep.Forecasts = sts, fs
}
