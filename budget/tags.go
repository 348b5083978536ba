package budget

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Tags: budgets by project, feature or workflow, whatever a request says it
// is for.
//
// A request carries at most MaxTags tags, each name=value. Names are
// folded to lower case (Project and project are one tag, as HTTP header
// names are one header) and are 1 to MaxTagNameLen bytes of a-z, 0-9, '_',
// '-' and '.', starting with a letter or a digit. Values keep their case
// (they are the client's identifiers, like end users) and are names as
// CheckName bounds them, at most MaxTagValueLen bytes, without ',' or '='
// (which separate tags) and not "*" (which a limit's value uses to mean
// each value). A name given twice in one request is refused: the request
// would say two things about what it is for.
//
// A limit of ScopeTag counts the requests carrying one tag ("project=atlas")
// or, with the value AllValues ("project=*"), each value of one tag
// separately: a counter per value, created on first use, as a per-user
// limit counts each end user. A tag limit belongs to a key, a team, an org
// or is a default, exactly as a user limit: a team's project=* limit
// counts each project across the team's keys; a default one counts each
// (key, project). One budget for a project across every key is a limit
// of an org (or a team) that holds those keys.

// ScopeTag is the scope of a limit that counts requests by a tag.
const ScopeTag Scope = "tag"

// Tags are a request's tags as "name=value,name=value". Normalized (see
// NormalizeTags), the names are lower case and sorted, with no space: the
// form events store and stores match.
type Tags string

const (
	MaxTags        = 8   // tags on one request
	MaxTagNameLen  = 64  // bytes of a tag's name
	MaxTagValueLen = 128 // bytes of a tag's value
	// AllValues is the value of a tag limit that counts each value of its
	// tag separately ("project=*").
	AllValues = "*"
)

// NormalizeTags validates tags given as "name=value,..." (spaces around
// either trimmed) and returns them in normal form; field names them in
// errors ("tags", the header, the flag).
func NormalizeTags(field string, tags Tags) (Tags, error) {
	s := strings.TrimSpace(string(tags))
	if s == "" {
		return "", nil
	}
	if canonicalTags(s) {
		return Tags(s), nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxTags {
		return "", invalid(field, clip(s), "has "+strconv.Itoa(len(parts))+" tags; at most "+strconv.Itoa(MaxTags)+" allowed")
	}
	type tag struct{ name, value string }
	ts := make([]tag, 0, len(parts))
	for _, p := range parts {
		name, value, ok := strings.Cut(p, "=")
		if !ok {
			return "", invalid(field, clip(strings.TrimSpace(p)), "want name=value")
		}
		name, value = strings.ToLower(strings.TrimSpace(name)), strings.TrimSpace(value)
		if err := checkTagName(field, name); err != nil {
			return "", err
		}
		if err := checkTagValue(field, name, value); err != nil {
			return "", err
		}
		if slices.ContainsFunc(ts, func(t tag) bool { return t.name == name }) {
			return "", invalid(field, name, "is given twice: a request has one value per tag")
		}
		ts = append(ts, tag{name, value})
	}
	slices.SortFunc(ts, func(a, b tag) int { return strings.Compare(a.name, b.name) })
	var b strings.Builder
	for i, t := range ts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t.name + "=" + t.value)
	}
	return Tags(b.String()), nil
}

// canonicalTags reports whether s is already in normal form, so a request
// that sends its tags that way is checked without allocating.
func canonicalTags(s string) bool {
	prev, n := "", 0
	for p := range strings.SplitSeq(s, ",") {
		name, value, ok := strings.Cut(p, "=")
		if n++; !ok || n > MaxTags || name <= prev || checkTagName("", name) != nil || checkTagValue("", name, value) != nil {
			return false
		}
		prev = name
	}
	return true
}

func checkTagName(field, name string) error {
	if name == "" {
		return invalid(field, name, "a tag needs a name before '='")
	}
	if len(name) > MaxTagNameLen {
		return invalid(field, clip(name), "tag name is "+strconv.Itoa(len(name))+" bytes; at most "+strconv.Itoa(MaxTagNameLen)+" allowed")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-' || c == '.') && i > 0:
		default:
			return invalid(field, clip(name), "a tag name is letters, digits, '_', '-' and '.', starting with a letter or digit")
		}
	}
	return nil
}

func checkTagValue(field, name, value string) error {
	f := field
	if f != "" {
		f = field + " " + name
	}
	switch {
	case value == "":
		return invalid(f, value, "a tag needs a value after '='")
	case value == AllValues:
		return invalid(f, value, "* is not a value: a limit's tag value * means each value")
	case len(value) > MaxTagValueLen:
		return invalid(f, clip(value), "tag value is "+strconv.Itoa(len(value))+" bytes; at most "+strconv.Itoa(MaxTagValueLen)+" allowed")
	case strings.ContainsAny(value, ",="):
		return invalid(f, clip(value), "a tag value has no ',' or '=' (they separate tags)")
	case strings.TrimSpace(value) != value:
		return invalid(f, clip(value), "a tag value has no space at either end")
	}
	return CheckName(f, value)
}

