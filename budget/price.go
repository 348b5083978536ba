package budget

import (
	"cmp"
	"math/big"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MicrosPerUSD is how many micro-dollars make a dollar: usd limits, costs
// and prices are integers in micro-dollars, so sums are exact.
const MicrosPerUSD = 1_000_000

// maxPrice bounds a price: $1,000,000 per million tokens, far above any
// model's, low enough that no cost sum can overflow.
const maxPrice = 1_000_000 * MicrosPerUSD

// Price is what one model of one provider costs per million tokens, in
// micro-dollars (the unit of the providers' price pages, scaled), from an
// instant on. Its identity is (Provider, Model, Tier, AboveInput, From): a
// new From adds a version, the same From replaces it. Model is a
// normalised name or a pattern, matched like a model-scope limit's value.
//
// Tier and AboveInput make a model's price a table of rows: Tier "" is the
// standard price, another tier ("flex", "priority", "batch"; see
// NormalizeTier) the price of requests served at it; AboveInput > 0 is a
// long-context row, the price of a request whose prompt (Input) is more than
// AboveInput tokens (Gemini's and Claude's prices above 200,000 prompt
// tokens). A request is priced at its tier's row with the largest
// AboveInput below its prompt, else at the standard tier's (Prices.For).
//
// CacheWrite1h is the price of a cache write kept for an hour (Anthropic's
// 1-hour lifetime; CacheWrite prices the default 5-minute one). Parse
// defaults it to CacheWrite, so a row given no 1-hour price prices every
// cache write at CacheWrite.
type Price struct {
	Provider   string
	Model      string
	Tier       string
	AboveInput int64
	From       time.Time
	Input      int64 // uncached prompt tokens
	Output     int64
	CacheRead  int64 // defaults to Input
	CacheWrite int64 // defaults to Input
	Reasoning  int64 // defaults to Output
	// CacheWrite1h defaults to CacheWrite.
	CacheWrite1h int64
}

// PriceSpec is a price as given: per-kind prices in dollars per million
// tokens (decimal strings, up to 6 places); nil optional ones take their
// defaults. A zero From means now.
type PriceSpec struct {
	Provider, Model               string
	Tier                          string // "": standard (NormalizeTier)
	AboveInput                    int64  // 0: any prompt size
	From                          time.Time
	Input, Output                 string
	CacheRead, CacheWrite, Reason *string
	CacheWrite1h                  *string // nil: the cache-write price
}

// Parse validates the spec into a Price; now is the default From.
func (s PriceSpec) Parse(now time.Time) (Price, error) {
	p := Price{Provider: strings.TrimSpace(s.Provider), Model: strings.TrimSpace(s.Model), From: s.From}
	if p.Provider == "" {
		return p, invalid("provider", s.Provider, "is required")
	}
	if p.Model == "" {
		return p, invalid("model", s.Model, "is required")
	}
	if err := checkNames("provider", p.Provider, "model", p.Model); err != nil {
		return p, err
	}
	if strings.ContainsAny(p.Model, "[]") {
		return p, invalid("model", p.Model, "a model name or pattern takes no brackets (patterns use * and ?)")
	}
	p.Model = NormalizeModel(p.Model)
	p.Tier = NormalizeTier(s.Tier)
	if p.Tier != "" {
		if err := CheckName("tier", p.Tier); err != nil {
			return p, err
		}
		if strings.ContainsAny(p.Tier, "*?") {
			return p, invalid("tier", s.Tier, "a tier is a name such as flex, priority or batch, not a pattern")
		}
	}
	if s.AboveInput < 0 || s.AboveInput > MaxTokens {
		return p, invalid("above_input", s.AboveInput, "must be between 0 and 2^53-1 prompt tokens")
	}
	p.AboveInput = s.AboveInput
	if p.From.IsZero() {
		p.From = now
	}
	if err := CheckInstant("from", p.From); err != nil {
		return p, err
	}
	var err error
	if p.Input, err = parsePrice("input", s.Input); err != nil {
		return p, err
	}
	if p.Output, err = parsePrice("output", s.Output); err != nil {
		return p, err
	}
	p.CacheRead, p.CacheWrite, p.Reasoning = p.Input, p.Input, p.Output
	for _, o := range []struct {
		field string
		v     *string
		dst   *int64
	}{{"cache_read", s.CacheRead, &p.CacheRead}, {"cache_write", s.CacheWrite, &p.CacheWrite}, {"reasoning", s.Reason, &p.Reasoning}} {
		if o.v != nil {
			if *o.dst, err = parsePrice(o.field, *o.v); err != nil {
				return p, err
			}
		}
	}
	p.CacheWrite1h = p.CacheWrite
	if s.CacheWrite1h != nil {
		if p.CacheWrite1h, err = parsePrice("cache_write_1h", *s.CacheWrite1h); err != nil {
			return p, err
		}
	}
	return p, nil
}

// NormalizeTier is the price tier of a service tier as a request or a
// response names it: lower case, spaces trimmed, and the names providers
// give the standard tier ("default", "standard", "auto", "on_demand") as
// "".
func NormalizeTier(t string) string {
	t = strings.ToLower(strings.TrimSpace(t))
	switch t {
	case "default", "standard", "auto", "on_demand":
		return ""
	}
	return t
}

func parsePrice(field, s string) (int64, error) {
	if strings.TrimSpace(s) == "" {
		return 0, invalid(field, s, "is required (USD per million tokens)")
	}
	v, err := ParseUSD(field, s)
	if err != nil {
		return 0, err
	}
	if v > maxPrice {
		return 0, invalid(field, s, "must be at most 1000000 (USD per million tokens)")
	}
	return v, nil
}

// ParseUSD parses a non-negative dollar amount with at most 6 decimal
// places ("25", "25.5", "0.000001") into micro-dollars.
func ParseUSD(field, s string) (int64, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "$")
	whole, frac, dot := strings.Cut(t, ".")
	if whole == "" && (!dot || frac == "") || strings.HasPrefix(whole, "-") || strings.HasPrefix(whole, "+") {
		return 0, invalid(field, s, "want a non-negative dollar amount such as 25.50")
	}
	if len(frac) > 6 {
		return 0, invalid(field, s, "has more than 6 decimal places (the unit is a micro-dollar)")
	}
	for _, part := range []string{whole, frac} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return 0, invalid(field, s, "want a non-negative dollar amount such as 25.50")
			}
		}
	}
	if whole == "" {
		whole = "0"
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > MaxTokens/MicrosPerUSD {
		return 0, invalid(field, s, "is too large")
	}
	f := int64(0)
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	return w*MicrosPerUSD + f, nil
}

