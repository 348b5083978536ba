package telemetry

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// ScopeName is the instrumentation scope of the proxy's spans.
const ScopeName = "github.com/tokenbudget/tokenbudget/telemetry"

// The attributes of ours on a span, beside the GenAI and HTTP semantic
// conventions'. Dollars are float64 US dollars (the X-Tokenbudget-Cost
// unit); the store keeps micro-dollars.
const (
	AttrKey             = attribute.Key("tokenbudget.key")  // the gateway key's name, never its secret
	AttrTeam            = attribute.Key("tokenbudget.team") // the key's team the request is charged to
	AttrOrg             = attribute.Key("tokenbudget.org")
	AttrUser            = attribute.Key("tokenbudget.user")     // the end user (X-Budget-User or the body's)
	AttrProvider        = attribute.Key("tokenbudget.provider") // the provider name limits and prices use
	AttrRequestID       = attribute.Key("tokenbudget.request_id")
	AttrOutcome         = attribute.Key("tokenbudget.outcome") // the outcome label of tokenbudget_proxy_requests_total
	AttrLimit           = attribute.Key("tokenbudget.limit")   // the id of the limit that decided (see proxy.Observation.Limit)
	AttrLimitLevel      = attribute.Key("tokenbudget.limit.level")
	AttrCode            = attribute.Key("tokenbudget.refusal.code")
	AttrEstimateInput   = attribute.Key("tokenbudget.estimate.input_tokens") // what the reservation (or check) admitted
	AttrEstimateOutput  = attribute.Key("tokenbudget.estimate.output_tokens")
	AttrEstimateCost    = attribute.Key("tokenbudget.estimate.cost_usd") // only when a dollar limit applied
	AttrChargedTokens   = attribute.Key("tokenbudget.charged.tokens")    // billable tokens charged: input + output + reasoning
	AttrCost            = attribute.Key("tokenbudget.cost_usd")          // the charged usage priced, as its event is stored
	AttrUnpriced        = attribute.Key("tokenbudget.unpriced")          // no price matched the charged usage
	AttrInjectedCap     = attribute.Key("tokenbudget.injected_max_output")
	AttrTags            = attribute.Key("tokenbudget.tags")          // the request's tags, normalized: "name=value,..."
	AttrSettleFailed    = attribute.Key("tokenbudget.settle_failed") // the settlement's store write failed
	attrOperation       = semconv.GenAIOperationNameKey
	attrProviderName    = semconv.GenAIProviderNameKey
	attrRequestModel    = semconv.GenAIRequestModelKey
	attrInputTokens     = semconv.GenAIUsageInputTokensKey
	attrOutputTokens    = semconv.GenAIUsageOutputTokensKey
	attrReasoningTokens = semconv.GenAIUsageReasoningOutputTokensKey
	attrCacheRead       = semconv.GenAIUsageCacheReadInputTokensKey
	attrCacheWrite      = semconv.GenAIUsageCacheCreationInputTokensKey
)

// Observer is a proxy.Observer that traces each request: Begin starts a
// server span, child of the client's trace context when its request
// carries one, and puts the span's context in the request's headers for
// the upstream; End names the span after the GenAI operation and model,
// sets the attributes and ends it.
type Observer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// Placement places a key in its team and org when the request's
	// reservation did not say (check mode). (Optional; Start sets a
	// cached Tracker.KeyPlaced.)
	Placement func(ctx context.Context, key string) (budget.Placed, bool)
}

var _ proxy.Observer = (*Observer)(nil)

// NewObserver returns an Observer tracing with tp, reading and writing
// trace context with prop (nil: W3C trace context and baggage).
func NewObserver(tp trace.TracerProvider, prop propagation.TextMapPropagator) *Observer {
	if prop == nil {
		prop, _ = propagators("")
	}
	return &Observer{tracer: tp.Tracer(ScopeName), prop: prop}
}

// Begin starts the request's span.
func (o *Observer) Begin(r *http.Request) context.Context {
	h := propagation.HeaderCarrier(r.Header)
	ctx := o.prop.Extract(r.Context(), h)
	// Named at End, once the operation and the model are known.
	ctx, _ = o.tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer))
	// The upstream's request is a copy of r's headers: its span becomes
	// a child of this one, not of the client's.
	o.prop.Inject(ctx, h)
	return ctx
}

