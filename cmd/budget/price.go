package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

const priceHelp = `usage: budget price <set|ls|import> [flags]

	price set      add or replace one price version
	price ls       list every price version
	price import   add or replace the prices of a JSON or CSV file, all or nothing
`

func (m *Main) runPrice(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, priceHelp)
		return usagef("price", "missing subcommand: set, ls or import")
	}
	switch args[0] {
	case "set":
		return m.runPriceSet(ctx, args[1:])
	case "ls", "list":
		return m.runPriceLs(ctx, args[1:])
	case "import":
		return m.runPriceImport(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(m.Stdout, priceHelp)
		return nil
	}
	return usagef("price", "unknown subcommand %q: want set, ls or import", args[0])
}

const priceSetHelp = `usage: budget price set --provider P --model M --input X --output Y
	[--cache-read X] [--cache-write X] [--cache-write-1h X] [--reasoning Y] [--tier T]
	[--above-input N] [--from T] [--json]

Prices are USD per million tokens, up to 6 decimal places. --cache-read and
--cache-write default to the input price, --reasoning to the output price.
--cache-write-1h prices the cache writes a response says went to a 1-hour
cache (Anthropic's); it defaults to the --cache-write price, which prices
the other (5-minute) writes.
--model is matched like a model limit's value (normalised; * and ? make a
pattern). --tier names the service tier the row prices (flex, priority,
batch, ...; default, standard, auto and on_demand are the standard tier,
the default): a request or response naming that tier is priced at it, a
tier without rows at the standard price. --above-input N makes a
long-context row: it prices a request whose prompt is more than N tokens
(Gemini's and Claude's prices above 200000); a request takes its tier's
row with the largest N below its prompt. A price's identity is (provider,
model, tier, above-input, from): a new --from (default now) adds a
version, which prices the events from that instant on; the same --from
replaces it. Creates the database like 'limit set'.

`

func (m *Main) runPriceSet(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("price set")
	dsn := m.dbFlag(fs)
	var s budget.PriceSpec
	fs.StringVar(&s.Provider, "provider", "", "provider (required)")
	fs.StringVar(&s.Model, "model", "", "model name or pattern (required)")
	fs.StringVar(&s.Input, "input", "", "USD per million input tokens (required)")
	fs.StringVar(&s.Output, "output", "", "USD per million output tokens (required)")
	cr := fs.String("cache-read", "", "USD per million cache-read tokens (default: the input price)")
	cw := fs.String("cache-write", "", "USD per million cache-write tokens (default: the input price)")
	rs := fs.String("reasoning", "", "USD per million reasoning tokens (default: the output price)")
	cw1h := fs.String("cache-write-1h", "", "USD per million tokens written to a 1-hour cache (default: the cache-write price)")
	fs.StringVar(&s.Tier, "tier", "", "service tier this row prices: flex, priority, batch, ... (default: the standard tier)")
	fs.Int64Var(&s.AboveInput, "above-input", 0, "a long-context row: applies to prompts of more than `N` tokens")
	from := fs.String("from", "", "RFC3339 instant the price applies from (default now)")
	asJSON := fs.Bool("json", false, "print the price as JSON")
	pos, err := m.parseArgs(fs, priceSetHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("price set", pos); err != nil {
		return err
	}
	set := visited(fs)
	if set["cache-read"] {
		s.CacheRead = cr
	}
	if set["cache-write"] {
		s.CacheWrite = cw
	}
	if set["reasoning"] {
		s.Reason = rs
	}
	if set["cache-write-1h"] {
		s.CacheWrite1h = cw1h
	}
	if *from != "" {
		if s.From, err = parseAtField("from", *from); err != nil {
			return err
		}
	} else {
		s.From = m.Now()
	}
	if _, err := s.Parse(m.Now()); err != nil { // before the database is opened
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{create: true})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	ps, err := db.SetPrices(ctx, s)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, jsonview.PriceOf(&ps[0]))
	}
	row := ""
	if ps[0].Tier != "" {
		row += " tier " + ps[0].Tier
	}
	if ps[0].AboveInput > 0 {
		row += fmt.Sprintf(" above %d input tokens", ps[0].AboveInput)
	}
	_, err = fmt.Fprintf(m.Stdout, "%s %s%s from %s\n", ps[0].Provider, ps[0].Model, row, ts(ps[0].From))
	return err
}

const priceLsHelp = `usage: budget price ls [--json]

Lists every price version by provider, model, tier, threshold and from, in
USD per million tokens. With --json prints {"prices": [{"provider",
"model", "tier", "above_input", "from", "input", "output", "cache_read",
"cache_write", "reasoning"}]} (prices as decimal strings of dollars; tier ""
is the standard tier, above_input 0 a row for any prompt).

`

