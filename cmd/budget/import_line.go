package main

import (
	"strings"
	"unicode/utf8"
)

// decodePlain decodes b into l as encoding/json would (with
// DisallowUnknownFields and UseNumber, one object and nothing after it),
// for the lines an export writes: one object of the known fields, each
// named exactly and once, whose strings hold no escape and whose numbers
// are integers. It reports false, having maybe written part of l, for any
// other line, valid or not, which the caller then decodes with
// encoding/json: that is what reads and names every error. It exists
// because encoding/json took a fifth of an import's CPU.
//
// The line is copied into one string, and the names, numbers and values
// are substrings of it, not an allocation each (17 a line were half its
// parsing): the values an event keeps beyond the import (key, provider,
// model, the levels, the user) are copied out, so a long-lived string
// never holds the whole line.
func (l *importLine) decodePlain(b []byte) bool {
	p := plainScanner{b: string(b)}
	if !p.byte('{') {
		return false
	}
	if p.byte('}') {
		return p.empty()
	}
	var seen uint16
	for {
		name, ok := p.str()
		if !ok || !p.byte(':') {
			return false
		}
		f := plainField(name)
		if f < 0 || seen&(1<<f) != 0 {
			return false
		}
		seen |= 1 << f
		switch f {
		case fieldInput, fieldOutput, fieldReasoning, fieldCacheRead, fieldCacheWrite, fieldCost:
			n, ok := p.integer()
			if !ok {
				return false
			}
			switch f {
			case fieldInput:
				l.Input = tokenCount(n)
			case fieldOutput:
				l.Output = tokenCount(n)
			case fieldReasoning:
				l.Reasoning = tokenCount(n)
			case fieldCacheRead:
				l.CacheRead = tokenCount(n)
			case fieldCacheWrite:
				l.CacheWrite = tokenCount(n)
			case fieldCost:
				l.Cost = []byte(n) // encoding/json's RawMessage: a copy anyway
			}
		default:
			v, ok := p.str()
			if !ok {
				return false
			}
			switch f {
			case fieldRequestID:
				l.RequestID = strings.Clone(v)
			case fieldKey:
				l.Key = strings.Clone(v)
			case fieldProvider:
				l.Provider = strings.Clone(v)
			case fieldModel:
				l.Model = strings.Clone(v)
			case fieldUser:
				l.User = strings.Clone(v)
			case fieldTeam:
				team := strings.Clone(v)
				l.Team = &team
			case fieldOrg:
				org := strings.Clone(v)
				l.Org = &org
			case fieldAt:
				at := v // parsed, not kept
				l.At = &at
			}
		}
		if p.byte('}') {
			return p.empty()
		}
		if !p.byte(',') {
			return false
		}
	}
}

// The fields decodePlain reads, as importLine names them in JSON.
const (
	fieldRequestID = iota
	fieldKey
	fieldProvider
	fieldModel
	fieldUser
	fieldTeam
	fieldOrg
	fieldInput
	fieldOutput
	fieldReasoning
	fieldCacheRead
	fieldCacheWrite
	fieldAt
	fieldCost
)

func plainField(name string) int {
	switch name {
	case "request_id":
		return fieldRequestID
	case "key":
		return fieldKey
	case "provider":
		return fieldProvider
	case "model":
		return fieldModel
	case "user":
		return fieldUser
	case "team":
		return fieldTeam
	case "org":
		return fieldOrg
	case "input":
		return fieldInput
	case "output":
		return fieldOutput
	case "reasoning":
		return fieldReasoning
	case "cache_read":
		return fieldCacheRead
	case "cache_write":
		return fieldCacheWrite
	case "at":
		return fieldAt
	case "cost":
		return fieldCost
	}
	return -1 // unknown, or a name encoding/json would match without case
}

// plainScanner reads b from i, skipping JSON's whitespace before each
// token.
type plainScanner struct {
	b string
	i int
}

func (p *plainScanner) skip() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// empty reports whether only whitespace is left.
func (p *plainScanner) empty() bool {
	p.skip()
	return p.i == len(p.b)
}

// byte takes c if it is the next token.
func (p *plainScanner) byte(c byte) bool {
	p.skip()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str takes a string with no escape, no control character and valid
// UTF-8 (encoding/json would replace invalid bytes).
func (p *plainScanner) str() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	start := p.i
	ascii := true
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			if !ascii && !utf8.ValidString(s) {
				return "", false
			}
			return s, true
		case c == '\\' || c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

// integer takes a JSON number that is an integer: an optional minus,
// then 0 or digits not starting with 0, and no fraction or exponent.
func (p *plainScanner) integer() (string, bool) {
	p.skip()
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	switch {
	case p.i == digits, p.b[digits] == '0' && p.i-digits > 1:
		return "", false
	case p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E'):
		return "", false
	}
	return p.b[start:p.i], true
}
