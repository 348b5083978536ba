package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// recorder is an Observer whose spans end in the returned recorder.
func recorder() (*Observer, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	return NewObserver(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)), nil), sr
}

// recorded is newHarness's observe for obs: obs, placing keys with the
// harness's tracker when placed.
func recorded(obs *Observer, placed bool) func(*harness) proxy.Observer {
	return func(h *harness) proxy.Observer {
		if placed {
			obs.Placement = cachedPlacement(h.db.Tracker)
		}
		return obs
	}
}

// onlySpan is the one span sr holds, with its attributes by key.
func onlySpan(t *testing.T, sr *tracetest.SpanRecorder) (sdktrace.ReadOnlySpan, map[attribute.Key]attribute.Value) {
	t.Helper()
	spans := sr.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended; want 1", len(spans))
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range spans[0].Attributes() {
		attrs[kv.Key] = kv.Value
	}
	return spans[0], attrs
}

// wantAttrs checks attrs holds want (string, int64, float64 or bool
// values).
func wantAttrs(t *testing.T, attrs map[attribute.Key]attribute.Value, want map[string]any) {
	t.Helper()
	for k, w := range want {
		got, ok := attrs[attribute.Key(k)]
		if !ok {
			t.Errorf("no attribute %s (want %v)", k, w)
			continue
		}
		if got.AsInterface() != w {
			t.Errorf("attribute %s = %v (%T); want %v (%T)", k, got.AsInterface(), got.AsInterface(), w, w)
		}
	}
}

const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
)

