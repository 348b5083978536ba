package sqlq

import "testing"

func TestNew(t *testing.T) {
	q := New(`SELECT id FROM limits WHERE key = ? AND team = ? ORDER BY id COLLATE "C" LIMIT ?`)
	if got, want := q.In(SQLite), `SELECT id FROM limits WHERE key = ? AND team = ? ORDER BY id LIMIT ?`; got != want {
		t.Errorf("SQLite: %s, want %s", got, want)
	}
	if got, want := q.In(Postgres), `SELECT id FROM limits WHERE key = $1 AND team = $2 ORDER BY id COLLATE "C" LIMIT $3`; got != want {
		t.Errorf("PostgreSQL: %s, want %s", got, want)
	}
}
