package jsonview_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

// TestStatusForecast: a status's forecast fields are null where there is
// none (no forecast, a window that never resets, no exhaustion before the
// reset) and whole-second UTC instants otherwise; alerts are [] when none.
func TestStatusForecast(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	w, err := budget.ParseWindow("daily", "", "")
	if err != nil {
		t.Fatal(err)
	}
	st := budget.Status{Limit: budget.Limit{ID: "l", Key: "k", Scope: budget.ScopeGlobal, Metric: budget.MetricTokens, Max: 100,
		Window: w, Enabled: true}, Max: 100, Used: 60, WindowStart: at.Truncate(24 * time.Hour), ResetAt: at.Add(12 * time.Hour)}
	paris, _ := time.LoadLocation("Europe/Paris")
	for _, tc := range []struct {
		name string
		f    *budget.Forecast
		want string
	}{
		{"none", nil, `"forecast_used":null,"exhausts_at":null`},
		{"never resets", &budget.Forecast{ForecastUsed: -1}, `"forecast_used":null,"exhausts_at":null`},
		{"not before the reset", &budget.Forecast{ForecastUsed: 90}, `"forecast_used":90,"exhausts_at":null`},
		{"runs out", &budget.Forecast{ForecastUsed: 240, ExhaustsAt: time.Date(2026, 3, 2, 15, 30, 0, 0, paris)},
			`"forecast_used":240,"exhausts_at":"2026-03-02T14:30:00Z"`},
	} {
		b, err := json.Marshal(jsonview.StatusOf(&st, tc.f, at))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(string(b), tc.want+"}") || !strings.Contains(string(b), `"alerts":[]`) {
			t.Errorf("%s: got %s; want it to end with %s and hold \"alerts\":[]", tc.name, b, tc.want)
		}
	}
	if got := jsonview.Statuses([]budget.Status{st}, nil, at); got[0].ForecastUsed != nil || got[0].ExhaustsAt != nil {
		t.Errorf("Statuses without forecasts: got %+v; want nulls", got[0])
	}
}

// TestCSVCell: the OWASP list of formula triggers, and nothing else.
func TestCSVCell(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"=1": "'=1", "+1": "'+1", "-1": "'-1", "@a": "'@a", "\tx": "'\tx", "\rx": "'\rx",
		"": "", "a=b": "a=b", "'=1": "'=1", "gpt-4o": "gpt-4o", "12": "12",
	} {
		if got := jsonview.CSVCell(in); got != want {
			t.Errorf("jsonview.CSVCell(%q) = %q; want %q", in, got, want)
		}
	}
}
