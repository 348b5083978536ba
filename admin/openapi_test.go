package admin

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestOpenAPIMatchesTheRoutes checks the document against the handlers
// both ways: every operation it lists is what the mux routes that method
// and path to, and every route served is in it.
func TestOpenAPIMatchesTheRoutes(t *testing.T) {
	h := &Handler{routes: routes}
	h.register()
	doc := document(routes)
	paths := doc["paths"].(map[string]any)
	documented := map[string]bool{}
	for path, item := range paths {
		for method := range item.(map[string]any) {
			key := strings.ToUpper(method) + " " + path
			documented[key] = true
			concrete := pathParam.ReplaceAllString(path, "x1")
			_, pattern := h.mux.Handler(httptest.NewRequest(strings.ToUpper(method), concrete, nil))
			if pattern != key {
				t.Errorf("the document's %s is served by %q, not a route of its own", key, pattern)
			}
		}
	}
	for _, rt := range routes {
		if !documented[rt.Method+" "+rt.Path] {
			t.Errorf("route %s %s is not in the document", rt.Method, rt.Path)
		}
	}
	if len(documented) != len(routes) {
		t.Errorf("the document has %d operations, the API %d routes", len(documented), len(routes))
	}
}

// TestOpenAPIDocumentIsValid checks the fields OpenAPI 3.1 requires, that
// every path parameter is declared and every operation id unique, and
// that every schema is a valid JSON Schema 2020-12 (OpenAPI 3.1's
// dialect), compiled against its metaschema.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	h := &Handler{routes: routes}
	w := httptest.NewRecorder()
	if err := h.openAPI(w, httptest.NewRequest("GET", "/admin/v1/openapi.json", nil), nil); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string `json:"openapi"`
		Info    struct {
			Title, Version string
		} `json:"info"`
		Paths      map[string]map[string]map[string]any `json:"paths"`
		Components struct {
			SecuritySchemes map[string]any `json:"securitySchemes"`
		} `json:"components"`
	}
	dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("the document is not JSON: %v", err)
	}
	if !regexp.MustCompile(`^3\.1\.\d+$`).MatchString(doc.OpenAPI) || doc.Info.Title == "" || doc.Info.Version == "" || len(doc.Paths) == 0 {
		t.Fatalf("openapi %q, info %+v, %d paths", doc.OpenAPI, doc.Info, len(doc.Paths))
	}
	if doc.Components.SecuritySchemes["bearer"] == nil {
		t.Error("no bearer security scheme")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	n := 0
	opIDs := map[string]bool{}
	for path, item := range doc.Paths {
		if !strings.HasPrefix(path, "/admin/v1/") {
			t.Errorf("path %s is outside /admin/v1/", path)
		}
		for method, op := range item {
			where := strings.ToUpper(method) + " " + path
			if !slices.Contains([]string{"get", "post", "put", "patch", "delete"}, method) {
				t.Errorf("%s: unknown method", where)
			}
			id, _ := op["operationId"].(string)
			if id == "" || opIDs[id] {
				t.Errorf("%s: operationId %q missing or taken", where, id)
			}
			opIDs[id] = true
			var declared []string
			params, _ := op["parameters"].([]any)
			for _, p := range params {
				p := p.(map[string]any)
				if p["in"] == "path" {
					declared = append(declared, p["name"].(string))
					if p["required"] != true {
						t.Errorf("%s: path parameter %v not required", where, p["name"])
					}
				}
			}
			for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
				if !slices.Contains(declared, m[1]) {
					t.Errorf("%s: path parameter %s not declared", where, m[1])
				}
			}
			resps, _ := op["responses"].(map[string]any)
			if len(resps) == 0 {
				t.Errorf("%s: no responses", where)
			}
			var schemas []any
			for status, r := range resps {
				r := r.(map[string]any)
				if r["description"] == nil || !regexp.MustCompile(`^[1-5]\d\d$`).MatchString(status) {
					t.Errorf("%s: response %s lacks a description or is no status", where, status)
				}
				content, _ := r["content"].(map[string]any)
				for _, mt := range content {
					schemas = append(schemas, mt.(map[string]any)["schema"])
				}
			}
			if rb, ok := op["requestBody"].(map[string]any); ok {
				for _, mt := range rb["content"].(map[string]any) {
					schemas = append(schemas, mt.(map[string]any)["schema"])
				}
			}
			for _, s := range schemas {
				n++
				url := "mem:///" + id + "/" + strings.Repeat("s", n)
				if err := c.AddResource(url, s); err != nil {
					t.Errorf("%s: schema %v: %v", where, s, err)
					continue
				}
				if _, err := c.Compile(url); err != nil {
					t.Errorf("%s: schema does not compile as JSON Schema 2020-12: %v", where, err)
				}
			}
		}
	}
	if n < len(routes) {
		t.Errorf("%d schemas for %d routes", n, len(routes))
	}
}
