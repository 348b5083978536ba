package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

const importHelp = `usage: budget import [--db PATH] [--json] FILE|-

Imports usage events from JSON lines (- reads stdin), one event per line
with the record fields: request_id, key, provider, model, user, input,
output, reasoning, cache_read, cache_write, at (RFC3339, default now), and
team, org, cost and tags (an object: {"project": "atlas"}), as 'budget
export' writes them. key, provider and model
are required; unknown fields are invalid; blank lines are skipped. An event
with a team or an org is charged to them as given (history exported
elsewhere keeps its levels; neither needs to exist); one with neither is
charged to its key's team and org as they are when it is written. cost is
what the event cost in micro-dollars (an integer; 1000000 is one dollar):
it is kept as given, where an event without it is priced from the price
table at its instant.

Every line is validated before anything is written: a bad line exits 2
naming its line number, and so does an event before the prune horizon
('budget prune': its request id could no longer be deduplicated). Events are then written in batches of 10000, each one
transaction, in file order, so an interrupted import leaves a clean prefix
and running it again completes it: events already stored are duplicates. A
line without request_id gets a deterministic one, "imp_" and a hash of the
file's absolute path, the line number and the content, so re-running the
same file (even after lines were appended) skips it too, while identical
lines in two files are two events. A renamed file is a new file. A limit
window that had ended when its events are written gets no counter row of
its own (a row it has gains them): its total is read from the history
whenever asked, and no rollover is logged into it.

The import runs its garbage collector at GOGC=400 (a few batches are live,
~10-15 MB, so its peak heap is ~150 MB for a large file) unless GOGC is set
in its environment; GOMEMLIMIT is honoured as usual.

Prints a summary, or {"imported", "duplicates"} with --json.

`

// importBatch is how many events one RecordSync call (one transaction)
// writes. A transaction's pages are mostly its keys' leaf pages, whatever
// the events per key: the more events per transaction, the fewer pages
// each event writes.
const importBatch = 10000

