package admin_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Every answer the handler tests get is checked against the OpenAPI
// document's schema for its route and status, so the document describes
// what the handlers send, field by field (objects allow no field the
// document does not list).

type documented struct {
	re      *regexp.Regexp
	method  string
	schemas map[string]map[string]*jsonschema.Schema // status -> media type -> schema
	request *jsonschema.Schema                       // the request body's (nil: none)
}

var (
	docOnce sync.Once
	docOps  []documented
	docErr  error
)

func loadDocument(h http.Handler) {
	var doc struct {
		Paths map[string]map[string]struct {
			RequestBody *struct {
				Content map[string]struct {
					Schema any `json:"schema"`
				} `json:"content"`
			} `json:"requestBody"`
			Responses map[string]struct {
				Content map[string]struct {
					Schema any `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/admin/v1/openapi.json", nil))
	if docErr = json.Unmarshal(w.Body.Bytes(), &doc); docErr != nil {
		return
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	n := 0
	compile := func(schema any) *jsonschema.Schema {
		n++
		url := "mem:///" + strconv.Itoa(n)
		if docErr = c.AddResource(url, schema); docErr != nil {
			return nil
		}
		s, err := c.Compile(url)
		if err != nil {
			docErr = err
		}
		return s
	}
	for path, item := range doc.Paths {
		re := regexp.MustCompile("^" + regexp.MustCompile(`\\\{[a-z]+\\\}`).ReplaceAllString(regexp.QuoteMeta(path), "[^/]+") + "$")
		for method, op := range item {
			d := documented{re: re, method: strings.ToUpper(method), schemas: map[string]map[string]*jsonschema.Schema{}}
			for status, r := range op.Responses {
				d.schemas[status] = map[string]*jsonschema.Schema{}
				for mt, c2 := range r.Content {
					if d.schemas[status][mt] = compile(c2.Schema); docErr != nil {
						return
					}
				}
			}
			if rb := op.RequestBody; rb != nil {
				if d.request = compile(rb.Content["application/json"].Schema); docErr != nil {
					return
				}
			}
			docOps = append(docOps, d)
		}
	}
}

// conforms checks a's body against the document's schema for the route
// of method path and a's status, and the request's body, when the
// request succeeded, against the document's request schema.
func (a answer) conforms(t testing.TB, h http.Handler, method, path string, request []byte) {
	t.Helper()
	docOnce.Do(func() { loadDocument(h) })
	if docErr != nil {
		t.Fatalf("the OpenAPI document: %v", docErr)
	}
	path, _, _ = strings.Cut(path, "?")
	var d *documented
	for i := range docOps {
		if docOps[i].method == method && docOps[i].re.MatchString(path) {
			d = &docOps[i]
		}
	}
	if d == nil {
		if a.status == 404 || a.status == 405 {
			return // no route: the error shape is checked by the test
		}
		t.Fatalf("%s %s answered %d but is not in the document", method, path, a.status)
	}
	if a.status/100 == 2 && len(bytes.TrimSpace(request)) > 0 {
		if d.request == nil {
			t.Fatalf("%s %s took a body the document does not describe: %s", method, path, request)
		}
		validate(t, d.request, request, method+" "+path+" (request)", "")
	}
	byType, ok := d.schemas[strconv.Itoa(a.status)]
	if !ok {
		t.Fatalf("%s %s answered %d, which the document does not list; body %s", method, path, a.status, a.body)
	}
	ct, _, _ := strings.Cut(a.header.Get("Content-Type"), ";")
	if len(byType) == 0 {
		if len(bytes.TrimSpace(a.body)) != 0 {
			t.Fatalf("%s %s answered %d with a body the document says it has not: %s", method, path, a.status, a.body)
		}
		return
	}
	s, ok := byType[ct]
	switch {
	case !ok:
		t.Fatalf("%s %s answered %d as %q, which the document does not list", method, path, a.status, ct)
	case ct == "text/csv":
		return
	case ct == "application/x-ndjson":
		sc := bufio.NewScanner(bytes.NewReader(a.body))
		for sc.Scan() {
			validate(t, s, sc.Bytes(), method, path)
		}
		return
	}
	validate(t, s, a.body, method, path)
}

func validate(t testing.TB, s *jsonschema.Schema, body []byte, method, path string) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s %s: body %s: %v", method, path, body, err)
	}
	if err := s.Validate(v); err != nil {
		t.Fatalf("%s %s: the body does not match the document: %v\nbody %s", method, path, err, body)
	}
}
