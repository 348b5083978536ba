package tokenbudget_test

import (
	"testing"

	"github.com/tokenbudget/tokenbudget"
)

// Messages name the database without its password, in every form a --db
// takes; a SQLite path is shown as given.
func TestRedactDSN(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"budget.db", "budget.db"},
		{"/var/lib/budget/b@home.db", "/var/lib/budget/b@home.db"},
		{"postgres://app:s3cret@db.internal/budget", "postgres://app:xxxxx@db.internal/budget"},
		{"host=db user=app password=s3cret dbname=budget", "host=db user=app password=xxxxx dbname=budget"},
		{"postgres://app@db/budget?password=s3cret", "postgres://app@db/budget?password=xxxxx"},
	} {
		if got := tokenbudget.RedactDSN(c.in); got != c.want {
			t.Errorf("RedactDSN(%q) = %q; want %q", c.in, got, c.want)
		}
	}
}
