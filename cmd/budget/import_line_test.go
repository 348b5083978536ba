package main

import (
	"reflect"
	"testing"
	"time"
)

// decodeJSON is parseLine's encoding/json reading of one line.
func decodeJSON(b []byte) (importLine, bool) {
	in, err := decodeLineJSON(b)
	return in, err == nil
}

var plainLines = []struct {
	line  string
	plain bool // decodePlain takes it
}{
	{`{"request_id":"req-1","key":"k","provider":"openai","model":"gpt-4o","input":100,"output":20,"reasoning":0,"cache_read":3,"cache_write":0,"at":"2026-03-02T09:00:00Z"}`, true},
	{`{"request_id":"r","key":"k","provider":"p","model":"m","user":"u","team":"t","org":"","input":1,"cost":1500,"at":"2026-03-02T09:00:00.5+01:00"}`, true},
	{` { "key" : "ключ" , "provider":"p", "model":"m", "input": -3 } `, true},
	{`{}`, true},
	{`{"key":"k","input":0}`, true},
	{`{"key":"k","input":1.5}`, false},
	{`{"key":"k","input":1e3}`, false},
	{`{"key":"k","input":01}`, false},
	{`{"key":"k","input":"1"}`, false},
	{`{"key":"k","input":null}`, false},
	{`{"key":"k","cost":null}`, false},
	{`{"key":"k","team":null}`, false},
	{`{"key":"a\"b"}`, false},
	{`{"key":"\u00e9"}`, false},
	{"{\"key\":\"\xff\"}", false},
	{`{"Key":"k"}`, false},
	{`{"key":"k","key":"j"}`, false},
	{`{"key":"k","extra":1}`, false},
	{`{"key":"k",}`, false},
	{`{"key":"k"} {"key":"j"}`, false},
	{`{"key":"k"`, false},
	{`[]`, false},
	{`{"key":true}`, false},
}

// TestImportPlainLinesDecodeAsEncodingJSON: every line decodePlain takes
// decodes to what encoding/json makes of it, and the lines an export
// writes are among them.
func TestImportPlainLinesDecodeAsEncodingJSON(t *testing.T) {
	for _, tc := range plainLines {
		var got importLine
		ok := got.decodePlain([]byte(tc.line))
		if ok != tc.plain {
			t.Errorf("decodePlain(%s) = %v; want %v", tc.line, ok, tc.plain)
		}
		if !ok {
			continue
		}
		want, wok := decodeJSON([]byte(tc.line))
		if !wok || !reflect.DeepEqual(got, want) {
			t.Errorf("decodePlain(%s) = %+v; encoding/json: %+v (ok %v)", tc.line, got, want, wok)
		}
	}
}

// FuzzImportPlainLine: a line decodePlain takes is one encoding/json takes,
// with the same result.
func FuzzImportPlainLine(f *testing.F) {
	for _, tc := range plainLines {
		f.Add([]byte(tc.line))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got importLine
		if !got.decodePlain(b) {
			return
		}
		want, ok := decodeJSON(b)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("decodePlain(%q) = %+v; encoding/json: %+v (ok %v)", b, got, want, ok)
		}
	})
}

// BenchmarkImportParseLine is one line as 'budget export' writes it, both
// passes' work per line:
//
//	go test -run '^$' -bench ImportParseLine -benchmem ./cmd/budget/
func BenchmarkImportParseLine(b *testing.B) {
	line := []byte(`{"request_id":"req-123456","key":"key-17","provider":"openai","model":"gpt-4o","input":317,"output":56,"reasoning":0,"cache_read":3,"cache_write":0,"at":"2026-12-06T11:52:24.123456789Z"}` + "\n")
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseLine(line, 1, now, ""); err != nil {
			b.Fatal(err)
		}
	}
}