// ParseAmount parses an amount of a limit of metric as the CLI's flags
// and the admin API's strings give it: dollars for a usd limit (into
// micro-dollars), else a whole number. field names it in the error.
func ParseAmount(field string, metric Metric, s string) (int64, error) {
	if metric == MetricUSD {
		return ParseUSD(field, s)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, invalid(field, s, "must be a whole number")
	}
	return n, nil
}

// FormatUSD prints micro-dollars as dollars: at least 2 decimal places,
// at most 6, no trailing zeros beyond the second ("25.50", "0.000125").
func FormatUSD(micros int64) string {
	neg := micros < 0
	if neg {
		micros = -micros
	}
	s := strconv.FormatInt(micros/MicrosPerUSD, 10) + "." + strings.TrimRight(strconv.FormatInt(MicrosPerUSD+micros%MicrosPerUSD, 10)[1:], "0")
	if i := strings.IndexByte(s, '.'); len(s)-i-1 < 2 {
		s += strings.Repeat("0", 2-(len(s)-i-1))
	}
	if neg {
		s = "-" + s
	}
	return s
}

// Cost is what the event u costs at price p, in micro-dollars, rounded to
// the nearest micro-dollar (half up): uncached input at the input price,
// cache reads at theirs, cache writes at the cache-write price but for
// their 1-hour part at the 1-hour one, output and reasoning at theirs.
// (Input counts every prompt token; the cache counts are inside it.)
func (p *Price) Cost(u *Usage) int64 {
	uncached := max(u.Input-u.CacheRead-u.CacheWrite, 0)
	write1h := min(max(u.CacheWrite1h, 0), u.CacheWrite)
	return perMillion([]int64{uncached, u.CacheRead, u.CacheWrite - write1h, write1h, u.Output, u.Reasoning},
		[]int64{p.Input, p.CacheRead, p.CacheWrite, p.CacheWrite1h, p.Output, p.Reasoning}, false)
}

// EstimateCost is what an estimate may cost, rounded up: input at the
// input price, output at the output price, an unsplit part at the larger
// of the two (it may be either).
func (p *Price) EstimateCost(e Estimate) int64 {
	return perMillion([]int64{e.Input, e.Output, e.Tokens}, []int64{p.Input, p.Output, max(p.Input, p.Output)}, true)
}