// End sets the span's name, status and attributes and ends it.
func (o *Observer) End(ctx context.Context, ob *proxy.Observation) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() { // not sampled
		span.End()
		return
	}
	// Pooled: SetAttributes copies them into the span.
	ap := attrPool.Get().(*[]attribute.KeyValue)
	attrs := (*ap)[:0]
	defer func() {
		*ap = attrs[:0]
		attrPool.Put(ap)
	}()
	attrs = append(attrs, semconv.HTTPRequestMethodKey.String(ob.Method), semconv.URLPath(ob.Path),
		AttrOutcome.String(ob.Outcome))
	if ob.Status != 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(ob.Status))
	}
	str := func(k attribute.Key, v string) {
		if v != "" {
			attrs = append(attrs, k.String(v))
		}
	}
	str(AttrKey, ob.Key)
	str(AttrUser, ob.User)
	str(AttrProvider, ob.Provider)
	str(attrRequestModel, ob.Model)
	str(AttrLimit, ob.Limit)
	str(AttrLimitLevel, ob.LimitLevel)
	str(AttrCode, ob.Code)
	name := ob.Method
	if i := ob.Info; i != nil {
		op := operation(i.Route.Format)
		attrs = append(attrs, attrOperation.String(op), attrProviderName.String(providerName(i.Route)))
		if ob.Model != "" {
			name = op + " " + ob.Model
		}
		str(AttrRequestID, i.RequestID)
		team, org := i.Team, i.Org
		if team == "" && org == "" && o.Placement != nil && ob.Key != "" {
			if p, ok := o.Placement(ctx, ob.Key); ok {
				team, org = p.Team, p.Org
			}
		}
		str(AttrTeam, team)
		str(AttrOrg, org)
		str(AttrTags, string(i.Tags))
		e := i.Estimate
		attrs = append(attrs, AttrEstimateInput.Int64(e.Input), AttrEstimateOutput.Int64(e.Output))
		if e.USD > 0 {
			attrs = append(attrs, AttrEstimateCost.Float64(dollars(e.USD)))
		}
		if i.InjectedCap > 0 {
			attrs = append(attrs, AttrInjectedCap.Int64(i.InjectedCap))
		}
	}
	if u := ob.Charged; u != nil {
		attrs = append(attrs, attrInputTokens.Int64(u.Input), attrOutputTokens.Int64(u.Output+u.Reasoning),
			AttrChargedTokens.Int64(u.Billable()))
		if u.Reasoning > 0 {
			attrs = append(attrs, attrReasoningTokens.Int64(u.Reasoning))
		}
		if u.CacheRead > 0 {
			attrs = append(attrs, attrCacheRead.Int64(u.CacheRead))
		}
		if u.CacheWrite > 0 {
			attrs = append(attrs, attrCacheWrite.Int64(u.CacheWrite))
		}
		// Known once the settlement priced the usage in memory (the cost
		// the response's X-Tokenbudget-Cost states).
		if u.CostKnown {
			if u.NoPrice {
				attrs = append(attrs, AttrUnpriced.Bool(true))
			} else {
				attrs = append(attrs, AttrCost.Float64(dollars(u.Cost)))
			}
		}
	}
	switch ob.Outcome {
	case proxy.OutcomeUpstreamError, proxy.OutcomeError:
		// The proxy or its upstream failed the client: an error of this
		// span (a refusal or a bad request is the client's, as 4xx are
		// for HTTP server spans).
		attrs = append(attrs, semconv.ErrorTypeKey.String(ob.Outcome))
		span.SetStatus(codes.Error, ob.Outcome)
	}
	if ob.SettleErr != nil {
		// The client got its answer, but what it was charged (or the
		// release of its reservation) is not in the store: the proxy's
		// failure, whatever the outcome.
		attrs = append(attrs, AttrSettleFailed.Bool(true))
		span.SetStatus(codes.Error, "settlement not written: "+ob.SettleErr.Error())
	}
	span.SetName(name)
	span.SetAttributes(attrs...)
	span.End()
}

var attrPool = sync.Pool{New: func() any {
	s := make([]attribute.KeyValue, 0, 32)
	return &s
}}

// operation is the gen_ai.operation.name of an API format.
func operation(f proxy.Format) string {
	switch f {
	case proxy.OpenAIEmbeddings:
		return semconv.GenAIOperationNameEmbeddings.Value.AsString()
	case proxy.GeminiGenerate, proxy.OpenAIImages:
		return semconv.GenAIOperationNameGenerateContent.Value.AsString()
	}
	return semconv.GenAIOperationNameChat.Value.AsString()
}

// wellKnown are the gen_ai.provider.name values of OpenAI-compatible
// providers, by the provider names an operator gives them.
var wellKnown = map[string]string{
	"deepseek": "deepseek", "groq": "groq", "mistral": "mistral_ai", "mistral_ai": "mistral_ai",
	"xai": "x_ai", "x_ai": "x_ai", "perplexity": "perplexity", "cohere": "cohere",
}

// providerName is the gen_ai.provider.name of a route: the API it speaks
// (the semantic conventions' "best knowledge"), or the well-known
// provider an OpenAI-compatible upstream is named after.
func providerName(r proxy.Route) string {
	switch {
	case r.Kind == proxy.KindAzure:
		return semconv.GenAIProviderNameAzureAIOpenAI.Value.AsString()
	case r.Kind == proxy.KindVertex:
		return semconv.GenAIProviderNameGCPVertexAI.Value.AsString()
	case r.Format == proxy.GeminiGenerate:
		return semconv.GenAIProviderNameGCPGemini.Value.AsString()
	case r.Format == proxy.BedrockConverse || r.Format == proxy.BedrockInvoke:
		return semconv.GenAIProviderNameAWSBedrock.Value.AsString()
	case r.Format == proxy.AnthropicMessages:
		return semconv.GenAIProviderNameAnthropic.Value.AsString()
	}
	if n, ok := wellKnown[strings.ToLower(r.Provider)]; ok {
		return n
	}
	return semconv.GenAIProviderNameOpenAI.Value.AsString()
}

func dollars(micros int64) float64 { return float64(micros) / 1e6 }

// Placement lookups: a key's team and org, cached for placementTTL, at
// most placementKeys keys.
const (
	placementTTL     = time.Minute
	placementKeys    = 4096
	placementTimeout = 2 * time.Second
)

// cachedPlacement looks keys up with t.KeyPlaced, remembering each answer
// for placementTTL: a span waits for the store once per key a minute. A
// failed lookup leaves the span without team and org.
func cachedPlacement(t *budget.Tracker) func(context.Context, string) (budget.Placed, bool) {
	cache := expirable.NewLRU[string, budget.Placed](placementKeys, nil, placementTTL)
	return func(ctx context.Context, key string) (budget.Placed, bool) {
		if p, ok := cache.Get(key); ok {
			return p, true
		}
		// The client may have left: the span still wants its placement.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), placementTimeout)
		defer cancel()
		p, err := t.KeyPlaced(ctx, key)
		if err != nil {
			return budget.Placed{}, false
		}
		cache.Add(key, p)
		return p, true
	}
}
