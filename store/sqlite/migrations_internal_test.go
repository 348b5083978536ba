package sqlite

import "testing"

// The embedded migration files are the steps from version 1 up, one per
// version and none missing: the version a database says it has is the
// number of steps it ran.
func TestMigrationFilesMatchSchemaVersion(t *testing.T) {
	if got := len(migrations("")); got != SchemaVersion {
		t.Fatalf("%d migration steps; SchemaVersion is %d", got, SchemaVersion)
	}
}
