// Package sqlq is the SQL the two SQL stores (store/sqlite and
// store/postgres) share: the statements that differ between the dialects
// only in placeholders (and in how bytewise order is spelled), each written
// once, and the budget.Tx methods built on them. What really differs
// (upserts over arrays or VALUES rows, locking, aggregates, time
// arithmetic) stays in each store.
//
// A statement is written with ? placeholders, each argument passed as
// often as it appears, and bytewise order spelled COLLATE "C" (PostgreSQL
// sorts by the database's collation otherwise; SQLite's default is already
// bytewise and knows no "C"). New derives both dialects' texts once, when
// the package is initialised, so a store's prepared-statement cache sees
// one stable string per statement and nothing is rebuilt per call.
package sqlq

import (
	"context"
	"strings"

	"github.com/jmoiron/sqlx"
)

// Dialect is the SQL a store speaks.
type Dialect uint8

const (
	SQLite Dialect = iota
	Postgres
)

// Query is one statement's text in each dialect.
type Query [2]string

// collateC is how a shared statement asks for bytewise order.
const collateC = ` COLLATE "C"`

// New is q in each dialect: as written for SQLite, less its COLLATE "C";
// with $1, $2, ... for PostgreSQL.
func New(q string) Query {
	return Query{strings.ReplaceAll(q, collateC, ""), sqlx.Rebind(sqlx.DOLLAR, q)}
}

// Each is a statement the dialects spell differently (each text written
// as for New, with the same arguments), for Go shared around it.
func Each(sqlite, postgres string) Query {
	return Query{New(sqlite)[SQLite], New(postgres)[Postgres]}
}

// In is q's text in d.
func (q *Query) In(d Dialect) string { return q[d] }

// Executor runs statements in one transaction of a store, through its
// prepared statements where it keeps them. Exec refuses in a read-only
// transaction and reports the rows affected.
type Executor interface {
	Get(ctx context.Context, dest any, q string, args ...any) error
	Select(ctx context.Context, dest any, q string, args ...any) error
	Query(ctx context.Context, q string, args ...any) (*sqlx.Rows, error)
	Exec(ctx context.Context, q string, args ...any) (int64, error)
}

// Tx is a store's transaction as the shared statements run in it. A store
// embeds it in its budget.Tx, which so gets the methods written here.
type Tx struct {
	X Executor
	D Dialect
}

func (t Tx) get(ctx context.Context, dest any, q *Query, args ...any) error {
	return t.X.Get(ctx, dest, q.In(t.D), args...)
}

func (t Tx) sel(ctx context.Context, dest any, q *Query, args ...any) error {
	return t.X.Select(ctx, dest, q.In(t.D), args...)
}

func (t Tx) query(ctx context.Context, q *Query, args ...any) (*sqlx.Rows, error) {
	return t.X.Query(ctx, q.In(t.D), args...)
}

func (t Tx) exec(ctx context.Context, q *Query, args ...any) (int64, error) {
	return t.X.Exec(ctx, q.In(t.D), args...)
}
