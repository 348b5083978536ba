package dashboard

import (
	"net/http"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
)

// keyPage is a key's page: the limits that apply to it and its spend of
// the last SpendDays days by model.
type keyPage struct {
	page
	Key       string
	Team, Org string
	Rows      []limitRow
	Spend     spend
	Days      int // SpendDays
}

func (h *Handler) serveKey(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := h.clock()
	key := strings.TrimSpace(r.URL.Query().Get("name"))
	if key == "" {
		h.fail(w, r, http.StatusBadRequest, "Which key? Give its name: /key?name=NAME.", nil)
		return
	}
	t := h.cfg.Tracker
	rep, err := t.Inspect(ctx, key, c.now, 0)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The budget could not be read.", err)
		return
	}
	p := keyPage{page: h.page("Key "+key, c), Key: key, Days: SpendDays}
	for i := range rep.Limits {
		p.Rows = append(p.Rows, rowOf(&rep.Limits[i], rep.Forecasts[i], c))
	}
	ts, err := t.Teams(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The budget could not be read.", err)
		return
	}
	pl := placementOf(ts)
	p.Team = pl.keyTeam[key]
	p.Org = pl.teamOrg[p.Team]

	days := spendDays(c.now)
	rows, err := t.Report(ctx, budget.ReportQuery{Since: days[0], Until: c.now, Key: key, By: []budget.Dim{budget.DimDay, budget.DimModel}})
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The usage history could not be read.", err)
		return
	}
	p.Spend = spendOf(key, rows, days)
	if h.cfg.Manage {
		p.Manage = &manage{LimitFor: &limitFor{Who: "key " + key, Field: "key", Owner: key}, Key: editKey(key)}
	}
	h.render(w, r, http.StatusOK, "key", p)
}
