package memstore

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// alertRow is an alert with its delivery claim.
type alertRow struct {
	a          budget.Alert
	claimOwner string
	claimUntil int64
}

type alertKey struct {
	limitID, subject string
	start            int64
	threshold        int
}

func (t *tx) LogAlerts(_ context.Context, as []budget.Alert) error {
	if err := t.write(); err != nil {
		return err
	}
	own(t.st, "alerts", &t.st.alerts)
	for _, a := range as {
		if t.hasAlert(alertKey{a.LimitID, a.Subject, ns(a.WindowStart), a.Threshold}) {
			continue
		}
		a.WindowStart, a.At, a.ExhaustsAt = stored(a.WindowStart), stored(a.At), stored(a.ExhaustsAt)
		a.NextAttempt = a.At
		t.st.alerts[a.ID] = alertRow{a: a}
	}
	return nil
}

// hasAlert reports whether an alert of k is logged.
func (t *tx) hasAlert(k alertKey) bool {
	for _, r := range t.st.alerts {
		if (alertKey{r.a.LimitID, r.a.Subject, ns(r.a.WindowStart), r.a.Threshold}) == k {
			return true
		}
	}
	return false
}

func (t *tx) Alerts(_ context.Context, n int) ([]budget.Alert, error) {
	var out []budget.Alert
	for _, r := range t.st.alerts {
		out = append(out, r.a)
	}
	slices.SortFunc(out, func(a, b budget.Alert) int { return cmp.Or(b.At.Compare(a.At), strings.Compare(b.ID, a.ID)) })
	if len(out) > n {
		out = out[:max(n, 0)]
	}
	return out, nil
}

func (t *tx) ClaimAlerts(_ context.Context, owner string, now, until time.Time, max int) ([]budget.Alert, error) {
	if err := t.write(); err != nil {
		return nil, err
	}
	var due []alertRow
	for _, r := range t.st.alerts {
		if r.a.DeliveredAt.IsZero() && !r.a.NextAttempt.After(now) && (r.claimUntil <= now.UnixNano() || r.claimOwner == owner) {
			due = append(due, r)
		}
	}
	slices.SortFunc(due, func(a, b alertRow) int {
		return cmp.Or(a.a.NextAttempt.Compare(b.a.NextAttempt), a.a.At.Compare(b.a.At), strings.Compare(a.a.ID, b.a.ID))
	})
	if len(due) > max {
		due = due[:max]
	}
	own(t.st, "alerts", &t.st.alerts)
	out := make([]budget.Alert, len(due))
	for i, r := range due {
		r.claimOwner, r.claimUntil = owner, until.UnixNano()
		t.st.alerts[r.a.ID] = r
		out[i] = r.a
	}
	return out, nil
}

func (t *tx) SettleAlert(_ context.Context, id, owner string, deliveredAt, next time.Time) error {
	if err := t.write(); err != nil {
		return err
	}
	r, ok := t.st.alerts[id]
	if !ok || r.claimOwner != owner || !r.a.DeliveredAt.IsZero() {
		return budget.ClaimLost(id)
	}
	own(t.st, "alerts", &t.st.alerts)
	if deliveredAt.IsZero() {
		r.a.Attempts++
		r.a.NextAttempt = stored(next)
	} else {
		r.a.DeliveredAt = stored(deliveredAt)
	}
	r.claimOwner, r.claimUntil = "", 0
	t.st.alerts[id] = r
	return nil
}
