package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Every error the API answers is {"error": {"code", "message", "field"}}:
// code is one of the codes below, field names the input at fault (null
// when none is).
const (
	codeInvalid      = "invalid"            // 400
	codeUnauthorized = "unauthorized"       // 401
	codeForbidden    = "forbidden"          // 403
	codeNotFound     = "not_found"          // 404
	codeMethod       = "method_not_allowed" // 405
	codeConflict     = "conflict"           // 409
	codeTooLarge     = "too_large"          // 413
	codeInternal     = "internal"           // 500
)

// apiError is an answer other than success.
type apiError struct {
	Status  int
	Code    string
	Message string
	Field   string // "" when no input field is at fault
}

func (e *apiError) Error() string { return e.Message }

func invalid(field, format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, codeInvalid, fmt.Sprintf(format, args...), field}
}

func forbidden(format string, args ...any) *apiError {
	return &apiError{http.StatusForbidden, codeForbidden, fmt.Sprintf(format, args...), ""}
}

func notFound(format string, args ...any) *apiError {
	return &apiError{http.StatusNotFound, codeNotFound, fmt.Sprintf(format, args...), ""}
}

func conflict(field, format string, args ...any) *apiError {
	return &apiError{http.StatusConflict, codeConflict, fmt.Sprintf(format, args...), field}
}

// errorBody is the JSON of an error answer.
type errorBody struct {
	Error struct {
		Code    string  `json:"code"`
		Message string  `json:"message"`
		Field   *string `json:"field"`
	} `json:"error"`
}

// asAPIError maps err to its answer: the domain's ErrInvalid is 400 naming
// its field, ErrNotFound 404; anything else is a 500 whose detail is
// logged, not shown.
func asAPIError(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, budget.ErrInvalid):
		return &apiError{http.StatusBadRequest, codeInvalid, err.Error(), invalidField(err)}
	case errors.Is(err, budget.ErrNotFound):
		return &apiError{http.StatusNotFound, codeNotFound, err.Error(), ""}
	}
	return &apiError{http.StatusInternalServerError, codeInternal, "the budget could not be read or written; the admin listener's log says why", ""}
}

// invalidField is the field a budget.Invalid error names: its text is
// "invalid input: FIELD \"VALUE\": why", after any context the error was
// wrapped in.
func invalidField(err error) string {
	msg := err.Error()
	_, rest, ok := strings.Cut(msg, budget.ErrInvalid.Error()+": ")
	if !ok {
		return ""
	}
	f, _, ok := strings.Cut(rest, ` "`)
	if !ok || strings.ContainsAny(f, " :") {
		return ""
	}
	return f
}

// fail answers err.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	ae := asAPIError(err)
	if ae.Status >= 500 {
		h.cfg.Logger.Error("admin: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	var b errorBody
	b.Error.Code, b.Error.Message = ae.Code, ae.Message
	if ae.Field != "" {
		b.Error.Field = &ae.Field
	}
	if ae.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tokenbudget admin"`)
	}
	writeJSON(w, ae.Status, b)
}

// writeJSON answers status with v as indented JSON, as the CLI prints it.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) // the status is sent; a failed write is the client's going away
}

// maxBody bounds a request body: the largest is a price or a limit.
const maxBody = 64 << 10

// decode reads the request's JSON body into v, refusing unknown fields
// (a misspelt field must not be silently ignored) and trailing data.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if dec.Decode(&struct{}{}) != io.EOF {
			return invalid("body", "the body holds more than one JSON object")
		}
		return nil
	}
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var me *http.MaxBytesError
	switch {
	case errors.Is(err, io.EOF):
		return invalid("body", "the body is empty: want a JSON object")
	case errors.As(err, &me):
		return &apiError{http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("the body is over %d bytes", maxBody), "body"}
	case errors.As(err, &te):
		return invalid(te.Field, "field %s: want a JSON %s, not %s", te.Field, te.Type.Kind(), te.Value)
	case errors.As(err, &se):
		return invalid("body", "the body is not JSON: %v", err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalid(f, "unknown field %q", f)
	}
	return invalid("body", "the body is not a JSON object: %v", err)
}
