package dashboard

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
)

// limitPage is a limit's page: its row, its window's burn-down and the
// buckets of the chart as a table.
type limitPage struct {
	page
	Row        limitRow
	Window     string // "2026-03-02 18:00 UTC to 2026-03-02 19:00 UTC"
	Raises     []string
	Chart      *burnChart
	Table      []seriesRow
	Concurrent bool
}

// errNoStatus is a limit that exists but has no status for the subject
// asked: a default or per-user limit asked without a key or user that
// has used it.
var errNoStatus = errors.New("no status")

func (h *Handler) serveLimit(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := h.clock()
	q := r.URL.Query()
	id, subject := strings.TrimSpace(q.Get("id")), q.Get("subject")
	if id == "" {
		h.fail(w, r, http.StatusBadRequest, "Which limit? Give its id: /limit?id=ID.", nil)
		return
	}
	st, f, err := h.status(ctx, id, subject, c)
	switch {
	case errors.Is(err, budget.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, "There is no limit "+id+".", nil)
		return
	case errors.Is(err, errNoStatus):
		h.fail(w, r, http.StatusNotFound, "Limit "+id+" counts per key or per end user: open it from the overview, "+
			"where each key or user that used it in its current window has a row.", nil)
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, "The budget could not be read.", err)
		return
	}
	p := limitPage{page: h.page("Limit "+id, c), Row: rowOf(&st, f, c)}
	if h.cfg.Manage {
		p.Manage = &manage{Limit: editLimit(st.Limit.ID, p.Row.Limit)}
	}
	l := &st.Limit
	for _, rs := range l.ActiveRaises(c.now) {
		s := "+" + amount(l.Metric, rs.Amount) + " (" + rs.ID + ")"
		if !rs.Until.IsZero() {
			s += " until " + c.at(rs.Until)
		}
		p.Raises = append(p.Raises, s)
	}
	if l.Metric == budget.MetricConcurrent || st.WindowStart.IsZero() {
		p.Concurrent = l.Metric == budget.MetricConcurrent
		h.render(w, r, http.StatusOK, "limit", p)
		return
	}
	end := chartEnd(&st, c.now)
	p.Window = c.at(st.WindowStart) + " to "
	if l.Window.Resets() && !forever(st.ResetAt) {
		p.Window += c.at(st.ResetAt)
	} else {
		p.Window += "never (it does not reset)"
	}
	edges := bucketEdges(st.WindowStart, c.now, end)
	var usage []int64
	if len(edges) > 1 {
		if usage, err = h.cfg.Series(ctx, l, edges); err != nil {
			h.fail(w, r, http.StatusInternalServerError, "The usage of the window could not be read.", err)
			return
		}
	}
	ch, rows := burnDown(&st, f, edges, usage, c.now, c)
	p.Chart, p.Table = &ch, rows
	h.render(w, r, http.StatusOK, "limit", p)
}

// status is limit id's status for subject at c.now, with its forecast:
// from the Inspect of its key (the subject's key for a default limit),
// team or org.
func (h *Handler) status(ctx context.Context, id, subject string, c clock) (budget.Status, *budget.Forecast, error) {
	t := h.cfg.Tracker
	ls, err := t.Limits(ctx, "")
	if err != nil {
		return budget.Status{}, nil, err
	}
	i := slices.IndexFunc(ls, func(l budget.Limit) bool { return l.ID == id })
	if i < 0 {
		return budget.Status{}, nil, budget.ErrNotFound
	}
	l := &ls[i]
	var rep budget.Report
	switch l.Level() {
	case budget.LevelKey:
		rep, err = t.Inspect(ctx, l.Key, c.now, 0)
	case budget.LevelTeam, budget.LevelOrg:
		rep, err = t.InspectOwned(ctx, l.Level(), l.Owner(), c.now, 0)
	default:
		k := budget.DefaultSubjectKey(subject)
		if k == "" {
			return budget.Status{}, nil, errNoStatus
		}
		rep, err = t.Inspect(ctx, k, c.now, 0)
	}
	if err != nil {
		return budget.Status{}, nil, err
	}
	for i := range rep.Limits {
		if st := &rep.Limits[i]; st.Limit.ID == id && st.Limit.Subject == subject {
			return *st, rep.Forecasts[i], nil
		}
	}
	return budget.Status{}, nil, errNoStatus
}