// perMillion is sum(tokens[i] x prices[i]) / 1e6, rounded half up (or up),
// saturating at MaxTokens. Each product fits 128 bits; the sum of a few
// does too.
func perMillion(tokens, prices []int64, up bool) int64 {
	var hi, lo uint64
	for i := range tokens {
		h, l := bits.Mul64(uint64(max(tokens[i], 0)), uint64(max(prices[i], 0)))
		var c uint64
		lo, c = bits.Add64(lo, l, 0)
		hi += h + c
	}
	add := uint64(MicrosPerUSD / 2)
	if up {
		add = MicrosPerUSD - 1
	}
	var c uint64
	lo, c = bits.Add64(lo, add, 0)
	hi += c
	if hi >= MicrosPerUSD {
		n := new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64)
		n.Or(n, new(big.Int).SetUint64(lo))
		n.Quo(n, big.NewInt(MicrosPerUSD))
		if !n.IsInt64() || n.Int64() > MaxTokens {
			return MaxTokens
		}
		return n.Int64()
	}
	q, _ := bits.Div64(hi, lo, MicrosPerUSD)
	return int64(min(q, MaxTokens))
}

// Prices is a price table: every version of every price, looked up by
// provider, normalised model and instant.
type Prices struct {
	byProvider map[string][]Price // sorted: exact models before patterns, then by From descending
}

// NewPrices indexes a list of prices.
func NewPrices(ps []Price) *Prices {
	t := &Prices{byProvider: make(map[string][]Price)}
	for _, p := range ps {
		t.byProvider[p.Provider] = append(t.byProvider[p.Provider], p)
	}
	for _, l := range t.byProvider {
		slices.SortFunc(l, func(a, b Price) int {
			// Each model's rows stay together (For walks them as one
			// entry): by tier, the highest threshold first, newest first.
			return cmp.Or(cmp.Compare(patternRank(a.Model), patternRank(b.Model)), strings.Compare(a.Model, b.Model),
				strings.Compare(a.Tier, b.Tier), cmp.Compare(b.AboveInput, a.AboveInput), b.From.Compare(a.From))
		})
	}
	return t
}

// patternRank orders the candidates of a lookup: an exact name (0) before
// any pattern, and longer patterns (more literal text, more specific)
// before shorter ones.
func patternRank(m string) int {
	if !IsModelPattern(m) {
		return 0
	}
	return 1 + MaxNameLen - len(m)
}

// Lookup is the standard price in force at at for provider and the
// normalised model, for any prompt size: For(provider, model, "", 0, at).
func (t *Prices) Lookup(provider, model string, at time.Time) *Price {
	return t.For(provider, model, "", 0, at)
}

// For is the price in force at at for a request of provider and the
// normalised model served at tier (NormalizeTier) with a prompt of input
// tokens: in the most specific entry matching the model (an exact name
// before a pattern), the row of tier with the largest AboveInput below
// input (a row with AboveInput 0 always applies), each row at its newest
// version from at or before at; a tier the entry has no row for is priced
// at the standard tier's. nil when no entry matches, or the entry has no
// row in force.
func (t *Prices) For(provider, model, tier string, input int64, at time.Time) *Price {
	if t == nil {
		return nil
	}
	tier = NormalizeTier(tier)
	l := t.byProvider[provider]
	for i := 0; i < len(l); {
		// One entry (model) at a time: its rows are contiguous.
		j := i
		for j < len(l) && l[j].Model == l[i].Model {
			j++
		}
		if MatchModel(l[i].Model, model) {
			if p := pick(l[i:j], tier, input, at); p != nil || tier == "" {
				return p
			}
			return pick(l[i:j], "", input, at)
		}
		i = j
	}
	return nil
}

// pick is the row of one entry's rows (sorted by tier, AboveInput
// descending, From descending) for tier and a prompt of input tokens at at.
func pick(rows []Price, tier string, input int64, at time.Time) *Price {
	for k := range rows {
		p := &rows[k]
		if p.Tier != tier || (p.AboveInput > 0 && input <= p.AboveInput) || p.From.After(at) {
			continue
		}
		return p // the largest threshold below input, newest first
	}
	return nil
}

// All lists every price version, by provider, model, tier, AboveInput,
// then From.
func (t *Prices) All() []Price {
	var out []Price
	if t == nil {
		return out
	}
	for _, l := range t.byProvider {
		out = append(out, l...)
	}
	slices.SortFunc(out, func(a, b Price) int {
		return cmp.Or(strings.Compare(a.Provider, b.Provider), strings.Compare(a.Model, b.Model), strings.Compare(a.Tier, b.Tier),
			cmp.Compare(a.AboveInput, b.AboveInput), a.From.Compare(b.From))
	})
	return out
}
