package main

import (
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// repeated is a flag that may be given more than once, in order.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(s string) error { *r = append(*r, s); return nil }

// upstreamFlags are the flags naming the proxy's upstreams: one --upstream
// URL (every route, as before), or any number of --upstream NAME=URL with
// their --upstream-api, --upstream-key-env and --model-route.
type upstreamFlags struct {
	upstream, api, keyEnv, modelRoute repeated
}

func (u *upstreamFlags) register(fs *flag.FlagSet) {
	fs.Var(&u.upstream, "upstream", "the provider's base `URL`, such as https://api.openai.com; or NAME=URL, repeated, one per upstream")
	fs.Var(&u.api, "upstream-api", "`NAME=KIND`: the API kind of upstream NAME when NAME is not one (openai for any OpenAI-compatible server)")
	fs.Var(&u.keyEnv, "upstream-key-env", "environment `variable` holding the upstream credential for every route; or NAME=VAR for upstream NAME")
	fs.Var(&u.modelRoute, "model-route", "`PATTERN=NAME`: OpenAI-shaped requests for a model matching PATTERN go to upstream NAME (first match first)")
}

// namedUpstream is one --upstream NAME=URL with what its other flags say.
type namedUpstream struct {
	name, kind, url, keyEnv string
}

// named reports whether the --upstream values are of the NAME=URL form.
// A single value with a scheme before any '=' is the one-upstream form.
func (u *upstreamFlags) named() bool {
	if len(u.upstream) == 0 {
		return false
	}
	if len(u.upstream) > 1 {
		return true
	}
	name, _, ok := strings.Cut(u.upstream[0], "=")
	return ok && !strings.Contains(name, "://")
}

// single is the one-upstream form's URL and credential variable ("" for
// none or the per-route defaults).
func (u *upstreamFlags) single() (upstream, keyEnv string, err error) {
	if len(u.api) > 0 || len(u.modelRoute) > 0 {
		return "", "", usagef("proxy", "--upstream-api and --model-route need upstreams named as --upstream NAME=URL")
	}
	if len(u.keyEnv) > 1 || len(u.keyEnv) == 1 && strings.Contains(u.keyEnv[0], "=") {
		return "", "", usagef("proxy", "--upstream-key-env NAME=VAR needs upstreams named as --upstream NAME=URL; with one --upstream URL give --upstream-key-env VAR once")
	}
	if len(u.upstream) == 1 {
		upstream = u.upstream[0]
	}
	if len(u.keyEnv) == 1 {
		keyEnv = u.keyEnv[0]
		if strings.ContainsAny(keyEnv, "= \t") || keyEnv == "" {
			return "", "", budget.Invalid("upstream-key-env", keyEnv, "want an environment variable name")
		}
	}
	return upstream, keyEnv, nil
}

// pair splits a NAME=VALUE flag value, naming the flag in its error.
func pair(flagName, v, want string) (string, string, error) {
	name, value, ok := strings.Cut(v, "=")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if !ok || name == "" || value == "" {
		return "", "", budget.Invalid(flagName, v, "want "+want)
	}
	return name, value, nil
}

// upstreams parses the named form: the upstreams in flag order, each with
// its kind and credential variable, and the model routes.
func (u *upstreamFlags) upstreams() ([]namedUpstream, []proxy.ModelRoute, error) {
	var ups []namedUpstream
	index := map[string]int{}
	for _, v := range u.upstream {
		name, raw, err := pair("upstream", v, "NAME=URL, such as deepseek=https://api.deepseek.com")
		if err != nil {
			return nil, nil, err
		}
		if err := budget.CheckName("upstream", name); err != nil {
			return nil, nil, err
		}
		if _, dup := index[name]; dup {
			return nil, nil, budget.Invalid("upstream", v, "names upstream "+name+" twice")
		}
		pu, err := url.Parse(raw)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return nil, nil, budget.Invalid("upstream", v, "want NAME=URL with an http or https URL such as https://api.openai.com")
		}
		index[name] = len(ups)
		ups = append(ups, namedUpstream{name: name, url: raw})
	}
	for _, v := range u.api {
		name, kind, err := pair("upstream-api", v, "NAME=KIND, such as deepseek=openai")
		if err != nil {
			return nil, nil, err
		}
		i, ok := index[name]
		if !ok {
			return nil, nil, budget.Invalid("upstream-api", v, "names no --upstream "+name)
		}
		if !slices.Contains(proxy.Kinds, kind) {
			return nil, nil, budget.Invalid("upstream-api", v, "want a kind among "+strings.Join(proxy.Kinds, ", "))
		}
		ups[i].kind = kind
	}
	for _, v := range u.keyEnv {
		name, env, err := pair("upstream-key-env", v, "NAME=VAR with upstreams named as --upstream NAME=URL")
		if err != nil {
			return nil, nil, err
		}
		i, ok := index[name]
		if !ok {
			return nil, nil, budget.Invalid("upstream-key-env", v, "names no --upstream "+name)
		}
		if strings.ContainsAny(env, "= \t") {
			return nil, nil, budget.Invalid("upstream-key-env", v, "want an environment variable name after NAME=")
		}
		ups[i].keyEnv = env
	}
	for i := range ups {
		up := &ups[i]
		if up.kind == "" {
			if !slices.Contains(proxy.Kinds, up.name) {
				return nil, nil, usagef("proxy", "upstream %s: its API kind is not its name; add --upstream-api %s=KIND (%s; openai for any OpenAI-compatible server)",
					up.name, up.name, strings.Join(proxy.Kinds, ", "))
			}
			up.kind = up.name
		}
		if up.keyEnv == "" {
			up.keyEnv = defaultKeyEnv(up.name, up.kind)
		}
		if _, err := proxy.KindRoutes(up.kind, up.name); err != nil {
			return nil, nil, fmt.Errorf("upstream %s: %w", up.name, err)
		}
	}
	var routes []proxy.ModelRoute
	for _, v := range u.modelRoute {
		pattern, name, err := pair("model-route", v, "PATTERN=NAME, such as 'deepseek-*=deepseek'")
		if err != nil {
			return nil, nil, err
		}
		i, ok := index[name]
		if !ok {
			return nil, nil, budget.Invalid("model-route", v, "names no --upstream "+name)
		}
		if ups[i].kind != proxy.KindOpenAI {
			return nil, nil, budget.Invalid("model-route", v, fmt.Sprintf("routes OpenAI-shaped requests; upstream %s is of kind %s", name, ups[i].kind))
		}
		routes = append(routes, proxy.ModelRoute{Pattern: pattern, Provider: name})
	}
	return ups, routes, nil
}