// Value is the value of tag name in normalized tags, and whether it is
// there.
func (ts Tags) Value(name string) (string, bool) {
	s := string(ts)
	for s != "" {
		p := s
		if i := strings.IndexByte(s, ','); i >= 0 {
			p, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		if len(p) > len(name) && p[len(name)] == '=' && p[:len(name)] == name {
			return p[len(name)+1:], true
		}
	}
	return "", false
}

// Map is ts as a map from name to value (nil for none).
func (ts Tags) Map() map[string]string {
	if ts == "" {
		return nil
	}
	out := make(map[string]string, strings.Count(string(ts), ",")+1)
	for p := range strings.SplitSeq(string(ts), ",") {
		k, v, _ := strings.Cut(p, "=")
		out[k] = v
	}
	return out
}

// TagsOf is the tags of m, normalized; each name and value is checked on
// its own, so the error names the tag as given.
func TagsOf(field string, m map[string]string) (Tags, error) {
	if len(m) == 0 {
		return "", nil
	}
	parts := make([]string, 0, len(m))
	for k, v := range m {
		name, value := strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if err := checkTagName(field, name); err != nil {
			return "", err
		}
		if err := checkTagValue(field, name, value); err != nil {
			return "", err
		}
		parts = append(parts, name+"="+value)
	}
	return NormalizeTags(field, Tags(strings.Join(parts, ",")))
}

// MarshalJSON writes ts as an object of name to value ({} for none).
func (ts Tags) MarshalJSON() ([]byte, error) {
	m := ts.Map()
	if m == nil {
		m = map[string]string{}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads an object of name to value (or null), normalized.
func (ts *Tags) UnmarshalJSON(b []byte) error {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return invalid("tags", clip(string(b)), "want an object of tag names to values")
	}
	t, err := TagsOf("tags", m)
	if err != nil {
		return err
	}
	*ts = t
	return nil
}

// checkTagScope validates a tag limit's value, "name=value" or
// "name=*", and returns it normalized.
func checkTagScope(v string) (string, error) {
	name, value, ok := strings.Cut(v, "=")
	if !ok {
		return v, invalid("value", v, "a tag limit's value is name=value, or name=* for each value separately")
	}
	name, value = strings.ToLower(strings.TrimSpace(name)), strings.TrimSpace(value)
	if err := checkTagName("value", name); err != nil {
		return v, err
	}
	if value != AllValues {
		if err := checkTagValue("value", name, value); err != nil {
			return v, err
		}
	}
	return name + "=" + value, nil
}

// TagScope is a tag limit's tag name and value (AllValues for each); ""
// for other limits.
func (l *Limit) TagScope() (name, value string) {
	if l.Scope != ScopeTag {
		return "", ""
	}
	name, value, _ = strings.Cut(l.ScopeValue, "=")
	return name, value
}

// EachTag reports whether l counts each value of a tag separately (scope
// tag, value name=*).
func (l *Limit) EachTag() bool {
	_, v := l.TagScope()
	return v == AllValues
}

// Each reports whether l keeps a counter per end user or per tag value
// (EachUser or EachTag): its Subject then names the user or the value.
func (l *Limit) Each() bool { return l.EachUser() || l.EachTag() }

// eachValue is the user or tag value whose counter of l (Each) a request
// of who counts in.
func (l *Limit) eachValue(who *Who) string {
	if l.Scope == ScopeUser {
		return who.User
	}
	name, _ := l.TagScope()
	v, _ := who.Tags.Value(name)
	return v
}

// appliesTag reports whether a request carrying tags counts in tag
// limit l.
func (l *Limit) appliesTag(tags Tags) bool {
	name, value := l.TagScope()
	v, ok := tags.Value(name)
	return ok && (value == AllValues || v == value)
}

// SubjectValue is the end user or tag value whose counter of a per-user
// or per-tag-value limit l is; "" for other limits, or when l is shown
// for no user or value.
func (l *Limit) SubjectValue() string {
	if !l.Each() {
		return ""
	}
	if !l.IsDefault() {
		return l.Subject
	}
	_, v, _ := strings.Cut(l.Subject, SubjectSep)
	return v
}

// SubjectTag is the tag ("project=atlas") whose counter of a per-value tag
// limit l is; "" for other limits, or when l is shown for no value.
func (l *Limit) SubjectTag() string {
	if !l.EachTag() {
		return ""
	}
	v := l.SubjectValue()
	if v == "" {
		return ""
	}
	name, _ := l.TagScope()
	return name + "=" + v
}

// historyTag is the tag ("name=value") the events l's counter for
// l.Subject sums carry: the scope's, or for a per-value limit the
// subject's value.
func (l *Limit) historyTag() string {
	name, value := l.TagScope()
	if value == AllValues {
		value = l.SubjectValue()
	}
	return name + "=" + value
}

// TagDim is the report dimension of tag name: "tag:name".
func TagDim(name string) Dim { return Dim("tag:" + name) }

// TagName is the tag a dimension groups by ("" when d is no tag's).
func (d Dim) TagName() string {
	name, ok := strings.CutPrefix(string(d), "tag:")
	if !ok {
		return ""
	}
	return name
}

// parseTagDim validates "tag:NAME" and returns it with the name folded.
func parseTagDim(f string) (Dim, error) {
	name := strings.ToLower(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(f), "tag:")))
	if err := checkTagName("by", name); err != nil {
		return "", err
	}
	return TagDim(name), nil
}

// Has reports whether normalized ts carry tag, a "name=value" (what
// History.Tag names).
func (ts Tags) Has(tag string) bool {
	name, value, _ := strings.Cut(tag, "=")
	v, ok := ts.Value(name)
	return ok && v == value
}
