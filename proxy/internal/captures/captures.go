// Package captures reads the recorded provider responses in the
// repository's testdata/captures/providers, for the usage parsers' tests.
package captures

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Dir is testdata/captures/providers at the repository's root, found from
// this file's own path so that a test in any package reads the same files.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata", "captures", "providers")
}

// Provider is the capture named name; a missing file fails the test.
func Provider(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
