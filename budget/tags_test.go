package budget_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
)

func TestNormalizeTagsSortsFoldsAndTrims(t *testing.T) {
	for in, want := range map[budget.Tags]budget.Tags{
		"":                                   "",
		"  ":                                 "",
		"project=atlas":                      "project=atlas",
		"project=atlas,feature=search":       "feature=search,project=atlas",
		" Project = Atlas , FEATURE=search ": "feature=search,project=Atlas", // names fold, values keep their case
		"a.b-c_d=x y":                        "a.b-c_d=x y",
	} {
		got, err := budget.NormalizeTags("tags", in)
		if err != nil || got != want {
			t.Errorf("NormalizeTags(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestNormalizeTagsRefusesWithTheFieldAndValue(t *testing.T) {
	for in, want := range map[budget.Tags]string{
		"project":                             `tags "project": want name=value`,
		"project=a,Project=b":                 `tags "project": is given twice`,
		"=x":                                  "needs a name",
		"project=":                            "needs a value",
		"project=*":                           "* is not a value",
		"pro ject=a":                          "a tag name is letters",
		"_x=a":                                "starting with a letter or digit",
		"a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8,i=9": "has 9 tags; at most 8",
		budget.Tags(strings.Repeat("n", 65) + "=v"):  "at most 64",
		budget.Tags("n=" + strings.Repeat("v", 129)): "at most 128",
		"n=a\tb": "control characters",
	} {
		_, err := budget.NormalizeTags("tags", in)
		if !errors.Is(err, budget.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("NormalizeTags(%q) = %v; want ErrInvalid saying %q", in, err, want)
		}
	}
}

func TestTagsValueAndHasMatchWholeNames(t *testing.T) {
	ts := budget.Tags("feature=search,project=atlas,projects=many")
	if v, ok := ts.Value("project"); !ok || v != "atlas" {
		t.Errorf("Value(project) = %q, %v; want atlas", v, ok)
	}
	if v, ok := ts.Value("proj"); ok {
		t.Errorf("Value(proj) = %q; want none (a prefix of a name is not the name)", v)
	}
	if !ts.Has("projects=many") || ts.Has("project=atl") || ts.Has("feature=searc") {
		t.Error("Has matches a tag only whole")
	}
}

func TestTagsJSONIsAnObject(t *testing.T) {
	b, err := json.Marshal(budget.Usage{Key: "k", Tags: "feature=search,project=atlas"})
	if err != nil || !strings.Contains(string(b), `"tags":{"feature":"search","project":"atlas"}`) {
		t.Fatalf("Marshal = %s, %v; want the tags as an object", b, err)
	}
	if b, _ := json.Marshal(budget.Usage{Key: "k"}); strings.Contains(string(b), "tags") {
		t.Errorf("untagged usage = %s; want no tags field", b)
	}
	var u budget.Usage
	if err := json.Unmarshal([]byte(`{"key":"k","tags":{"Project":"atlas","feature":"search"}}`), &u); err != nil || u.Tags != "feature=search,project=atlas" {
		t.Fatalf("Unmarshal tags = %q, %v; want them normalized", u.Tags, err)
	}
	if err := json.Unmarshal([]byte(`{"key":"k","tags":{"a,b":"x"}}`), &u); !errors.Is(err, budget.ErrInvalid) {
		t.Errorf("a name with a comma = %v; want ErrInvalid", err)
	}
	nine := `{"key":"k","tags":{"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6","g":"7","h":"8","i":"9"}}`
	if err := json.Unmarshal([]byte(nine), &u); !errors.Is(err, budget.ErrInvalid) || !strings.Contains(err.Error(), "has 9 tags; at most 8") {
		t.Errorf("nine tags = %v; want ErrInvalid saying at most 8", err)
	}
	if err := json.Unmarshal([]byte(`{"key":"k","tags":"project=atlas"}`), &u); !errors.Is(err, budget.ErrInvalid) {
		t.Errorf("tags as a string = %v; want ErrInvalid", err)
	}
}

func TestTagLimitValidates(t *testing.T) {
	base := budget.Limit{Key: "k", Scope: budget.ScopeTag, Metric: budget.MetricTokens, Max: 10, Window: fixed(3600e9)}
	for in, want := range map[string]string{"Project=atlas": "project=atlas", " project = * ": "project=*"} {
		l := base
		l.ScopeValue = in
		got, err := l.Validate()
		if err != nil || got.ScopeValue != want {
			t.Errorf("Validate tag %q = %q, %v; want %q", in, got.ScopeValue, err, want)
		}
	}
	for _, in := range []string{"project", "project=", "=atlas", "project=a,b", "project=a=b"} {
		l := base
		l.ScopeValue = in
		if _, err := l.Validate(); !errors.Is(err, budget.ErrInvalid) || !strings.Contains(err.Error(), "value") {
			t.Errorf("Validate tag %q = %v; want ErrInvalid naming the value", in, err)
		}
	}
}

func TestParseDimsTakesTagNames(t *testing.T) {
	ds, err := budget.ParseDims("tag:Project,key,tag:feature")
	if err != nil || len(ds) != 3 || ds[0] != budget.TagDim("project") || ds[0].TagName() != "project" || ds[2].TagName() != "feature" {
		t.Fatalf("ParseDims = %v, %v; want tag:project, key, tag:feature", ds, err)
	}
	for _, bad := range []string{"tag:", "tag:a b", "tag:x,tag:X", "tags"} {
		if _, err := budget.ParseDims(bad); !errors.Is(err, budget.ErrInvalid) {
			t.Errorf("ParseDims(%q) = %v; want ErrInvalid", bad, err)
		}
	}
}

func TestTagLimitAppliesByItsTag(t *testing.T) {
	one := budget.Limit{Key: "k", Scope: budget.ScopeTag, ScopeValue: "project=atlas"}
	each := budget.Limit{Key: "k", Scope: budget.ScopeTag, ScopeValue: "project=*"}
	for _, c := range []struct {
		tags      budget.Tags
		one, each bool
	}{
		{"", false, false},
		{"project=atlas", true, true},
		{"feature=x,project=zeus", false, true},
		{"projects=atlas", false, false},
	} {
		who := budget.Who{Key: "k", Tags: c.tags}
		if one.Applies(&who, "", "") != c.one || each.Applies(&who, "", "") != c.each {
			t.Errorf("tags %q: applies one %v each %v; want %v %v", c.tags, one.Applies(&who, "", ""), each.Applies(&who, "", ""), c.one, c.each)
		}
	}
	if !each.EachTag() || !each.Each() || one.EachTag() {
		t.Error("EachTag is the value * alone")
	}
	each.Subject = "atlas"
	if each.SubjectTag() != "project=atlas" || each.SubjectValue() != "atlas" {
		t.Errorf("SubjectTag = %q; want project=atlas", each.SubjectTag())
	}
	if h := each.History(); h.Tag != "project=atlas" || h.Key != "k" {
		t.Errorf("History = %+v; want key k's events tagged project=atlas", h)
	}
	def := budget.Limit{Scope: budget.ScopeTag, ScopeValue: "project=*", Subject: "k" + budget.SubjectSep + "atlas"}
	if h := def.History(); h.Tag != "project=atlas" || h.Key != "k" {
		t.Errorf("default's History = %+v; want key k's events tagged project=atlas", h)
	}
}
