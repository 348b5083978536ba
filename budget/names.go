package budget

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen bounds every name the tracker stores: keys, providers, models,
// request ids, limit ids and scope values. A client of the proxy chooses
// some of them (the model, the request id), so without a bound one request
// could grow the database by megabytes.
const MaxNameLen = 256

// CheckName validates one name: valid UTF-8 of at most MaxNameLen bytes
// with no control characters (newlines, tabs and NUL would corrupt tables,
// logs and CSV). The error quotes at most the first 64 bytes of v.
func CheckName(field, v string) error {
	if len(v) > MaxNameLen {
		return invalid(field, clip(v), "is "+strconv.Itoa(len(v))+" bytes; at most "+strconv.Itoa(MaxNameLen)+" allowed")
	}
	if !utf8.ValidString(v) {
		return invalid(field, clip(v), "must be valid UTF-8")
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return invalid(field, clip(v), "must not contain control characters")
		}
	}
	return nil
}

// CheckLabel validates a name that people read and act on: a key, a team,
// an org or a limit id. It is CheckName and no format characters (Unicode
// category Cf): a right-to-left override or a zero-width character makes
// a name display as another ("ops\u202egnp.exe" shows as "opsexe.png"),
// so an operator could grant, revoke or raise the wrong one. Names a
// client chooses (models, end users) stay accepted as sent and are shown
// escaped (Visible).
func CheckLabel(field, v string) error {
	if err := CheckName(field, v); err != nil {
		return err
	}
	for _, r := range v {
		if isFormat(r) {
			return invalid(field, clip(v), "must not contain invisible format characters such as "+
				strconv.QuoteToASCII(string(r))+" (bidirectional overrides, zero-width characters)")
		}
	}
	return nil
}

// Visible is s for display: each format character (Unicode Cf) written as
// its \uXXXX escape, so a name shows as what it is, not as what a
// bidirectional override or a zero-width character makes it look like.
// Everything else is unchanged; s without one is returned as it is.
func Visible(s string) string {
	i := strings.IndexFunc(s, isFormat)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for _, r := range s[i:] {
		switch {
		case isFormat(r) && r > 0xffff:
			fmt.Fprintf(&b, "\\U%08X", r)
		case isFormat(r):
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isFormat(r rune) bool { return r > 0x7f && unicode.Is(unicode.Cf, r) }

// clip shortens a bad value for an error message.
func clip(v string) string {
	if len(v) <= 64 {
		return v
	}
	n := 64
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return v[:n] + "..."
}

// checkNames runs CheckName over (field, value) pairs.
func checkNames(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := CheckName(pairs[i], pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}