func (m *Main) runPriceLs(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("price ls")
	dsn := m.dbFlag(fs)
	asJSON := fs.Bool("json", false, `print {"prices": [...]}`)
	pos, err := m.parseArgs(fs, priceLsHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("price ls", pos); err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	ps, err := db.ListPrices(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		out := struct {
			Prices []jsonview.Price `json:"prices"`
		}{make([]jsonview.Price, len(ps))}
		for i := range ps {
			out.Prices[i] = jsonview.PriceOf(&ps[i])
		}
		return writeJSON(m.Stdout, out)
	}
	if len(ps) == 0 {
		_, err = fmt.Fprintln(m.Stdout, "no prices")
		return err
	}
	w := newTable(m.Stdout)
	fmt.Fprintln(w, "PROVIDER\tMODEL\tTIER\tABOVE INPUT\tFROM\tINPUT $/M\tOUTPUT $/M\tCACHE READ $/M\tCACHE WRITE $/M\tREASONING $/M")
	for _, p := range ps {
		tier, above := cmp.Or(p.Tier, "standard"), "-"
		if p.AboveInput > 0 {
			above = itoa(p.AboveInput)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Provider, p.Model, tier, above, ts(p.From), budget.FormatUSD(p.Input),
			budget.FormatUSD(p.Output), budget.FormatUSD(p.CacheRead), budget.FormatUSD(p.CacheWrite), budget.FormatUSD(p.Reasoning))
	}
	return w.Flush()
}

const priceImportHelp = `usage: budget price import FILE|-

Adds or replaces the prices of FILE (- reads stdin), all or nothing: every
entry is validated before anything is written. JSON: {"prices": [{"provider",
"model", "tier", "above_input", "from", "input", "output", "cache_read",
"cache_write", "reasoning", "cache_write_1h"}]}, or that array alone (prices as numbers or strings of dollars per million tokens;
tier, above_input, from, cache_read, cache_write, reasoning and cache_write_1h optional (see
'price set' for tier and above_input); unknown fields are
invalid). CSV: a header naming those columns (provider, model, input and
output required), then one price per line. A FILE named *.json, or whose
first character is '{' or '[', is JSON; anything else is CSV. Errors name
the entry (prices[i] in JSON, the line in CSV), the field and the value.
Prints how many prices it stored.

`

func (m *Main) runPriceImport(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("price import")
	dsn := m.dbFlag(fs)
	pos, err := m.parseArgs(fs, priceImportHelp, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("price import", "want one FILE (or - for stdin), got %d arguments", len(pos))
	}
	var data []byte
	if pos[0] == "-" {
		data, err = io.ReadAll(m.Stdin)
	} else {
		data, err = os.ReadFile(pos[0])
	}
	if err != nil {
		return err
	}
	specs, err := parsePriceFile(pos[0], data, m.Now())
	if err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{create: true})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	ps, err := db.SetPrices(ctx, specs...)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(m.Stdout, "stored %d prices\n", len(ps))
	return err
}

// priceFields are the fields of a price entry, for errors.
const priceFields = "provider, model, tier, above_input, from, input, output, cache_read, cache_write, reasoning, cache_write_1h"

// priceEntry is one price of a JSON price file.
type priceEntry struct {
	Provider   string       `json:"provider"`
	Model      string       `json:"model"`
	Tier       string       `json:"tier"`
	AboveInput int64        `json:"above_input"`
	From       string       `json:"from"`
	Input      json.Number  `json:"input"`
	Output     json.Number  `json:"output"`
	CacheRead  *json.Number `json:"cache_read"`
	CacheWrite *json.Number `json:"cache_write"`
	Reasoning  *json.Number `json:"reasoning"`

	CacheWrite1h *json.Number `json:"cache_write_1h"`
}

