package proxy_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// dbBytes is the size of a SQLite file and its WAL.
func dbBytes(t testing.TB, path string) int64 {
	t.Helper()
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		fi, err := os.Stat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			t.Fatal(err)
		default:
			n += fi.Size()
		}
	}
	return n
}

// flushedDB is the env's database opened read-only after a flush, closed
// when the test ends: what the tracker wrote, read as a user's SQL would.
func (e *env) flushedDB() *sql.DB {
	e.t.Helper()
	if _, err := e.db.Flush(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+e.path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { db.Close() })
	return db
}

// usageRow is one stored usage event's counts.
type usageRow struct{ input, output, reasoning int64 }

// usageRows reads the events key "team" has under the request id and its
// late excess (id + ":late"), by request id, after a flush.
func (e *env) usageRows(id string) map[string]usageRow {
	e.t.Helper()
	ctx := context.Background()
	db := e.flushedDB()
	rows, err := db.QueryContext(ctx, `SELECT request_id, input, output, reasoning FROM usage
		WHERE key = 'team' AND request_id IN (?, ?)`, id, id+":late")
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]usageRow{}
	for rows.Next() {
		var rid string
		var u usageRow
		if err := rows.Scan(&rid, &u.input, &u.output, &u.reasoning); err != nil {
			e.t.Fatal(err)
		}
		out[rid] = u
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// TestModelNameBounded: a model name over budget.MaxNameLen bytes, or with
// a control character, gets 400 in the route's error shape before anything
// is written: ten 4 MiB names grow the database and its WAL by at most
// 64 KiB; nothing reaches the upstream; neither the answer nor the log
// keeps the name. A name of exactly MaxNameLen bytes is served.
func TestModelNameBounded(t *testing.T) {
	t.Parallel()
	for _, mode := range []proxy.Mode{proxy.ModeReserve, proxy.ModeCheck} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mode: mode}, okUpstream)
			id := e.limit("", "", "tokens", "1h", 100)
			if _, err := e.db.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			before := dbBytes(t, e.path)
			huge := strings.Repeat("m", 4<<20)
			for i := range 10 {
				r := e.do("/v1/chat/completions", chatBody(huge+strconv.Itoa(i), 5, false))
				if r.status != http.StatusBadRequest || errorObject(t, r.body)["code"] != proxy.CodeBadRequest {
					t.Fatalf("4 MiB model: got %d %.300s; want 400 %s", r.status, r.body, proxy.CodeBadRequest)
				}
				if len(r.body) > 1024 || !strings.Contains(r.body, "at most 256") {
					t.Fatalf("4 MiB model: the answer is %d bytes: %.300s", len(r.body), r.body)
				}
			}
			r := e.send("/v1/messages", `{"model":"`+huge+`","max_tokens":5,"messages":[]}`, "X-Api-Key", e.secret)
			e.wait(1)
			if v := jsonBody(t, r.body); r.status != http.StatusBadRequest || v["type"] != "error" {
				t.Errorf("4 MiB model on /v1/messages: got %d %.300s; want 400 in Anthropic's shape", r.status, r.body)
			}
			for _, model := range []string{"gpt\n4o", "gpt\t4o", "gpt\x004o", "gpt\u00854o", "gpt\x7f"} {
				if r := e.do("/v1/chat/completions", chatBody(model, 5, false)); r.status != http.StatusBadRequest ||
					!strings.Contains(r.body, "control characters") {
					t.Errorf("model %q: got %d %s; want 400 naming control characters", model, r.status, r.body)
				}
			}
			if _, err := e.db.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if grew := dbBytes(t, e.path) - before; grew > 64<<10 {
				t.Errorf("the database and its WAL grew by %d bytes; want at most 64 KiB", grew)
			}
			if n := e.hits.Load(); n != 0 {
				t.Errorf("upstream called %d times for refused models", n)
			}
			if used, reserved := e.used(id); used != 0 || reserved != 0 {
				t.Errorf("used %d reserved %d; want 0 0", used, reserved)
			}
			if strings.Contains(e.logs.String(), strings.Repeat("m", 100)) {
				t.Errorf("the log holds the long model name")
			}
			if r := e.do("/v1/chat/completions", chatBody(strings.Repeat("n", budget.MaxNameLen), 5, false)); r.status != http.StatusOK {
				t.Errorf("a %d-byte model: got %d %s; want 200", budget.MaxNameLen, r.status, r.body)
			}
		})
	}
}

// TestKeyNameBounded: key names follow budget.CheckName (no control
// characters, valid UTF-8) and are at most 200 bytes without spaces; a
// refused name is invalid input, quoted only in part, and nothing is
// stored.
func TestKeyNameBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{}, okUpstream)
	ctx := context.Background()
	for _, name := range []string{"", "a\nb", "a\tb", "a\x00b", "a\u0085b", "a\u2028b", "a b", "\xffab",
		strings.Repeat("k", 201), strings.Repeat("k", 100<<10)} {
		err := proxy.ValidKeyName(name)
		if !errors.Is(err, budget.ErrInvalid) {
			t.Errorf("ValidKeyName(%.20q): got %v; want ErrInvalid", name, err)
			continue
		}
		if len(err.Error()) > 300 {
			t.Errorf("ValidKeyName(%.20q): a %d-byte error", name, len(err.Error()))
		}
		if _, err := proxy.AddKey(ctx, e.db.KeyStore(), name, testNow); !errors.Is(err, budget.ErrInvalid) {
			t.Errorf("AddKey(%.20q): got %v; want ErrInvalid", name, err)
		}
	}
	keys, err := e.db.KeyStore().ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].Name != "team" {
		t.Errorf("keys after refused names: %v; want only team", keys)
	}
	for _, name := range []string{strings.Repeat("k", 200), "équipe-1"} {
		if err := proxy.ValidKeyName(name); err != nil {
			t.Errorf("ValidKeyName(%.20q): %v", name, err)
		}
	}
}
