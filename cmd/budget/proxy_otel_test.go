package main

import (
	"database/sql"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/proxy"
	"github.com/tokenbudget/tokenbudget/proxy/mock"
	"github.com/tokenbudget/tokenbudget/telemetry/otlptest"
)

// TestProxyExportsOTLP: the budget binary, configured by nothing but
// OTEL_* variables, exports to a collector-shaped OTLP/HTTP receiver on
// loopback while it serves: the request's span (a child of the client's
// traceparent, under OTEL_SERVICE_NAME, with the GenAI attributes equal
// to the usage row in the database and tokenbudget's own: key, team,
// org, end user, limit, estimate and its price), and the /metrics
// counters and per-limit gauges as OTel metrics; the upstream's request
// carries the proxy's span as its parent; SIGTERM still exits 0.
func TestProxyExportsOTLP(t *testing.T) {
	t.Parallel()
	bin := buildBudget(t)
	db := tempDB(t)
	rcv := otlptest.Start(t)
	mustRun(t, 0, "team", "set", "eng", "--org", "acme", "--db", db)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--team", "eng", "--db", db).stdout)
	limit := strings.TrimSpace(mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "1000000", "--window", "daily",
		"--alert", "90", "--id", "lim_app_daily").stdout)
	if !strings.Contains(limit, "lim_app_daily") {
		t.Fatalf("limit set printed %q", limit)
	}
	// A dollar limit too: the admission prices the estimate.
	mustRun(t, 0, "price", "set", "--provider", "openai", "--model", "gpt-4o-mini", "--input", "0.15", "--output", "0.60", "--db", db)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--metric", "usd", "--limit", "100", "--window", "daily")

	seen := make(chan http.Header, 8)
	mu := &mock.Upstream{}
	up := newLoopback(t, func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		mu.ServeHTTP(w, r)
	})
	p := startProxyProcEnv(t, bin, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.HTTPEndpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_SERVICE_NAME=budget-e2e",
		"OTEL_BSP_SCHEDULE_DELAY=50",      // ms: the span goes out while the proxy serves
		"OTEL_METRIC_EXPORT_INTERVAL=100", // ms
	}, "--db", db, "--upstream", up)

	const trace, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	req, _ := http.NewRequest(http.MethodPost, p.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Count my tokens, please."}]}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Traceparent", "00-"+trace+"-"+parent+"-01")
	req.Header.Set("X-Budget-User", "alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s\n%s", resp.StatusCode, body, p.stderr)
	}
	id := resp.Header.Get("X-Tokenbudget-Request-Id")

	s := rcv.WaitSpan(t, "the request's span", func(s *otlptest.Span) bool { return s.Attrs["tokenbudget.request_id"] == id })
	if s.Name != "chat gpt-4o-mini" || s.Kind != "SPAN_KIND_SERVER" || s.TraceID != trace || s.ParentID != parent {
		t.Errorf("span %q kind %s in trace %s under %s; want chat gpt-4o-mini, server, the client's %s under %s",
			s.Name, s.Kind, s.TraceID, s.ParentID, trace, parent)
	}
	if s.Resource["service.name"] != "budget-e2e" {
		t.Errorf("resource %v; want service.name budget-e2e", s.Resource)
	}
	for k, want := range map[string]any{
		"gen_ai.provider.name":      "openai",
		"gen_ai.operation.name":     "chat",
		"gen_ai.request.model":      "gpt-4o-mini",
		"tokenbudget.key":           "app",
		"tokenbudget.team":          "eng",
		"tokenbudget.org":           "acme",
		"tokenbudget.user":          "alice",
		"tokenbudget.limit":         "lim_app_daily",
		"tokenbudget.outcome":       "ok",
		"http.response.status_code": int64(200),
	} {
		if s.Attrs[k] != want {
			t.Errorf("span attribute %s = %v (%T); want %v (%T)", k, s.Attrs[k], s.Attrs[k], want, want)
		}
	}
	for _, k := range []string{"tokenbudget.estimate.input_tokens", "tokenbudget.estimate.output_tokens",
		"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} {
		if v, ok := s.Attrs[k].(int64); !ok || v <= 0 {
			t.Errorf("span attribute %s = %v; want a count", k, s.Attrs[k])
		}
	}
	// $0.15 and $0.60 a million input and output tokens.
	estIn, _ := s.Attrs["tokenbudget.estimate.input_tokens"].(int64)
	estOut, _ := s.Attrs["tokenbudget.estimate.output_tokens"].(int64)
	want := float64(estIn)*0.15/1e6 + float64(estOut)*0.60/1e6
	if got, ok := s.Attrs["tokenbudget.estimate.cost_usd"].(float64); !ok || got < want-1e-6 || got > want+1e-6 {
		t.Errorf("tokenbudget.estimate.cost_usd = %v; want $%.6f (%d in, %d out)", s.Attrs["tokenbudget.estimate.cost_usd"], want, estIn, estOut)
	}
	select {
	case h := <-seen:
		if got, want := h.Get("Traceparent"), "00-"+trace+"-"+s.SpanID+"-01"; got != want {
			t.Errorf("the upstream got traceparent %q; want the proxy's span %q", got, want)
		}
	default:
		t.Error("the upstream saw no request")
	}

	rcv.WaitPoint(t, "tokenbudget_proxy_requests_total", func(pt *otlptest.Point) bool {
		return pt.Attrs["outcome"] == "ok" && pt.Value == 1 && pt.Monotonic && pt.Resource["service.name"] == "budget-e2e"
	})
	in, _ := s.Attrs["gen_ai.usage.input_tokens"].(int64)
	out, _ := s.Attrs["gen_ai.usage.output_tokens"].(int64)
	charged := in + out
	rcv.WaitPoint(t, "tokenbudget_limit_used", func(pt *otlptest.Point) bool {
		return pt.Attrs["limit_id"] == "lim_app_daily" && pt.Value == float64(charged)
	})

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		t.Fatalf("the proxy did not exit after SIGTERM\n%s", p.stderr)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d after SIGTERM; want 0\n%s", code, p.stderr)
	}

	// The usage row, once the proxy has drained: the span's usage is
	// what the database holds.
	var input, output, reasoning, cost int64
	d, err := sql.Open("sqlite", "file:"+db+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.QueryRow(`SELECT input, output, reasoning, cost FROM usage WHERE request_id = ?`, id).Scan(&input, &output, &reasoning, &cost); err != nil {
		t.Fatalf("the usage row of %s: %v", id, err)
	}
	if in != input || out != output+reasoning {
		t.Errorf("span usage %d in, %d out; the database has %d in, %d out, %d reasoning", in, out, input, output, reasoning)
	}
	// The charged cost: the span's, the response's header and the row's.
	if got, _ := s.Attrs["tokenbudget.cost_usd"].(float64); cost <= 0 || resp.Header.Get("X-Tokenbudget-Cost") != proxy.FormatCost(cost) ||
		got < float64(cost)/1e6-1e-9 || got > float64(cost)/1e6+1e-9 {
		t.Errorf("cost: span %v, header %q, database %d micro-dollars; want the same, above 0", s.Attrs["tokenbudget.cost_usd"],
			resp.Header.Get("X-Tokenbudget-Cost"), cost)
	}
}