// parsePriceFile reads a JSON or CSV price file and validates every entry.
// A file named *.json, or whose content starts with { or [, is JSON:
// {"prices": [...]} or a bare array of prices. Errors name the entry: the
// JSON index (prices[i]) or the CSV line.
func parsePriceFile(name string, data []byte, now time.Time) ([]budget.PriceSpec, error) {
	var specs []budget.PriceSpec
	var where []string // each spec's entry, for errors
	var froms []string // each spec's from as written, for errors
	t := bytes.TrimSpace(data)
	if strings.EqualFold(filepath.Ext(name), ".json") || len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		var raw []json.RawMessage
		if len(t) > 0 && t[0] == '[' {
			if err := json.Unmarshal(t, &raw); err != nil {
				return nil, budget.Invalid("json", "", err.Error())
			}
		} else {
			dec := json.NewDecoder(bytes.NewReader(t))
			dec.DisallowUnknownFields()
			var f struct {
				Prices []json.RawMessage `json:"prices"`
			}
			if err := dec.Decode(&f); err != nil {
				if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
					return nil, budget.Invalid("field", strings.Trim(field, `"`), `unknown; want {"prices": [...]} or an array of prices`)
				}
				return nil, budget.Invalid("json", "", err.Error())
			}
			raw = f.Prices
		}
		str := func(n *json.Number) *string {
			if n == nil {
				return nil
			}
			s := string(*n)
			return &s
		}
		for i, r := range raw {
			at := fmt.Sprintf("prices[%d]", i)
			dec := json.NewDecoder(bytes.NewReader(r))
			dec.DisallowUnknownFields()
			dec.UseNumber()
			var p priceEntry
			if err := dec.Decode(&p); err != nil {
				return nil, fmt.Errorf("%s: %w", at, priceJSONError(err))
			}
			specs = append(specs, budget.PriceSpec{Provider: p.Provider, Model: p.Model, Tier: p.Tier, AboveInput: p.AboveInput,
				Input: string(p.Input), Output: string(p.Output),
				CacheRead: str(p.CacheRead), CacheWrite: str(p.CacheWrite), Reason: str(p.Reasoning), CacheWrite1h: str(p.CacheWrite1h), From: fromText(p.From)})
			where, froms = append(where, at), append(froms, p.From)
		}
	} else {
		r := csv.NewReader(bytes.NewReader(data))
		r.TrimLeadingSpace = true
		header, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil, budget.Invalid("csv", "", "empty: want a header line")
		}
		if err != nil {
			return nil, budget.Invalid("csv", "", err.Error())
		}
		col := map[string]int{}
		for i, h := range header {
			h = strings.TrimSpace(h)
			switch h {
			case "provider", "model", "tier", "above_input", "from", "input", "output", "cache_read", "cache_write", "reasoning", "cache_write_1h":
				col[h] = i
			default:
				return nil, budget.Invalid("field", h, "unknown; want "+priceFields)
			}
		}
		for {
			row, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, budget.Invalid("csv", "", err.Error())
			}
			line, _ := r.FieldPos(0)
			get := func(name string) (string, bool) {
				i, ok := col[name]
				if !ok || i >= len(row) || strings.TrimSpace(row[i]) == "" {
					return "", false
				}
				return strings.TrimSpace(row[i]), true
			}
			opt := func(name string) *string {
				if v, ok := get(name); ok {
					return &v
				}
				return nil
			}
			s := budget.PriceSpec{CacheRead: opt("cache_read"), CacheWrite: opt("cache_write"), Reason: opt("reasoning"), CacheWrite1h: opt("cache_write_1h")}
			s.Provider, _ = get("provider")
			s.Model, _ = get("model")
			s.Input, _ = get("input")
			s.Output, _ = get("output")
			s.Tier, _ = get("tier")
			if v, ok := get("above_input"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("line %d: %w", line, budget.Invalid("above_input", v, "want a whole number of prompt tokens"))
				}
				s.AboveInput = n
			}
			from, _ := get("from")
			s.From = fromText(from)
			specs = append(specs, s)
			where, froms = append(where, fmt.Sprintf("line %d", line)), append(froms, from)
		}
	}
	if len(specs) == 0 {
		return nil, budget.Invalid("prices", "", "the file holds no price")
	}
	for i, s := range specs {
		if !s.From.IsZero() && s.From.Equal(badFrom) {
			return nil, fmt.Errorf("%s: %w", where[i], budget.Invalid("from", froms[i], "want an RFC3339 time such as 2026-03-02T09:00:00Z"))
		}
		if _, err := s.Parse(now); err != nil {
			return nil, fmt.Errorf("%s: %w", where[i], err)
		}
	}
	return specs, nil
}

// priceJSONError is a JSON price entry's decoding error naming the field.
func priceJSONError(err error) error {
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		return budget.Invalid(te.Field, te.Value, "want a number for prices, a string for names and from")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return budget.Invalid("field", strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`), "unknown; want "+priceFields)
	}
	return budget.Invalid("json", "", err.Error())
}

// badFrom marks a from that did not parse (fromText), so validation names it.
var badFrom = time.Unix(0, 1).UTC()

func fromText(s string) time.Time {
	if strings.TrimSpace(s) == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(s))
	if err != nil {
		return badFrom
	}
	return t
}

// parseAtField is parseAt naming another field.
func parseAtField(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, budget.Invalid(field, s, "want an RFC3339 time such as 2026-03-02T09:00:00Z")
	}
	return t, budget.CheckInstant(field, t)
}