func (m *Main) runImport(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("import")
	dsn := m.dbFlag(fs)
	asJSON := fs.Bool("json", false, `print {"imported", "duplicates"}`)
	pos, err := m.parseArgs(fs, importHelp, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("import", "want one FILE (or - for stdin), got %d arguments", len(pos))
	}
	src, name, cleanup, err := m.importSource(pos[0])
	if err != nil {
		return err
	}
	defer cleanup()
	start, err := src.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}

	// The import's live heap is a few batches of events, ~10-15 MB; at the
	// default GOGC the collector ran ~55 times for 200,000 events, each
	// cycle stopping the writer to scan its stack. 400 cuts that fourfold
	// (~8% of the import's CPU); a GOGC the user set is kept.
	if m.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}

	// Pass 1: validate every line; nothing is opened or written yet.
	now := m.Now()
	// Generated request ids are salted with the file's absolute path (stdin:
	// none), so identical lines of two files are two events.
	salt := ""
	if pos[0] != "-" {
		if abs, err := filepath.Abs(pos[0]); err == nil {
			salt = abs
		}
	}
	// The earliest event is checked against the prune horizon once the
	// database is open.
	c, err := checkEvents(ctx, src, now, salt)
	if err != nil {
		return err // "line N: ..."
	}
	total, first, firstLine := c.total, c.first, c.firstLine
	if _, err := src.Seek(start, io.SeekStart); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}

	// Pass 2: write in batches.
	db, err := m.openDB(ctx, *dsn, dbOptions{create: true, tune: func(c *budget.Config) {
		c.BatchSize = importBatch // one RecordSync call is normally one transaction
		// Past windows' rows are not created: a day of per-minute windows
		// cost a third of the import's writer in reads and row inserts.
		c.Backfill = true
		c.BatchInterval = 50 * time.Millisecond
	}})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	if firstLine > 0 {
		h, err := db.PrunedBefore(ctx)
		if err != nil {
			return err
		}
		if first.At.Before(h) {
			return fmt.Errorf("line %d: %w", firstLine, budget.Invalid("at", first.At.UTC().Format(time.RFC3339Nano),
				"is before the prune horizon "+ts(h)+": its request id could no longer be deduplicated"))
		}
	}
	progress := isTerminal(m.Stderr)
	var imported, dups int
	// One batch is written while the next is read and parsed: at most one
	// in flight, so batches commit in file order and a failure leaves a
	// clean prefix.
	type written struct {
		dups []bool
		err  error
	}
	var inflight chan written
	wait := func() error {
		if inflight == nil {
			return nil
		}
		w := <-inflight
		inflight = nil
		if w.err != nil {
			return fmt.Errorf("import %s stopped with at least %d of %d events stored (run it again to complete it): %w",
				name, imported+dups, total, w.err)
		}
		for _, dup := range w.dups {
			if dup {
				dups++
			} else {
				imported++
			}
		}
		if progress {
			fmt.Fprintf(m.Stderr, "\rimporting %s: %d/%d events", name, imported+dups, total)
		}
		return nil
	}
	batch := make([]budget.Usage, 0, importBatch)
	flush := func() error {
		if err := wait(); err != nil || len(batch) == 0 {
			return err
		}
		inflight = make(chan written, 1)
		go func(evs []budget.Usage, done chan<- written) {
			d, err := db.RecordSync(ctx, evs...)
			done <- written{d, err}
		}(batch, inflight)
		batch = make([]budget.Usage, 0, importBatch)
		return nil
	}
	err = scanEvents(ctx, src, now, salt, func(line int, u budget.Usage) error {
		batch = append(batch, u)
		if len(batch) == importBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if werr := wait(); err == nil {
		err = werr
	}
	if progress && imported+dups > 0 {
		fmt.Fprintln(m.Stderr)
	}
	if err != nil {
		if errors.Is(err, budget.ErrInvalid) {
			// Pass 1 accepted every line: the file changed under us.
			return fmt.Errorf("%s changed during the import: %v", name, err)
		}
		return err
	}
	if n := db.Stats().Unpriced; n > 0 {
		fmt.Fprintf(m.Stderr, "budget: warning: %d events had no price for their model while a dollar limit applied: stored at $0 ('budget price set' prices later events)\n", n)
	}
	if *asJSON {
		return writeJSON(m.Stdout, struct {
			Imported   int `json:"imported"`
			Duplicates int `json:"duplicates"`
		}{imported, dups})
	}
	_, err = fmt.Fprintf(m.Stdout, "imported %d events, %d duplicates\n", imported, dups)
	return err
}

// importSource opens the input: the file, or stdin. An input that cannot
// seek (a pipe) is copied to a temporary file, so both passes read the
// same bytes without holding every event in memory.
func (m *Main) importSource(arg string) (src io.ReadSeeker, name string, cleanup func(), err error) {
	cleanup = func() {}
	var r io.Reader
	if arg == "-" {
		name, r = "stdin", m.Stdin
	} else {
		f, err := os.Open(arg)
		if err != nil {
			return nil, arg, cleanup, err
		}
		name, r, cleanup = arg, f, func() { f.Close() }
	}
	if rs, ok := r.(io.ReadSeeker); ok {
		if _, err := rs.Seek(0, io.SeekCurrent); err == nil {
			return rs, name, cleanup, nil
		}
	}
	tmp, err := os.CreateTemp("", "budget-import-*.jsonl")
	if err != nil {
		return nil, name, cleanup, fmt.Errorf("spool %s: %w", name, err)
	}
	prev := cleanup
	cleanup = func() { tmp.Close(); os.Remove(tmp.Name()); prev() }
	if _, err := io.Copy(tmp, r); err != nil {
		return nil, name, cleanup, fmt.Errorf("read %s: %w", name, err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, name, cleanup, fmt.Errorf("spool %s: %w", name, err)
	}
	return tmp, name, cleanup, nil
}

// scanEvents reads JSON lines from r and calls fn with each event,
// validated, and its line number. An error names the line.
func scanEvents(ctx context.Context, r io.Reader, now time.Time, salt string, fn func(line int, u budget.Usage) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		b, rerr := br.ReadBytes('\n')
		if rerr != nil && rerr != io.EOF {
			return fmt.Errorf("line %d: read: %w", n, rerr)
		}
		if n%10000 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if len(bytes.TrimSpace(b)) > 0 {
			u, err := parseLine(b, n, now, salt)
			if err != nil {
				return fmt.Errorf("line %d: %w", n, err)
			}
			if err := fn(n, u); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
	}
}

// importLine is one line as written. Token counts are json.Numbers so a
// fraction or an out-of-range value is reported with the field's name.
type importLine struct {
	RequestID  string     `json:"request_id"`
	Key        string     `json:"key"`
	Provider   string     `json:"provider"`
	Model      string     `json:"model"`
	User       string     `json:"user"`
	Team       *string    `json:"team"` // given (even "") with org: kept as the event's levels
	Org        *string    `json:"org"`
	Input      tokenCount `json:"input"`
	Output     tokenCount `json:"output"`
	Reasoning  tokenCount `json:"reasoning"`
	CacheRead  tokenCount `json:"cache_read"`
	CacheWrite tokenCount `json:"cache_write"`
	At         *string    `json:"at"`
	// Cost is what the event cost in micro-dollars, as 'budget export'
	// writes it: kept instead of pricing the event again; null keeps it an
	// event no price matched.
	Cost json.RawMessage `json:"cost"`
	// Tags are an object of tag names to values, as export writes them.
	Tags budget.Tags `json:"tags"`
}

// tokenCount is a token count as written: a JSON number, never a string
// (json.Number alone would take "1").
type tokenCount json.Number

func (c *tokenCount) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as if absent, like any other field
	}
	if len(b) > 0 && b[0] != '-' && (b[0] < '0' || b[0] > '9') {
		return errNotNumber
	}
	*c = tokenCount(b)
	return nil
}