// defaultKeyEnv is where an upstream's credential is read without
// --upstream-key-env: the provider's own variable when the upstream is
// named after its kind, else NAME_API_KEY (DEEPSEEK_API_KEY). A vertex
// upstream has none: it uses Google application default credentials (a
// VERTEX_API_KEY would be an API key, not the access token it sends).
func defaultKeyEnv(name, kind string) string {
	if kind == proxy.KindVertex {
		return ""
	}
	if name == kind {
		switch kind {
		case proxy.KindOpenAI:
			return "OPENAI_API_KEY"
		case proxy.KindAnthropic:
			return "ANTHROPIC_API_KEY"
		case proxy.KindGemini:
			return "GEMINI_API_KEY"
		case proxy.KindAzure:
			return "AZURE_OPENAI_API_KEY"
		case proxy.KindBedrock:
			return "AWS_BEARER_TOKEN_BEDROCK" // else SigV4 with the AWS credentials
		}
	}
	return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(name)) + "_API_KEY"
}

// upstreamConfig is the credential part of an upstream of kind: the key
// in the field its routes send.
func upstreamConfig(uc proxy.UpstreamConfig, kind, key string) proxy.UpstreamConfig {
	switch kind {
	case proxy.KindOpenAI:
		uc.OpenAIKey = key
	case proxy.KindAnthropic:
		uc.AnthropicKey = key
	case proxy.KindGemini:
		uc.GeminiKey = key
	case proxy.KindAzure:
		uc.AzureKey = key
	case proxy.KindBedrock:
		uc.BedrockToken = key
	}
	return uc
}
