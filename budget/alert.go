package budget

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Alerts: an outbox of threshold crossings.
//
// A limit with thresholds (Limit.Alerts, percent of the limit in force)
// logs an Alert when the usage of one of its current (not yet ended)
// windows crosses one: in the
// same transaction as the usage that crossed it, once per (limit,
// subject, window, threshold) however many processes record (the store
// keeps the first). Delivery is at least once, from any number of
// deliverers: each claims a few undelivered alerts until an expiry
// (ClaimAlerts), tries them, and reports each as delivered, which is
// final, or failed, which schedules the next try (AlertRetryDelay).

// Alert is one logged threshold crossing, or one exhausted window.
type Alert struct {
	ID          string
	LimitID     string
	Level       Level
	Owner       string // the key, team or org; "" for a default limit
	Subject     string // the counter's subject (see Limit.Subject)
	Kind        AlertKind
	WindowStart time.Time
	Threshold   int // percent; 0 for an AlertExhausted one
	// Used is the window's usage right after the crossing; for an
	// AlertExhausted one, its usage and holds when the refusal found no
	// room (in reserve mode the holds are what ran it out).
	Used int64
	Max  int64 // the limit in force then
	// Metric is the limit's: what Used and Max count (micro-dollars for
	// usd). "" for an alert logged before alerts kept it whose limit was
	// gone by then.
	Metric Metric
	At     time.Time
	// The forecast when it was logged: ForecastUsed -1 and a zero
	// ExhaustsAt when none (see Forecast).
	ForecastUsed int64
	ExhaustsAt   time.Time
	DeliveredAt  time.Time // zero until a deliverer reported it delivered
	Attempts     int       // failed deliveries so far
	NextAttempt  time.Time // no delivery is tried before it
}

// AlertKind tells a threshold crossing from an exhausted window.
type AlertKind string

const (
	AlertThreshold AlertKind = "threshold"
	// AlertExhausted is logged on the first retryable refusal of a
	// reservation by a limit with thresholds, once per (limit, subject,
	// window): in reserve mode requests are refused before the usage
	// reaches 100 %, so a 100 % threshold may never fire while users are
	// refused. Its Threshold is 0, which no threshold can be, so the
	// store's one-per-(limit, subject, window, threshold) rule keeps it
	// once too.
	AlertExhausted AlertKind = "exhausted"
)