var errNotNumber = errors.New("not a JSON number")

// parseLine decodes and validates line n. now is the instant of an event
// without at.
func parseLine(b []byte, n int, now time.Time, salt string) (budget.Usage, error) {
	b = bytes.TrimSpace(b)
	var in importLine // on the stack: decodeLineJSON's is the one that escapes
	if !in.decodePlain(b) {
		var err error
		if in, err = decodeLineJSON(b); err != nil {
			return budget.Usage{}, err
		}
	}
	u := budget.Usage{RequestID: in.RequestID, Key: in.Key, Provider: in.Provider, Model: in.Model, User: in.User, Tags: in.Tags, At: now}
	if in.Team != nil || in.Org != nil {
		u.Placed = true
		if in.Team != nil {
			u.Team = *in.Team
		}
		if in.Org != nil {
			u.Org = *in.Org
		}
	}
	var cost tokenCount
	switch c := bytes.TrimSpace(in.Cost); {
	case len(c) == 0:
	case string(c) == "null":
		u.CostKnown, u.NoPrice = true, true
	default:
		if err := cost.UnmarshalJSON(c); err != nil {
			return u, budget.Invalid("cost", clip(c), "must be an integer number of micro-dollars between 0 and 2^53-1, or null")
		}
		u.CostKnown = true
	}
	// Counts by index, not through pointers into u, which would move u
	// to the heap on every line.
	names := [...]string{"input", "output", "reasoning", "cache_read", "cache_write", "cost"}
	nums := [...]tokenCount{in.Input, in.Output, in.Reasoning, in.CacheRead, in.CacheWrite, cost}
	var vals [len(nums)]int64
	for j, num := range nums {
		if num == "" {
			continue
		}
		v, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil {
			if names[j] == "cost" {
				return u, budget.Invalid(names[j], num, "must be an integer number of micro-dollars between 0 and 2^53-1")
			}
			return u, budget.Invalid(names[j], num, "must be an integer between 0 and 2^53-1")
		}
		vals[j] = v
	}
	u.Input, u.Output, u.Reasoning, u.CacheRead, u.CacheWrite, u.Cost = vals[0], vals[1], vals[2], vals[3], vals[4], vals[5]
	if in.At != nil && *in.At != "" {
		at, err := parseAt(*in.At)
		if err != nil {
			return u, err
		}
		u.At = at
	}
	if strings.TrimSpace(u.RequestID) == "" {
		u.RequestID = lineID(salt, b, n)
	}
	return validUsage(u)
}

// decodeLineJSON reads a line decodePlain does not take with encoding/json,
// which reads and names every error.
func decodeLineJSON(b []byte) (importLine, error) {
	var in importLine
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil {
		return importLine{}, decodeError(b, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return importLine{}, budget.Invalid("json", clip(b), "want one JSON object per line")
	}
	return in, nil
}

// decodeError names the field a decoding error is about when it can.
func decodeError(b []byte, err error) error {
	if errors.Is(err, budget.ErrInvalid) { // a field that validates itself (tags)
		return err
	}
	if errors.Is(err, errNotNumber) {
		// The decoder does not say which field; find the first quoted count.
		var raw map[string]json.RawMessage
		if json.Unmarshal(b, &raw) == nil {
			for _, f := range []string{"input", "output", "reasoning", "cache_read", "cache_write", "cost"} {
				if v, ok := raw[f]; ok && len(v) > 0 && v[0] == '"' {
					return budget.Invalid(f, string(v), "want an integer between 0 and 2^53-1, not a string")
				}
			}
		}
		return budget.Invalid("json", clip(b), "token counts must be JSON numbers")
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		want := "want a string"
		if te.Type == reflect.TypeFor[tokenCount]() {
			want = "want an integer between 0 and 2^53-1"
		}
		return budget.Invalid(te.Field, te.Value, want)
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ := strconv.Unquote(f)
		return budget.Invalid("field", name, "unknown; want request_id, key, provider, model, user, team, org, input, output, reasoning, cache_read, cache_write, at, cost, tags")
	}
	return budget.Invalid("json", clip(b), err.Error())
}

// lineID is the request id of a line without one: deterministic, so
// importing the same file again finds it a duplicate.
func lineID(salt string, b []byte, n int) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%d\n", salt, n)
	h.Write(b)
	return "imp_" + hex.EncodeToString(h.Sum(nil)[:12])
}

// clip shortens a line for an error message.
func clip(b []byte) string {
	const max = 80
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}

// isTerminal reports whether w is a terminal (a progress line is shown only there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