// TestSpanOfAnAdmittedRequest: a chat request through the proxy gets one
// server span, a child of the client's traceparent, named after the GenAI
// operation and model, whose usage attributes are the stored event's,
// whose estimate is what the access log says was admitted, with the key,
// its team and org, the end user and the limit; the upstream's request
// carries the span as its parent.
func TestSpanOfAnAdmittedRequest(t *testing.T) {
	obs, sr := recorder()
	h := newHarness(t, proxy.ModeReserve, 1_000_000, recorded(obs, false))
	resp, body := h.post("/v1/chat/completions", chatBody, map[string]string{
		"traceparent": "00-" + clientTrace + "-" + clientSpan + "-01", proxy.UserHeader: "alice",
		proxy.TagsHeader: "Project=atlas, feature=search"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	id := resp.Header.Get("X-Tokenbudget-Request-Id")
	ev := h.event(id)
	line := h.accessLine(id)
	span, attrs := onlySpan(t, sr)

	if span.Name() != "chat gpt-4o-mini" || span.SpanKind() != trace.SpanKindServer {
		t.Errorf("span %q of kind %v; want \"chat gpt-4o-mini\", server", span.Name(), span.SpanKind())
	}
	if span.SpanContext().TraceID().String() != clientTrace || span.Parent().SpanID().String() != clientSpan {
		t.Errorf("span in trace %s under %s; want the client's %s under %s",
			span.SpanContext().TraceID(), span.Parent().SpanID(), clientTrace, clientSpan)
	}
	if span.Status().Code != codes.Unset {
		t.Errorf("status %v; want unset", span.Status())
	}
	capOut, err := strconv.ParseInt(resp.Header.Get("X-Tokenbudget-Max-Output"), 10, 64)
	if err != nil {
		t.Fatalf("X-Tokenbudget-Max-Output %q: %v", resp.Header.Get("X-Tokenbudget-Max-Output"), err)
	}
	if ev.Input == 0 || ev.Output == 0 {
		t.Fatalf("stored event %+v has no usage", ev)
	}
	wantAttrs(t, attrs, map[string]any{
		"gen_ai.operation.name":      "chat",
		"gen_ai.provider.name":       "openai",
		"gen_ai.request.model":       "gpt-4o-mini",
		"gen_ai.usage.input_tokens":  ev.Input,
		"gen_ai.usage.output_tokens": ev.Output + ev.Reasoning,
		"http.request.method":        "POST",
		"http.response.status_code":  int64(200),
		"url.path":                   "/v1/chat/completions",
		"tokenbudget.key":            "app",
		"tokenbudget.team":           "eng",
		"tokenbudget.org":            "acme",
		"tokenbudget.user":           "alice",
		"tokenbudget.provider":       "openai",
		"tokenbudget.request_id":     id,
		"tokenbudget.outcome":        proxy.OutcomeOK,
		"tokenbudget.limit":          h.limit,
		// JSON numbers: the access log's estimate is what was admitted.
		"tokenbudget.estimate.input_tokens":  int64(line["estimate_input"].(float64)),
		"tokenbudget.estimate.output_tokens": capOut,
		"tokenbudget.injected_max_output":    capOut,
		"tokenbudget.charged.tokens":         ev.Billable(),
		"tokenbudget.tags":                   "feature=search,project=atlas", // normalized, as stored
	})
	if _, ok := attrs["tokenbudget.settle_failed"]; ok {
		t.Errorf("a written settlement's span has tokenbudget.settle_failed")
	}
	if line["tags"] != "feature=search,project=atlas" || ev.Tags != "feature=search,project=atlas" {
		t.Errorf("access log tags %v, stored tags %q; want feature=search,project=atlas", line["tags"], ev.Tags)
	}
	if line["estimate_output"].(float64) != float64(capOut) {
		t.Errorf("access log estimate_output %v; want the injected cap %d", line["estimate_output"], capOut)
	}

	up := <-h.upstream
	want := "00-" + clientTrace + "-" + span.SpanContext().SpanID().String() + "-01"
	if got := up.Get("Traceparent"); got != want {
		t.Errorf("the upstream got traceparent %q; want the proxy's span %q", got, want)
	}
}

// TestSpanOfAnUnwrittenSettlementIsAnError: a request answered whose
// settlement the store did not take (the tracker closed while it was
// upstream) has a span of status error naming the failure and
// tokenbudget.settle_failed, as its access log line says settle_failed;
// its outcome is still the client's (ok, 200). An untagged request's span
// has no tags.
func TestSpanOfAnUnwrittenSettlementIsAnError(t *testing.T) {
	obs, sr := recorder()
	h := newHarness(t, proxy.ModeCheck, 1_000_000, recorded(obs, false))
	closeTracker := func() {
		if err := h.db.Tracker.Close(context.Background()); err != nil {
			t.Errorf("close the tracker: %v", err)
		}
	}
	h.beforeUpstream.Store(&closeTracker)
	resp, body := h.post("/v1/chat/completions", chatBody, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	line := h.accessLine(resp.Header.Get("X-Tokenbudget-Request-Id"))
	span, attrs := onlySpan(t, sr)
	if span.Status().Code != codes.Error || !strings.Contains(span.Status().Description, "settlement not written") ||
		!strings.Contains(span.Status().Description, budget.ErrClosed.Error()) {
		t.Errorf("status %v; want error, settlement not written: %v", span.Status(), budget.ErrClosed)
	}
	wantAttrs(t, attrs, map[string]any{"tokenbudget.settle_failed": true, "tokenbudget.outcome": proxy.OutcomeOK,
		"http.response.status_code": int64(200)})
	if line["settle_failed"] != true {
		t.Errorf("access log settle_failed %v; want true", line["settle_failed"])
	}
	if v, ok := attrs["tokenbudget.tags"]; ok {
		t.Errorf("an untagged request's span has tags %v", v.AsInterface())
	}
}

// TestSpanOfARefusedRequestNamesTheLimit: a request a limit refuses has a
// span saying so (outcome, limit id, level, the refusal's code, 429), no
// usage, and is not an error of the proxy's; nothing went upstream.
func TestSpanOfARefusedRequestNamesTheLimit(t *testing.T) {
	obs, sr := recorder()
	h := newHarness(t, proxy.ModeReserve, 5, recorded(obs, true)) // no reservation says where the key sits
	resp, body := h.post("/v1/chat/completions", chatBody, nil)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d; want 429: %s", resp.StatusCode, body)
	}
	span, attrs := onlySpan(t, sr)
	wantAttrs(t, attrs, map[string]any{
		"gen_ai.request.model":      "gpt-4o-mini",
		"http.response.status_code": int64(429),
		"tokenbudget.outcome":       proxy.OutcomeRefused,
		"tokenbudget.limit":         h.limit,
		"tokenbudget.limit.level":   "key",
		"tokenbudget.refusal.code":  "token_budget_exceeded",
		"tokenbudget.team":          "eng",
	})
	if !strings.Contains(body, `"token_budget_exceeded"`) {
		t.Errorf("the refusal's body has no token_budget_exceeded code: %s", body)
	}
	for _, k := range []attribute.Key{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "tokenbudget.charged.tokens"} {
		if v, ok := attrs[k]; ok {
			t.Errorf("a refused request's span has %s = %v", k, v.AsInterface())
		}
	}
	if span.Status().Code != codes.Unset {
		t.Errorf("status %v; want unset (the client's 4xx)", span.Status())
	}
	if n := len(h.upstream); n != 0 {
		t.Errorf("%d requests went upstream; want none", n)
	}
}

// TestSpanInCheckModePlacesTheKey: in check mode, where no reservation
// says where the key sits, the span's team and org come from the key's
// placement; without a client traceparent the span starts a trace, which
// the upstream's request continues.
func TestSpanInCheckModePlacesTheKey(t *testing.T) {
	obs, sr := recorder()
	h := newHarness(t, proxy.ModeCheck, 1_000_000, recorded(obs, true))
	resp, body := h.post("/v1/chat/completions", chatBody, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	span, attrs := onlySpan(t, sr)
	wantAttrs(t, attrs, map[string]any{"tokenbudget.team": "eng", "tokenbudget.org": "acme", "tokenbudget.key": "app"})
	if span.Parent().IsValid() {
		t.Errorf("span has parent %v; want a root", span.Parent())
	}
	up := <-h.upstream
	if got, want := up.Get("Traceparent"), "00-"+span.SpanContext().TraceID().String()+"-"+span.SpanContext().SpanID().String()+"-01"; got != want {
		t.Errorf("the upstream got traceparent %q; want %q", got, want)
	}
}

// TestUnsampledRequestIsPropagatedNotRecorded: a client trace that is not
// sampled records no span (the default parent-based sampler), and the
// upstream still gets the trace, unsampled.
func TestUnsampledRequestIsPropagatedNotRecorded(t *testing.T) {
	obs, sr := recorder()
	h := newHarness(t, proxy.ModeReserve, 1_000_000, recorded(obs, false))
	resp, body := h.post("/v1/chat/completions", chatBody, map[string]string{"traceparent": "00-" + clientTrace + "-" + clientSpan + "-00"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if n := len(sr.Ended()); n != 0 {
		t.Errorf("%d spans recorded; want none", n)
	}
	up := <-h.upstream
	if got := up.Get("Traceparent"); !strings.HasPrefix(got, "00-"+clientTrace+"-") || !strings.HasSuffix(got, "-00") {
		t.Errorf("the upstream got traceparent %q; want the client's trace, unsampled", got)
	}
}

// TestSpanOfAnUpstreamErrorIsAnError: an upstream 5xx is the span's error.
func TestSpanOfAnUpstreamErrorIsAnError(t *testing.T) {
	obs, sr := recorder()
	h := newHarness(t, proxy.ModeReserve, 1_000_000, recorded(obs, false))
	resp, _ := h.post("/v1/chat/completions", chatBody, map[string]string{"X-Mock-Status": "500"})
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("status %d; want the upstream's 500", resp.StatusCode)
	}
	span, attrs := onlySpan(t, sr)
	if span.Status().Code != codes.Error {
		t.Errorf("status %v; want error", span.Status())
	}
	wantAttrs(t, attrs, map[string]any{"tokenbudget.outcome": proxy.OutcomeUpstreamError, "error.type": proxy.OutcomeUpstreamError})
}

// TestSpanCostIsThePricedCharge: the charged usage's cost, once the
// settlement priced it, is the span's tokenbudget.cost_usd in dollars; a
// usage no price matched says so; one not priced in memory has neither.
func TestSpanCostIsThePricedCharge(t *testing.T) {
	for _, c := range []struct {
		name string
		u    budget.Usage
		want map[string]any
		not  []attribute.Key
	}{
		{"priced", budget.Usage{Input: 1000, Output: 200, Cost: 1250, CostKnown: true},
			map[string]any{"tokenbudget.cost_usd": 0.00125, "gen_ai.usage.input_tokens": int64(1000)}, []attribute.Key{AttrUnpriced}},
		{"no price", budget.Usage{Input: 1000, Output: 200, CostKnown: true, NoPrice: true},
			map[string]any{"tokenbudget.unpriced": true}, []attribute.Key{AttrCost}},
		{"not priced in memory", budget.Usage{Input: 1000, Output: 200},
			map[string]any{"gen_ai.usage.output_tokens": int64(200)}, []attribute.Key{AttrCost, AttrUnpriced}},
	} {
		t.Run(c.name, func(t *testing.T) {
			obs, sr := recorder()
			ctx := obs.Begin(httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil))
			obs.End(ctx, &proxy.Observation{Method: http.MethodPost, Path: "/v1/chat/completions", Status: 200,
				Outcome: proxy.OutcomeOK, Key: "app", Charged: &c.u})
			_, attrs := onlySpan(t, sr)
			wantAttrs(t, attrs, c.want)
			for _, k := range c.not {
				if v, ok := attrs[k]; ok {
					t.Errorf("attribute %s = %v; want none", k, v.AsInterface())
				}
			}
		})
	}
}

// TestProviderNameIsTheAPISpoken: gen_ai.provider.name follows the
// semantic conventions' values by the route's API, and an
// OpenAI-compatible upstream named after a well-known provider takes
// that provider's.
func TestProviderNameIsTheAPISpoken(t *testing.T) {
	for _, c := range []struct {
		route proxy.Route
		want  string
	}{
		{proxy.Route{Format: proxy.OpenAIChat, Provider: "openai"}, "openai"},
		{proxy.Route{Format: proxy.OpenAIChat, Provider: "local-vllm"}, "openai"},
		{proxy.Route{Format: proxy.OpenAIChat, Provider: "mistral"}, "mistral_ai"},
		{proxy.Route{Format: proxy.OpenAIChat, Provider: "DeepSeek"}, "deepseek"},
		{proxy.Route{Format: proxy.OpenAIChat, Provider: "azure", Kind: proxy.KindAzure}, "azure.ai.openai"},
		{proxy.Route{Format: proxy.AnthropicMessages, Provider: "anthropic"}, "anthropic"},
		{proxy.Route{Format: proxy.GeminiGenerate, Provider: "gemini"}, "gcp.gemini"},
		{proxy.Route{Format: proxy.GeminiGenerate, Provider: "vertex", Kind: proxy.KindVertex}, "gcp.vertex_ai"},
		{proxy.Route{Format: proxy.BedrockConverse, Provider: "bedrock"}, "aws.bedrock"},
		{proxy.Route{Format: proxy.BedrockInvoke, Provider: "bedrock"}, "aws.bedrock"},
	} {
		if got := providerName(c.route); got != c.want {
			t.Errorf("providerName(%+v) = %q; want %q", c.route, got, c.want)
		}
	}
}

// TestSpanOfAStreamedAnthropicRequest: a streamed Messages request's span
// names Anthropic and carries the usage the stream reported, as stored.
func TestSpanOfAStreamedAnthropicRequest(t *testing.T) {
	obs, sr := recorder()
	h := newHarness(t, proxy.ModeReserve, 1_000_000, recorded(obs, false))
	resp, body := h.post("/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,`+
		`"messages":[{"role":"user","content":"Stream me a short answer."}]}`, map[string]string{"anthropic-version": "2023-06-01"})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "message_stop") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	ev := h.event(resp.Header.Get("X-Tokenbudget-Request-Id"))
	span, attrs := onlySpan(t, sr)
	if span.Name() != "chat claude-sonnet-4-5" {
		t.Errorf("span %q; want \"chat claude-sonnet-4-5\"", span.Name())
	}
	wantAttrs(t, attrs, map[string]any{
		"gen_ai.provider.name":               "anthropic",
		"gen_ai.usage.input_tokens":          ev.Input,
		"gen_ai.usage.output_tokens":         ev.Output + ev.Reasoning,
		"tokenbudget.provider":               "anthropic",
		"tokenbudget.estimate.output_tokens": int64(64),
		"tokenbudget.outcome":                proxy.OutcomeOK,
	})
	if _, ok := attrs[AttrInjectedCap]; ok {
		t.Error("a request with its own max_tokens has an injected cap")
	}
}
