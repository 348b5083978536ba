package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra,
		suiteCase{"AlertsLoggedOncePerThreshold", testAlertsOnce},
		suiteCase{"AlertsFromTwoProcessesOnce", testAlertsTwoProcesses},
		suiteCase{"AlertDeliveryClaims", testAlertClaims},
		suiteCase{"AlertExhaustedOncePerWindow", testAlertExhausted},
	)
}

// thresholds counts the alerts of limit id by threshold.
func thresholds(t *testing.T, tr *budget.Tracker, id string) map[int]int {
	t.Helper()
	as, err := tr.Alerts(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for _, a := range as {
		if a.LimitID == id {
			out[a.Threshold]++
		}
	}
	return out
}

// A threshold is logged when the usage crosses it, with the usage and
// limit of that moment, once per window; duplicates cross nothing.
func testAlertsOnce(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h", Alerts: &[]int{100, 50, 80}}, 1000)
	if len(l.Alerts) != 3 || l.Alerts[0] != 50 {
		t.Fatalf("alerts = %v; want [50 80 100]", l.Alerts)
	}
	RecordSync(t, tr, ev("e1", "k", "p", "m", 499, 0, c.Now()))
	if got := thresholds(t, tr, l.ID); len(got) != 0 {
		t.Fatalf("alerts at 499 of 1000: %v; want none", got)
	}
	RecordSync(t, tr, ev("e1", "k", "p", "m", 499, 0, c.Now())) // a duplicate adds nothing
	if got := thresholds(t, tr, l.ID); len(got) != 0 {
		t.Fatalf("alerts after a duplicate: %v; want none", got)
	}
	c.Advance(time.Minute)
	RecordSync(t, tr, ev("e2", "k", "p", "m", 1, 0, c.Now()))
	as, err := tr.Alerts(ctx, 10)
	if err != nil || len(as) != 1 {
		t.Fatalf("Alerts = %+v, %v; want the 50%% one", as, err)
	}
	a := as[0]
	if a.Threshold != 50 || a.Used != 500 || a.Max != 1000 || a.Level != budget.LevelKey || a.Owner != "k" ||
		a.Kind != budget.AlertThreshold || a.Metric != budget.MetricTokens ||
		!a.At.Equal(c.Now()) || !a.WindowStart.Equal(T0) || !a.DeliveredAt.IsZero() {
		t.Fatalf("alert = %+v; want threshold 50 at used 500 of 1000, now, window %v, undelivered", a, T0)
	}
	// Fast enough to run out before the reset: the forecast says when.
	if a.ExhaustsAt.IsZero() || a.ForecastUsed <= 1000 {
		t.Fatalf("alert forecast = %d, exhausts %v; want over the limit and a time", a.ForecastUsed, a.ExhaustsAt)
	}
	RecordSync(t, tr, ev("e3", "k", "p", "m", 600, 0, c.Now()), ev("e4", "k", "p", "m", 600, 0, c.Now()))
	if got := thresholds(t, tr, l.ID); got[50] != 1 || got[80] != 1 || got[100] != 1 || len(got) != 3 {
		t.Fatalf("alerts after 1700 of 1000: %v; want 50, 80 and 100 once each", got)
	}
	// A raise moves the levels; a new window starts over.
	if _, _, err := tr.RaiseLimit(ctx, l.ID, 10000, time.Time{}); err != nil {
		t.Fatal(err)
	}
	c.Set(T0.Add(time.Hour))
	RecordSync(t, tr, ev("e5", "k", "p", "m", 5600, 0, c.Now()))
	if got := thresholds(t, tr, l.ID); got[50] != 2 || got[80] != 1 {
		t.Fatalf("alerts after 5600 of 11000 in the next window: %v; want a second 50 only", got)
	}
	// History recorded late, into a window that has ended, alerts no one.
	late := SetLimit(t, tr, budget.LimitSpec{Key: "late", Window: "1h", Alerts: &[]int{50}}, 100)
	RecordSync(t, tr, ev("old", "late", "p", "m", 90, 0, T0.Add(time.Minute)))
	if got := thresholds(t, tr, late.ID); len(got) != 0 {
		t.Fatalf("alerts of an ended window: %v; want none", got)
	}
	RecordSync(t, tr, ev("now", "late", "p", "m", 90, 0, c.Now()))
	if got := thresholds(t, tr, late.ID); got[50] != 1 {
		t.Fatalf("alerts of the current window: %v; want the 50", got)
	}
	noDrift(t, tr)
}

// Two processes crossing the same threshold log it once.
func testAlertsTwoProcesses(t *testing.T, newDB NewDB) {
	a, b, c := twoHandles(t, newDB)
	l := SetLimit(t, a, budget.LimitSpec{Team: "", Key: "k", Window: "daily", Alerts: &[]int{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}}, 1000)
	done := make(chan error, 2)
	for i, tr := range []*budget.Tracker{a, b} {
		go func() {
			for j := range 50 {
				if _, err := tr.RecordSync(ctx, ev(string(rune('a'+i))+string(rune('0'+j/10))+string(rune('0'+j%10)), "k", "p", "m", 11, 0, c.Now())); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	got := thresholds(t, a, l.ID)
	for p := 10; p <= 100; p += 10 {
		if got[p] != 1 {
			t.Fatalf("alerts by threshold after 1100 of 1000 from two processes: %v; want each once", got)
		}
	}
}

// Deliverers claim alerts until an expiry; a delivered alert is never
// claimed again, a failed one only after its retry delay.
func testAlertClaims(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily", Alerts: &[]int{50, 100}}, 100)
	RecordSync(t, tr, ev("e1", "k", "p", "m", 100, 0, c.Now()))
	got, err := tr.ClaimAlerts(ctx, "A", time.Minute, 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("ClaimAlerts(A) = %+v, %v; want both alerts", got, err)
	}
	if other, err := tr.ClaimAlerts(ctx, "B", time.Minute, 10); err != nil || len(other) != 0 {
		t.Fatalf("ClaimAlerts(B) while A holds them = %+v, %v; want none", other, err)
	}
	if err := tr.AlertDelivered(ctx, got[0].ID, "A"); err != nil {
		t.Fatal(err)
	}
	if err := tr.AlertFailed(ctx, got[1].ID, "A", 1); err != nil {
		t.Fatal(err)
	}
	if err := tr.AlertDelivered(ctx, got[0].ID, "A"); !errors.Is(err, budget.ErrClaimLost) {
		t.Fatalf("a second report on a delivered alert = %v; want ErrClaimLost", err)
	}
	if again, _ := tr.ClaimAlerts(ctx, "B", time.Minute, 10); len(again) != 0 {
		t.Fatalf("ClaimAlerts(B) right after a failure = %+v; want none before the 1 s retry delay", again)
	}
	c.Advance(time.Second)
	again, err := tr.ClaimAlerts(ctx, "B", time.Minute, 10)
	if err != nil || len(again) != 1 || again[0].ID != got[1].ID || again[0].Attempts != 1 {
		t.Fatalf("ClaimAlerts(B) after the delay = %+v, %v; want the failed alert, 1 attempt", again, err)
	}
	// B's claim expires unreported: A may take it over, and B's late
	// report is refused.
	c.Advance(time.Minute)
	if took, _ := tr.ClaimAlerts(ctx, "A", time.Minute, 10); len(took) != 1 {
		t.Fatalf("ClaimAlerts(A) after B's claim expired = %+v; want the alert", took)
	}
	if err := tr.AlertDelivered(ctx, got[1].ID, "B"); !errors.Is(err, budget.ErrClaimLost) {
		t.Fatalf("B's report after losing the claim = %v; want ErrClaimLost", err)
	}
	if d := []time.Duration{budget.AlertRetryDelay(1), budget.AlertRetryDelay(2), budget.AlertRetryDelay(9), budget.AlertRetryDelay(50)}; d[0] != time.Second || d[1] != 2*time.Second || d[2] != 256*time.Second || d[3] != 5*time.Minute {
		t.Fatalf("retry delays %v; want 1s, 2s, 256s, then at most 5m", d)
	}
}

// exhausted are the AlertExhausted alerts of limit id.
func exhausted(t *testing.T, tr *budget.Tracker, id string) []budget.Alert {
	t.Helper()
	as, err := tr.Alerts(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []budget.Alert
	for _, a := range as {
		if a.LimitID == id && a.Kind == budget.AlertExhausted {
			out = append(out, a)
		}
	}
	return out
}

// The first retryable refusal of a reservation by a limit with thresholds
// logs an exhausted alert, once per window; a check, a refusal waiting
// cannot lift and a limit without thresholds log none.
func testAlertExhausted(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h", Alerts: &[]int{100}}, 100)
	quiet := SetLimit(t, tr, budget.LimitSpec{Key: "q", Window: "1h"}, 100)
	req := func(k string, n int64) budget.Request {
		return budget.Request{Key: k, Provider: "p", Model: "m", Estimate: tokens(n)}
	}
	if _, err := tr.Reserve(ctx, req("k", 90), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Reserve(ctx, req("q", 90), time.Hour); err != nil {
		t.Fatal(err)
	}
	if d, err := tr.Check(ctx, req("k", 20)); err != nil || d.Allowed {
		t.Fatalf("Check = %+v, %v; want refused", d, err)
	}
	if got := exhausted(t, tr, l.ID); len(got) != 0 {
		t.Fatalf("alerts after a refused check: %+v; want none (check is read-only)", got)
	}
	// An estimate above the whole limit waits for nothing: not exhausted.
	if _, err := tr.Reserve(ctx, req("k", 101), time.Minute); !isExceeded(err) {
		t.Fatalf("Reserve(101 of 100) = %v; want refused", err)
	}
	if got := exhausted(t, tr, l.ID); len(got) != 0 {
		t.Fatalf("alerts after an oversized estimate: %+v; want none", got)
	}
	c.Advance(time.Minute)
	for range 3 {
		if _, err := tr.Reserve(ctx, req("k", 20), time.Minute); !isExceeded(err) {
			t.Fatalf("Reserve(20 after 90 of 100) = %v; want refused", err)
		}
	}
	if _, err := tr.Reserve(ctx, req("q", 20), time.Minute); !isExceeded(err) {
		t.Fatalf("Reserve(q) = %v; want refused", err)
	}
	if got := exhausted(t, tr, quiet.ID); len(got) != 0 {
		t.Fatalf("alerts of a limit without thresholds: %+v; want none", got)
	}
	got := exhausted(t, tr, l.ID)
	if len(got) != 1 {
		t.Fatalf("exhausted alerts after three refusals: %+v; want one", got)
	}
	a := got[0]
	if a.Threshold != 0 || a.Used != 90 || a.Max != 100 || !a.WindowStart.Equal(T0) || !a.At.Equal(c.Now()) ||
		a.Level != budget.LevelKey || a.Owner != "k" || !a.DeliveredAt.IsZero() || a.Metric != budget.MetricTokens {
		t.Fatalf("exhausted alert = %+v; want threshold 0, 90 held of 100 tokens, window %v, now, undelivered", a, T0)
	}
	if th := thresholds(t, tr, l.ID); len(th) != 1 || th[0] != 1 {
		t.Fatalf("alerts by threshold = %v; want only the exhausted one (reservations cross no threshold)", th)
	}
	// It is delivered like the others.
	claimed, err := tr.ClaimAlerts(ctx, "A", time.Minute, 10)
	if err != nil || len(claimed) != 1 || claimed[0].ID != a.ID || claimed[0].Kind != budget.AlertExhausted {
		t.Fatalf("ClaimAlerts = %+v, %v; want the exhausted alert", claimed, err)
	}
	// A limit with room for the smallest output is not exhausted when
	// another limit refuses.
	roomy := SetLimit(t, tr, budget.LimitSpec{Key: "f", Window: "1h", Alerts: &[]int{100}}, 1000)
	SetLimit(t, tr, budget.LimitSpec{Key: "f", Metric: "input", Window: "1h"}, 100)
	if _, err := tr.Reserve(ctx, budget.Request{Key: "f", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: 95}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.ReserveWith(ctx, budget.Request{Key: "f", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: 10, Output: 900}},
		budget.ReserveOptions{TTL: time.Minute, MinOutput: 1}); !isExceeded(err) {
		t.Fatalf("ReserveWith(input 10 after 95 of 100) = %v; want refused", err)
	}
	if got := exhausted(t, tr, roomy.ID); len(got) != 0 {
		t.Fatalf("exhausted alerts of a limit with room for the smallest output: %+v; want none", got)
	}
	// The next window runs out anew.
	c.Set(T0.Add(time.Hour))
	if _, err := tr.Reserve(ctx, req("k", 100), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Reserve(ctx, req("k", 1), time.Minute); !isExceeded(err) {
		t.Fatalf("Reserve(1 after 100 of 100) = %v; want refused", err)
	}
	if got := exhausted(t, tr, l.ID); len(got) != 2 || !got[0].WindowStart.Equal(T0.Add(time.Hour)) {
		t.Fatalf("exhausted alerts after the next window ran out: %+v; want a second one for it", got)
	}
}

func isExceeded(err error) bool {
	var ex *budget.ExceededError
	return errors.As(err, &ex)
}
