package sqlrow

import (
	"cmp"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Alert is an alerts row.
type Alert struct {
	ID           string `db:"id"`
	LimitID      string `db:"limit_id"`
	Level        string `db:"level"`
	Owner        string `db:"owner"`
	Subject      string `db:"subject"`
	WindowStart  int64  `db:"window_start"`
	Threshold    int    `db:"threshold"`
	Used         int64  `db:"used"`
	Max          int64  `db:"max"`
	At           int64  `db:"at"`
	ForecastUsed int64  `db:"forecast_used"`
	ExhaustsAt   int64  `db:"exhausts_at"`
	DeliveredAt  int64  `db:"delivered_at"`
	Attempts     int    `db:"attempts"`
	NextAttempt  int64  `db:"next_attempt"`
	Kind         string `db:"kind"`
	Metric       string `db:"metric"`
}

// AlertCols are the columns of an Alert, in order.
const AlertCols = `id, limit_id, level, owner, subject, window_start, threshold, used, max, at, forecast_used, exhausts_at, delivered_at, attempts, next_attempt, kind, metric`

// AlertInsertCols are the columns a new alert is written with.
const AlertInsertCols = `id, limit_id, level, owner, subject, window_start, threshold, used, max, at, forecast_used, exhausts_at, next_attempt, kind, metric`

// AlertArgs appends a's values in AlertInsertCols order (its first try is
// due at once).
func AlertArgs(args []any, a *budget.Alert) []any {
	return append(args, a.ID, a.LimitID, string(a.Level), a.Owner, a.Subject, Ns(a.WindowStart), a.Threshold, a.Used, a.Max,
		Ns(a.At), a.ForecastUsed, Ns(a.ExhaustsAt), Ns(a.At), string(cmp.Or(a.Kind, budget.AlertThreshold)), string(a.Metric))
}

// Decode is the row as a budget.Alert.
func (r *Alert) Decode() budget.Alert {
	return budget.Alert{ID: r.ID, LimitID: r.LimitID, Level: budget.Level(r.Level), Owner: r.Owner, Subject: r.Subject,
		WindowStart: FromNs(r.WindowStart), Threshold: r.Threshold, Used: r.Used, Max: r.Max, At: FromNs(r.At),
		ForecastUsed: r.ForecastUsed, ExhaustsAt: FromNs(r.ExhaustsAt), DeliveredAt: FromNs(r.DeliveredAt),
		Attempts: r.Attempts, NextAttempt: FromNs(r.NextAttempt), Kind: budget.AlertKind(r.Kind), Metric: budget.Metric(r.Metric)}
}

// DecodeAlerts decodes rows.
func DecodeAlerts(rows []Alert) []budget.Alert {
	out := make([]budget.Alert, len(rows))
	for i := range rows {
		out[i] = rows[i].Decode()
	}
	return out
}
