package proxy

import (
	"net/http"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
)

// TagsHeader carries a request's tags, "project=atlas,feature=search"
// (budget.Tags; several header lines are one list). Tag limits count by
// them, and the request's event keeps them. Like UserHeader it is a
// gateway header: removed before the request is forwarded, on any path.
const TagsHeader = "X-Budget-Tags"

// takeTags removes TagsHeader from h and returns its lines as one list.
func takeTags(h http.Header) string {
	vs := h.Values(TagsHeader)
	if len(vs) == 0 {
		return ""
	}
	h.Del(TagsHeader)
	return strings.Join(vs, ",")
}

// requestTags is hdr (takeTags) normalized. Tags the tracker would refuse
// (budget.NormalizeTags: more than budget.MaxTags, a bad name or value, a
// name twice) are 400 in the API's error shape, naming the tag and the
// header, before anything is written or logged; ok is false then.
func (m *Middleware) requestTags(w http.ResponseWriter, f Format, hdr string) (tags budget.Tags, ok bool) {
	if hdr == "" {
		return "", true
	}
	tags, err := budget.NormalizeTags("tags", budget.Tags(hdr))
	if err != nil {
		m.outcome(w, OutcomeBadRequest)
		writeError(w, f, simpleError(f, http.StatusBadRequest, CodeBadRequest, err.Error()+" (from the "+TagsHeader+" header)"))
		return "", false
	}
	return tags, true
}
