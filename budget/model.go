package budget

import (
	"strings"
	"unicode/utf8"
)

// NormalizeModel is the name a model is matched and counted by, so that
// the spellings providers and gateways use for one model meet one limit:
// lower case, one leading "vendor/" removed, then a trailing "@tag", a
// trailing "-latest" and a trailing date ("-YYYY-MM-DD" or "-YYYYMMDD")
// removed. "openai/GPT-4o-2024-08-06" and "gpt-4o-latest" are "gpt-4o";
// "gpt-4o-mini" stays itself.
func NormalizeModel(m string) string {
	m = strings.TrimSpace(m)
	if hasUpper(m) {
		m = strings.ToLower(m)
	}
	if i := strings.IndexByte(m, '/'); i > 0 {
		m = m[i+1:]
	}
	if i := strings.LastIndexByte(m, '@'); i > 0 {
		m = m[:i]
	}
	m = strings.TrimSuffix(m, "-latest")
	switch {
	case len(m) > 11 && m[len(m)-11] == '-' && isDate(m[len(m)-10:], true):
		m = m[:len(m)-11]
	case len(m) > 9 && m[len(m)-9] == '-' && isDate(m[len(m)-8:], false):
		m = m[:len(m)-9]
	}
	return m
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' || c >= 0x80 {
			return true
		}
	}
	return false
}

// isDate reports whether s is YYYY-MM-DD (dashed) or YYYYMMDD with a
// plausible month and day.
func isDate(s string, dashed bool) bool {
	if dashed {
		if s[4] != '-' || s[7] != '-' {
			return false
		}
		s = s[:4] + s[5:7] + s[8:]
	}
	for i := 0; i < 8; i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	mo := int(s[4]-'0')*10 + int(s[5]-'0')
	d := int(s[6]-'0')*10 + int(s[7]-'0')
	return s[0] >= '1' && mo >= 1 && mo <= 12 && d >= 1 && d <= 31
}

// IsModelPattern reports whether a model-scope limit value is a pattern:
// it holds '*' (any run of characters, none included) or '?' (one
// character). A pattern limit has one counter shared by every model it
// matches.
func IsModelPattern(v string) bool { return strings.ContainsAny(v, "*?") }

// MatchModel reports whether the normalised model m matches the limit
// value v: equal, or matched by the pattern v.
func MatchModel(v, m string) bool {
	if !IsModelPattern(v) {
		return v == m
	}
	return globMatch(v, m)
}

// globMatch matches name against pattern with '*' and '?' only, iteratively
// (no backtracking blow-up: the last star is the only one revisited).
func globMatch(pattern, name string) bool {
	px, nx := 0, 0
	starPx, starNx := -1, 0
	for px < len(pattern) || nx < len(name) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				starPx, starNx = px, nx
				px++
				continue
			case '?':
				if nx < len(name) {
					_, size := utf8.DecodeRuneInString(name[nx:])
					px++
					nx += size
					continue
				}
			default:
				if nx < len(name) && name[nx] == c {
					px++
					nx++
					continue
				}
			}
		}
		if starPx >= 0 && starNx < len(name) {
			_, size := utf8.DecodeRuneInString(name[starNx:])
			starNx += size
			px, nx = starPx+1, starNx
			continue
		}
		return false
	}
	return true
}
