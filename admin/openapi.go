package admin

import (
	"cmp"
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tokenbudget/tokenbudget/alert"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

// The OpenAPI 3.1 document of the API, GET /admin/v1/openapi.json. Each
// operation is described in ops below, apart from the handlers (routes in
// admin.go), and a test checks the two against each other and against the
// mux, so neither can gain a route the other lacks. The schemas are made
// from the very Go types the handlers encode and decode (schemaOf), so a
// field cannot be added to an answer without appearing here.

// op documents one operation.
type op struct {
	Summary string
	Query   []string // query parameters (all optional strings)
	In      any      // the request body's type (nil: none)
	Status  int      // the success status
	Also    int      // another success status with the same body (0: none)
	Out     any      // the success body's type (nil: none)
	Content string   // the success body's media type (default application/json)
	Errors  []int    // the error statuses besides 401 and 403
	// Optional bodies may be left out (an empty body).
	Optional bool
}

// listDoc stands for a list answer, {"NAME": [ITEM...]}.
type listDoc struct {
	name string
	item any
}

func listOf[T any](name string) listDoc { var item T; return listDoc{name, item} }

// bodySchema is the schema of an answer of v's type.
func bodySchema(v any) map[string]any {
	if l, ok := v.(listDoc); ok {
		return map[string]any{"type": "object", "required": []string{l.name}, "additionalProperties": false,
			"properties": map[string]any{l.name: map[string]any{"type": "array", "items": schemaOf(reflect.TypeOf(l.item), false)}}}
	}
	return schemaOf(reflect.TypeOf(v), false)
}

// ops are the documented operations, by "METHOD PATH".
var ops = map[string]op{
	"POST /admin/v1/session":       {Summary: "Sign a browser in with an admin token: sets the session cookie", In: sessionIn{}, Status: 201, Out: principalJSON{}, Errors: []int{400, 401}},
	"DELETE /admin/v1/session":     {Summary: "Sign the browser out", Status: 204},
	"GET /admin/v1/session":        {Summary: "Who the request comes from: the token's name and scope", Status: 200, Out: principalJSON{}},
	"GET /admin/v1/keys":           {Summary: "List the gateway keys in scope (budget key ls --json)", Status: 200, Out: listOf[jsonview.Key]("keys")},
	"POST /admin/v1/keys":          {Summary: "Create a gateway key; its secret is in the answer, once (budget key add --json)", In: keyIn{}, Status: 201, Out: jsonview.Secret{}, Errors: []int{400, 409}},
	"GET /admin/v1/keys/{name}":    {Summary: "One gateway key", Status: 200, Out: jsonview.Key{}, Errors: []int{404}},
	"PATCH /admin/v1/keys/{name}":  {Summary: "Change a key's team (only the fields given)", In: keyPatch{}, Status: 200, Out: jsonview.Key{}, Errors: []int{400, 404}},
	"DELETE /admin/v1/keys/{name}": {Summary: "Revoke a key (its name stays taken)", Status: 200, Out: jsonview.Key{}, Errors: []int{404}},
	"POST /admin/v1/keys/{name}/rotate": {Summary: "Give a key a new secret, in the answer once; the old one works for grace (default 1h)",
		In: rotateIn{}, Optional: true, Status: 200, Out: jsonview.Secret{}, Errors: []int{400, 404, 409}},
	"GET /admin/v1/limits": {Summary: "List the limits in scope (budget limit ls --json); key: its own and the defaults",
		Query: []string{"key", "team", "org"}, Status: 200, Out: listOf[jsonview.Limit]("limits"), Errors: []int{400}},
	"POST /admin/v1/limits": {Summary: "Create a limit, or update the one of the same owner, scope, value, metric and window (budget limit set): 201 created, 200 updated",
		In: limitIn{}, Status: 201, Also: 200, Out: jsonview.Limit{}, Errors: []int{400}},
	"GET /admin/v1/limits/{id}": {Summary: "One limit", Status: 200, Out: jsonview.Limit{}, Errors: []int{404}},
	"PATCH /admin/v1/limits/{id}": {Summary: "Change only the fields given; a new limit keeps the window's counters (budget limit set --id)",
		In: limitPatch{}, Status: 200, Out: jsonview.Limit{}, Errors: []int{400, 404}},
	"DELETE /admin/v1/limits/{id}": {Summary: "Delete a limit with its counters (budget limit rm)", Status: 204, Errors: []int{404}},
	"POST /admin/v1/limits/{id}/raises": {Summary: "Raise a limit until an instant or for good; answers the limit (budget limit raise --json)",
		In: raiseIn{}, Status: 201, Out: jsonview.Limit{}, Errors: []int{400, 404}},
	"GET /admin/v1/teams":           {Summary: "List the teams in scope (budget team ls --json)", Status: 200, Out: listOf[jsonview.Team]("teams")},
	"PUT /admin/v1/teams/{name}":    {Summary: "Create a team, or move it to another org or none (budget team set --json): 201 created, 200 moved", In: teamIn{}, Optional: true, Status: 201, Also: 200, Out: jsonview.Team{}, Errors: []int{400}},
	"DELETE /admin/v1/teams/{name}": {Summary: "Remove a team (409 while it has limits)", Status: 204, Errors: []int{404, 409}},
	"GET /admin/v1/prices":          {Summary: "List every price version (budget price ls --json)", Status: 200, Out: listOf[jsonview.Price]("prices")},
	"POST /admin/v1/prices":         {Summary: "Add or replace one price version (budget price set --json)", In: priceIn{}, Status: 201, Out: jsonview.Price{}, Errors: []int{400}},
	"GET /admin/v1/alerts":          {Summary: "The newest alerts of limits in scope (budget alerts ls --json)", Query: []string{"limit"}, Status: 200, Out: listOf[alert.Object]("alerts"), Errors: []int{400}},
	"GET /admin/v1/report": {Summary: "Usage summed by dimensions (budget report): by is a comma-separated list of key, team, org, user, provider, model, day, week, month; format json (default) or csv",
		Query: []string{"since", "until", "by", "key", "format"}, Status: 200, Out: listOf[map[string]any]("rows"), Content: "application/json, text/csv", Errors: []int{400}},
	"GET /admin/v1/usage": {Summary: "The usage events, streamed as budget export's JSON lines", Query: []string{"since", "until", "key"},
		Status: 200, Out: jsonview.Event{}, Content: "application/x-ndjson", Errors: []int{400}},
	"GET /admin/v1/audit":        {Summary: "The audit log's entries in scope, oldest first (budget audit ls --json)", Query: []string{"since", "limit"}, Status: 200, Out: listOf[jsonview.AuditEntry]("entries"), Errors: []int{400}},
	"GET /admin/v1/openapi.json": {Summary: "This document", Status: 200, Out: map[string]any{}},
}

var pathParam = regexp.MustCompile(`\{([a-z]+)\}`)

// document builds the OpenAPI document from ops.
func document(routes []route) map[string]any {
	openRoutes := map[string]bool{}
	for _, rt := range routes {
		if rt.Open {
			openRoutes[rt.Method+" "+rt.Path] = true
		}
	}
	paths := map[string]any{}
	for key, o := range ops {
		method, path, _ := strings.Cut(key, " ")
		item, _ := paths[path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[path] = item
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, q := range o.Query {
			params = append(params, map[string]any{"name": q, "in": "query", "required": false, "schema": map[string]any{"type": "string"}})
		}
		resp := map[string]any{}
		ok := map[string]any{"description": o.Summary}
		if o.Out != nil {
			content := map[string]any{}
			for _, ct := range strings.Split(cmp.Or(o.Content, "application/json"), ", ") {
				content[ct] = map[string]any{"schema": bodySchema(o.Out)}
			}
			ok["content"] = content
		}
		resp[strconv.Itoa(o.Status)] = ok
		if o.Also != 0 {
			resp[strconv.Itoa(o.Also)] = ok
		}
		errs := append(slices.Clone(o.Errors), 500)
		if o.In != nil {
			errs = append(errs, 413)
		}
		if _, open := openRoutes[key]; !open {
			errs = append(errs, 401, 403)
		}
		for _, s := range errs {
			resp[strconv.Itoa(s)] = map[string]any{"description": http.StatusText(s),
				"content": map[string]any{"application/json": map[string]any{"schema": schemaOf(reflect.TypeOf(errorBody{}), false)}}}
		}
		operation := map[string]any{"operationId": operationID(method, path), "summary": o.Summary, "responses": resp}
		if params != nil {
			operation["parameters"] = params
		}
		if o.In != nil {
			operation["requestBody"] = map[string]any{"required": !o.Optional,
				"content": map[string]any{"application/json": map[string]any{"schema": schemaOf(reflect.TypeOf(o.In), true)}}}
		}
		if _, open := openRoutes[key]; open {
			operation["security"] = []any{}
		}
		item[strings.ToLower(method)] = operation
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "tokenbudget admin API", "version": "1",
			"description": "Keys, limits, teams, prices, alerts, reports, usage and the audit log of a tokenbudget database, served by budget proxy --admin-listen. Objects have the shapes of the CLI's --json."},
		"paths":      paths,
		"security":   []any{map[string]any{"bearer": []any{}}},
		"components": map[string]any{"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}},
	}
}

func operationID(method, path string) string {
	id := strings.ToLower(method)
	for _, part := range strings.Split(strings.TrimPrefix(path, Prefix), "/") {
		part = strings.Trim(part, "{}")
		part = strings.ReplaceAll(part, ".", "_")
		if part != "" {
			id += "_" + part
		}
	}
	return id
}

// schemaOf is the JSON Schema of the values encoding/json makes of t: for
// an answer (in false) every field not omitted when empty is required; for
// a request body (in true) only those tagged required:"true". A field
// tagged types:"a,b" (a json.RawMessage read by hand) takes those JSON
// types; an array among them holds strings.
func schemaOf(t reflect.Type, in bool) map[string]any {
	switch t.Kind() {
	case reflect.Pointer:
		s := schemaOf(t.Elem(), in)
		if typ, ok := s["type"].(string); ok {
			s["type"] = []any{typ, "null"}
		}
		return s
	case reflect.String:
		if t == reflect.TypeOf(json.Number("")) {
			return map[string]any{"type": []any{"number", "string"}}
		}
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64, reflect.Int32:
		return map[string]any{"type": "integer"}
	case reflect.Slice:
		if t == reflect.TypeOf(json.RawMessage(nil)) {
			return map[string]any{} // any JSON value
		}
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), in)}
	case reflect.Map:
		return map[string]any{"type": "object"}
	case reflect.Struct:
		props := map[string]any{}
		required := []string{}
		addFields(t, in, props, &required)
		return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
	}
	return map[string]any{}
}

// addFields adds t's JSON fields (embedded structs' inline) to props, and
// the required ones (see schemaOf) to required.
func addFields(t reflect.Type, in bool, props map[string]any, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			addFields(f.Type, in, props, required)
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		schema := schemaOf(f.Type, in)
		if types := f.Tag.Get("types"); types != "" {
			var ts []any
			for _, ty := range strings.Split(types, ",") {
				ts = append(ts, ty)
			}
			schema = map[string]any{"type": ts}
			if strings.Contains(types, "array") {
				schema["items"] = map[string]any{"type": "string"}
			}
		}
		props[name] = schema
		if in && f.Tag.Get("required") == "true" || !in && !strings.Contains(opts, "omitempty") {
			*required = append(*required, name)
		}
	}
}

var (
	docOnce sync.Once
	docJSON []byte
)

func (h *Handler) openAPI(w http.ResponseWriter, r *http.Request, _ *Principal) error {
	docOnce.Do(func() { docJSON, _ = json.MarshalIndent(document(h.routes), "", "  ") })
	w.Header().Set("Content-Type", "application/json")
	w.Write(docJSON)
	return nil
}
