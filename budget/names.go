package budget

import (
	"strconv"
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