// AlertRetryDelay is the wait after the n-th failed delivery (n >= 1):
// 1 s, doubling, at most 5 minutes.
func AlertRetryDelay(n int) time.Duration {
	d := time.Second
	for i := 1; i < n && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// alertsOf are the alerts an addition to window w (of limit l) from
// before to after logs at at: one per threshold it crosses.
func alertsOf(l *Limit, start time.Time, before, after int64, at time.Time) []Alert {
	if len(l.Alerts) == 0 || after <= before {
		return nil
	}
	max := l.MaxAt(at)
	var out []Alert
	for _, p := range l.Alerts {
		lv := alertLevel(max, p)
		if before < lv && after >= lv {
			out = append(out, Alert{ID: NewID("alt_"), LimitID: l.ID, Level: l.Level(), Owner: l.Owner(), Subject: l.Subject,
				Kind: AlertThreshold, Metric: l.Metric, WindowStart: start, Threshold: p, Used: after, Max: max, At: at, ForecastUsed: -1})
		}
	}
	return out
}

// alerts are the thresholds crossed by the counters this batch changed,
// once Apply has told which events landed: each window from its total
// before the batch to its total after, with the forecast of the moment
// (the store's recent usage, this batch's included).
func (b *batch) alerts(ctx context.Context, tx Tx) ([]Alert, error) {
	var out []Alert
	h, hasHistory := tx.(HistoryTx)
	for i, d := range b.ws.CounterDeltas(b.inserted) {
		w := b.touched[i]
		// A window that has ended (history recorded late) alerts no one:
		// its crossing is not logged.
		if len(w.l.Alerts) == 0 || !w.known || d == 0 || w.end <= b.now.UnixNano() {
			continue
		}
		after := min(w.base+d, MaxTokens)
		start := time.Unix(0, w.start).UTC()
		for _, a := range alertsOf(w.l, start, w.base, after, b.now) {
			if !hasHistory { // nothing to forecast from
				out = append(out, a)
				continue
			}
			st := w.status(a.At)
			st.Used = after
			since := ForecastSpan(start, a.At)
			var recent int64
			if since.Before(a.At) {
				var err error
				if recent, err = h.SumUsage(ctx, w.l, since, a.At); err != nil {
					return nil, err
				}
			}
			f := ForecastOf(&st, recent, since, a.At)
			a.ForecastUsed, a.ExhaustsAt = f.ForecastUsed, f.ExhaustsAt
			out = append(out, a)
		}
	}
	return out, nil
}

// exhaustedOf are the AlertExhausted alerts of a refused reservation (d
// decided on est at at, its output allowed to shrink to minOut): one per
// limit with thresholds that has no room even for the smallest output,
// and whose refusal waiting can lift, as its window resets and that
// estimate alone fits it. A limit that refused only because another did
// is not exhausted. Only Reserve logs them: a check stays read-only.
func exhaustedOf(d *Decision, est Estimate, minOut int64, at time.Time) []Alert {
	least := est
	if minOut > 0 && minOut < est.Output {
		least.Output = minOut
	}
	var out []Alert
	for i := range d.Limits {
		s := &d.Limits[i]
		l := &s.Limit
		if len(l.Alerts) == 0 || l.Window.Kind == Once || l.Metric == MetricConcurrent {
			continue
		}
		e := least.Amount(l.Metric)
		held := min(s.Used+s.Reserved, MaxTokens)
		if e > s.Max || (e > 0 && held+e <= s.Max) || (e == 0 && held < s.Max) {
			continue
		}
		out = append(out, Alert{ID: NewID("alt_"), LimitID: l.ID, Level: l.Level(), Owner: l.Owner(), Subject: l.Subject,
			Kind: AlertExhausted, Metric: l.Metric, WindowStart: s.WindowStart, Used: held, Max: s.Max, At: at, ForecastUsed: -1})
	}
	return out
}

// exhausted are the AlertExhausted alerts of the reservations this try
// of the batch refused.
func (b *batch) exhausted() []Alert {
	var out []Alert
	for _, o := range b.ops {
		if o.kind == opReserve && o.active() {
			out = append(out, o.out.exhausted...)
		}
	}
	return out
}

// Alerts lists the newest n alerts, newest first.
func (t *Tracker) Alerts(ctx context.Context, n int) ([]Alert, error) {
	var out []Alert
	err := t.store.View(ctx, inRole(alertTx, func(_ Tx, at AlertTx) error {
		var err error
		out, err = at.Alerts(ctx, n)
		return err
	}))
	return out, err
}

// ClaimAlerts claims up to max undelivered alerts due at now for owner
// until now+ttl, oldest first: no other owner is given them until then,
// unless this owner reports them first.
func (t *Tracker) ClaimAlerts(ctx context.Context, owner string, ttl time.Duration, max int) ([]Alert, error) {
	if strings.TrimSpace(owner) == "" {
		return nil, invalid("owner", owner, "must not be empty")
	}
	now := t.now()
	var out []Alert
	err := t.store.Update(ctx, inRole(alertTx, func(_ Tx, at AlertTx) error {
		var err error
		out, err = at.ClaimAlerts(ctx, owner, now, now.Add(ttl), max)
		return err
	}))
	return out, err
}

// AlertDelivered records that owner delivered alert id: it is never sent
// again.
func (t *Tracker) AlertDelivered(ctx context.Context, id, owner string) error {
	now := t.now()
	return t.settleAlert(ctx, id, owner, now, time.Time{})
}

// AlertFailed records a failed delivery of alert id by owner: its next
// try is AlertRetryDelay(attempts) from now, by whichever deliverer
// claims it then.
func (t *Tracker) AlertFailed(ctx context.Context, id, owner string, attempts int) error {
	next := t.now().Add(AlertRetryDelay(attempts))
	return t.settleAlert(ctx, id, owner, time.Time{}, next)
}

func (t *Tracker) settleAlert(ctx context.Context, id, owner string, delivered, next time.Time) error {
	return t.store.Update(ctx, inRole(alertTx, func(_ Tx, at AlertTx) error {
		return at.SettleAlert(ctx, id, owner, delivered, next)
	}))
}

// ErrClaimLost is returned when reporting on an alert whose claim another
// deliverer holds now (it expired): the report is dropped.
var ErrClaimLost = errors.New("alert claim lost")

// ClaimLost is the error a store returns from SettleAlert when the claim
// is no longer owner's.
func ClaimLost(id string) error { return fmt.Errorf("alert %s: %w", id, ErrClaimLost) }
