package admin

import (
	"bufio"
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/alert"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

// The history: alerts, the report and the usage events, as `budget alerts
// ls`, `budget report` and `budget export` give them, cut to the
// principal's scope.

// defaultAlerts is how many alerts GET /admin/v1/alerts lists by default.
const defaultAlerts = 100

func (h *Handler) listAlerts(w http.ResponseWriter, r *http.Request, p *Principal) error {
	n := defaultAlerts
	if s := r.URL.Query().Get("limit"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			return budget.Invalid("limit", s, "must be 1 or more")
		}
	}
	v, err := h.view(r.Context(), p)
	if err != nil {
		return err
	}
	as, err := h.cfg.Tracker.Alerts(r.Context(), n)
	if err != nil {
		return err
	}
	out := []alert.Object{}
	for i := range as {
		if v.seesAlert(&as[i]) {
			out = append(out, alert.ToObject(&as[i]))
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Alerts []alert.Object `json:"alerts"`
	}{out})
	return nil
}

// timeRange reads the query's since and until (defaults: the start of the
// history and until).
func timeRange(r *http.Request, until time.Time) (time.Time, time.Time, error) {
	q := r.URL.Query()
	return budget.ParseRange(q.Get("since"), q.Get("until"), until, "since")
}

// queryKey is the query's key filter, which must be in scope.
func queryKey(r *http.Request, v *view) (string, error) {
	k := strings.TrimSpace(r.URL.Query().Get("key"))
	if k == "" {
		return "", nil
	}
	if err := budget.CheckName("key", k); err != nil {
		return "", err
	}
	if !v.sees(budget.ObjectKey, v.keyPlaced(k)) {
		return "", v.outside(budget.ObjectKey, k)
	}
	return k, nil
}

// report is `budget report`: since, until, by, key and format (json, the
// default, or csv) as query parameters. A scoped principal's report holds
// only what was charged to its teams (or org).
func (h *Handler) report(w http.ResponseWriter, r *http.Request, p *Principal) error {
	q := budget.ReportQuery{}
	var err error
	if q.Since, q.Until, err = timeRange(r, h.cfg.Now()); err != nil {
		return err
	}
	if q.By, err = budget.ParseDims(r.URL.Query().Get("by")); err != nil {
		return err
	}
	format := cmp.Or(strings.TrimSpace(r.URL.Query().Get("format")), "json")
	if format != "json" && format != "csv" {
		return budget.Invalid("format", format, "want json or csv")
	}
	v, err := h.view(r.Context(), p)
	if err != nil {
		return err
	}
	if q.Key, err = queryKey(r, v); err != nil {
		return err
	}
	// What this process queued is in it: a proxied response's settlement
	// is written after the response. A store that takes no writes still
	// answers the read, with what it holds.
	h.cfg.Tracker.Flush(r.Context())
	rows, err := h.scopedReport(r, v, q)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		return jsonview.WriteReportCSV(w, q.By, rows)
	}
	w.Header().Set("Content-Type", "application/json")
	return jsonview.WriteReportJSON(w, q.By, rows)
}

// scopedReport is the report of q, of only what was charged to v's
// scope: grouped by team and org as well, the groups the scope does not
// cover dropped and the rest summed back into q's groups.
func (h *Handler) scopedReport(r *http.Request, v *view, q budget.ReportQuery) ([]budget.ReportRow, error) {
	if v.p.Scope.Global() {
		return h.cfg.Tracker.Report(r.Context(), q)
	}
	wide := q
	wide.By = append(slices.Clip(q.By), "team", "org")
	rows, err := h.cfg.Tracker.Report(r.Context(), wide)
	if err != nil {
		return nil, err
	}
	n := len(q.By)
	var out []budget.ReportRow
	for _, row := range rows { // sorted by q.By first, so equal groups are adjacent
		if !v.sees(budget.ObjectKey, budget.Placed{Team: row.Values[n], Org: row.Values[n+1]}) {
			continue
		}
		row.Values = row.Values[:n]
		if k := len(out); k > 0 && slices.Equal(out[k-1].Values, row.Values) {
			out[k-1].Totals.Add(&row.Totals)
			continue
		}
		out = append(out, row)
	}
	return out, nil
}

// usage streams `budget export`'s JSON lines of since..until (key: one
// key's), those charged to a scoped principal's teams only.
func (h *Handler) usage(w http.ResponseWriter, r *http.Request, p *Principal) error {
	since, until, err := timeRange(r, budget.HistoryEnd)
	if err != nil {
		return err
	}
	v, err := h.view(r.Context(), p)
	if err != nil {
		return err
	}
	key, err := queryKey(r, v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	sent := &sentWriter{w: w}
	bw := bufio.NewWriterSize(sent, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	_, err = h.cfg.Tracker.Export(r.Context(), since, until, key, func(u budget.Usage) error {
		if !v.sees(budget.ObjectKey, budget.Placed{Team: u.Team, Org: u.Org}) {
			return nil
		}
		return enc.Encode(jsonview.EventOf(&u))
	})
	if err == nil {
		err = bw.Flush()
	}
	switch {
	case err == nil:
		return nil
	case !sent.any:
		return err // nothing sent yet: a clean error answer
	}
	// The status and some lines are sent: cut the stream short, so the
	// client sees a broken body rather than a complete-looking one.
	h.cfg.Logger.Error("admin: usage export failed mid-stream", "err", err)
	panic(http.ErrAbortHandler)
}

// sentWriter notes whether anything was written through it.
type sentWriter struct {
	w   http.ResponseWriter
	any bool
}

func (s *sentWriter) Write(b []byte) (int, error) {
	s.any = true
	return s.w.Write(b)
}

// audit lists the audit log's entries the principal may see, oldest
// first: since (an instant or a date) and limit (the newest N) as query
// parameters, as `budget audit ls` takes them.
func (h *Handler) audit(w http.ResponseWriter, r *http.Request, p *Principal) error {
	q := r.URL.Query()
	f := budget.AuditFilter{Scope: p.Scope}
	f.Scope.ReadOnly = false // what it may see does not depend on it
	if s := q.Get("since"); strings.TrimSpace(s) != "" {
		t, err := budget.ParseInstant("since", s)
		if err != nil {
			return err
		}
		f.Since = t
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return budget.Invalid("limit", s, "must be 1 or more")
		}
		f.Limit = n
	}
	es, err := h.cfg.Tracker.Audit(r.Context(), f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		Entries []jsonview.AuditEntry `json:"entries"`
	}{jsonview.Audit(es)})
	return nil
}
