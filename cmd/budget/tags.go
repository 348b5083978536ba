package main

import (
	"flag"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
)

// tagList is the repeatable --tag NAME=VALUE: one tag per flag.
type tagList []string

func (l *tagList) String() string { return strings.Join(*l, ",") }

func (l *tagList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// tagFlag adds --tag to fs and returns what reads it: the tags given,
// normalized (budget.NormalizeTags), with errors naming the flag's value.
func tagFlag(fs *flag.FlagSet) func() (budget.Tags, error) {
	var l tagList
	fs.Var(&l, "tag", "a tag of the request, NAME=VALUE (repeatable; at most 8): tag limits count by them")
	return func() (budget.Tags, error) {
		for _, v := range l {
			if strings.Contains(v, ",") {
				return "", budget.Invalid("tag", v, "one NAME=VALUE per --tag (a value has no ',')")
			}
		}
		return budget.NormalizeTags("tag", budget.Tags(l.String()))
	}
}
