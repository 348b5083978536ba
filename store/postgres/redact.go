package postgres

import (
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// kvPassword matches a password in a keyword/value DSN: group 1 is the
// keyword, group 2 the value, quoted or not.
var kvPassword = regexp.MustCompile(`(?i)\b((?:ssl)?password)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// Redact returns dsn with its password (and sslpassword) masked, for
// messages and logs. It handles URLs and keyword/value strings.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		out := kvPassword.ReplaceAllString(dsn, "${1}=xxxxx")
		if i, j := strings.Index(out, "://"), strings.LastIndex(out, "@"); i >= 0 && j > i {
			// A URL too broken to parse: mask all of its user info.
			out = out[:i+3] + "xxxxx" + out[j:]
		}
		return out
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	changed := false
	for k := range q {
		if lk := strings.ToLower(k); lk == "password" || lk == "sslpassword" {
			q[k] = []string{"xxxxx"}
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// secretsOf lists the passwords a DSN holds, raw and decoded, longest
// first, for scrubbing messages that might quote them.
func secretsOf(dsn string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 3 {
			out = append(out, s)
		}
	}
	if strings.Contains(dsn, "://") {
		if u, err := url.Parse(dsn); err == nil {
			if p, ok := u.User.Password(); ok {
				add(p)
				add(url.QueryEscape(p))
				add(url.PathEscape(p))
			}
			for k, vs := range u.Query() {
				if lk := strings.ToLower(k); lk == "password" || lk == "sslpassword" {
					for _, v := range vs {
						add(v)
						add(url.QueryEscape(v))
					}
				}
			}
		}
		// The raw user info's password, however the URL parsed.
		if i, j := strings.Index(dsn, "://"), strings.LastIndex(dsn, "@"); j > i {
			if k := strings.Index(dsn[i+3:j], ":"); k >= 0 {
				add(dsn[i+3+k+1 : j])
			}
		}
	} else {
		for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
			add(strings.Trim(m[2], "'"))
		}
	}
	// Longest first, so a secret containing another is replaced whole.
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// scrub returns err with every secret of the DSN masked in its message; it
// still unwraps to err.
func (d *DB) scrub(err error) error {
	if err == nil || len(d.secrets) == 0 {
		return err
	}
	msg := err.Error()
	clean := msg
	for _, s := range d.secrets {
		clean = strings.ReplaceAll(clean, s, "xxxxx")
	}
	if clean == msg {
		return err
	}
	return &redacted{msg: clean, err: err}
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }
