// Package otlptest is a collector-shaped OTLP receiver for tests: it
// listens on loopback for OTLP over HTTP/protobuf (POST /v1/traces,
// /v1/metrics, gzip or not) and over gRPC (the collector's trace and
// metrics services), as an OpenTelemetry collector does, and keeps what
// it is sent, flattened, for a test to wait for and read. Safe for
// concurrent use.
package otlptest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one span received, with its resource's attributes.
type Span struct {
	Name                       string
	TraceID, SpanID, ParentID  string // hex; ParentID "" for a root
	Kind                       string // "SPAN_KIND_SERVER"...
	Status                     string // "STATUS_CODE_UNSET", "STATUS_CODE_ERROR"...
	Attrs, Resource            map[string]any
	ScopeName                  string
	StartUnixNano, EndUnixNano uint64
}

// Point is one data point of a metric received: a sum's or a gauge's value,
// or a histogram's count.
type Point struct {
	Metric    string
	Type      string // "sum", "gauge", "histogram"
	Monotonic bool   // a monotonic sum (a counter)
	Attrs     map[string]any
	Value     float64
	Resource  map[string]any
}

// Receiver receives OTLP; see Start.
type Receiver struct {
	// HTTPEndpoint is the OTLP/HTTP base URL (OTEL_EXPORTER_OTLP_ENDPOINT
	// with protocol http/protobuf); GRPCEndpoint the gRPC one (protocol
	// grpc), both http://127.0.0.1:PORT.
	HTTPEndpoint, GRPCEndpoint string

	mu      sync.Mutex
	spans   []Span
	points  []Point
	changed chan struct{} // closed (and replaced) when something arrives
}

// Start starts a receiver on loopback; the test's cleanup stops it.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{changed: make(chan struct{})}
	hs := httptest.NewServer(http.HandlerFunc(r.serveHTTP))
	t.Cleanup(hs.Close)
	r.HTTPEndpoint = hs.URL
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	colltracepb.RegisterTraceServiceServer(gs, traceService{r: r})
	collmetricspb.RegisterMetricsServiceServer(gs, metricsService{r: r})
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	r.GRPCEndpoint = "http://" + ln.Addr().String()
	return r
}

// Spans is every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Points is every metric data point received so far, in order.
func (r *Receiver) Points() []Point {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Point(nil), r.points...)
}

// WaitSpan waits (at most a minute) for a span that match accepts.
func (r *Receiver) WaitSpan(t testing.TB, what string, match func(*Span) bool) Span {
	t.Helper()
	var found Span
	r.wait(t, what, func() bool {
		for i := range r.spans {
			if match(&r.spans[i]) {
				found = r.spans[i]
				return true
			}
		}
		return false
	})
	return found
}

// WaitPoint waits (at most a minute) for a data point of metric that
// match accepts, and returns the last such point received.
func (r *Receiver) WaitPoint(t testing.TB, metric string, match func(*Point) bool) Point {
	t.Helper()
	var found Point
	r.wait(t, "a point of "+metric, func() bool {
		ok := false
		for i := range r.points {
			if r.points[i].Metric == metric && match(&r.points[i]) {
				found, ok = r.points[i], true
			}
		}
		return ok
	})
	return found
}

// wait calls done under the lock whenever something arrived, until it is
// true or a minute has passed.
func (r *Receiver) wait(t testing.TB, what string, done func() bool) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		r.mu.Lock()
		ok, changed := done(), r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("otlptest: no %s within a minute; received %d spans, %d points", what, len(r.Spans()), len(r.Points()))
		}
	}
}

func (r *Receiver) traces(req *colltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Kind: s.GetKind().String(), Status: s.GetStatus().GetCode().String(),
					Attrs: attrs(s.GetAttributes()), Resource: res, ScopeName: ss.GetScope().GetName(),
					StartUnixNano: s.GetStartTimeUnixNano(), EndUnixNano: s.GetEndTimeUnixNano()}
				r.spans = append(r.spans, sp)
			}
		}
	}
	r.notify()
}

func (r *Receiver) metrics(req *collmetricspb.ExportMetricsServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rm := range req.GetResourceMetrics() {
		res := attrs(rm.GetResource().GetAttributes())
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				r.points = append(r.points, points(m, res)...)
			}
		}
	}
	r.notify()
}

func (r *Receiver) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func points(m *metricspb.Metric, res map[string]any) []Point {
	var ps []Point
	num := func(typ string, mono bool, dps []*metricspb.NumberDataPoint) {
		for _, dp := range dps {
			v := dp.GetAsDouble()
			if _, ok := dp.GetValue().(*metricspb.NumberDataPoint_AsInt); ok {
				v = float64(dp.GetAsInt())
			}
			ps = append(ps, Point{Metric: m.GetName(), Type: typ, Monotonic: mono, Attrs: attrs(dp.GetAttributes()), Value: v, Resource: res})
		}
	}
	switch d := m.GetData().(type) {
	case *metricspb.Metric_Sum:
		num("sum", d.Sum.GetIsMonotonic(), d.Sum.GetDataPoints())
	case *metricspb.Metric_Gauge:
		num("gauge", false, d.Gauge.GetDataPoints())
	case *metricspb.Metric_Histogram:
		for _, dp := range d.Histogram.GetDataPoints() {
			ps = append(ps, Point{Metric: m.GetName(), Type: "histogram", Attrs: attrs(dp.GetAttributes()), Value: float64(dp.GetCount()), Resource: res})
		}
	}
	return ps
}

// attrs flattens OTLP attributes: strings, int64s, float64s and bools.
func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = v.IntValue
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = v.DoubleValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = v.BoolValue
		default:
			m[kv.GetKey()] = kv.GetValue().String()
		}
	}
	return m
}

// serveHTTP takes OTLP/HTTP protobuf exports, as a collector's otlp
// receiver does.
func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if ct := req.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-protobuf") {
		http.Error(w, "want application/x-protobuf, got "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var resp proto.Message
	switch req.URL.Path {
	case "/v1/traces":
		var m colltracepb.ExportTraceServiceRequest
		if err = proto.Unmarshal(b, &m); err == nil {
			r.traces(&m)
		}
		resp = &colltracepb.ExportTraceServiceResponse{}
	case "/v1/metrics":
		var m collmetricspb.ExportMetricsServiceRequest
		if err = proto.Unmarshal(b, &m); err == nil {
			r.metrics(&m)
		}
		resp = &collmetricspb.ExportMetricsServiceResponse{}
	default:
		http.NotFound(w, req)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	io.Copy(w, bytes.NewReader(out))
}

type traceService struct {
	colltracepb.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(_ context.Context, req *colltracepb.ExportTraceServiceRequest) (*colltracepb.ExportTraceServiceResponse, error) {
	s.r.traces(req)
	return &colltracepb.ExportTraceServiceResponse{}, nil
}

type metricsService struct {
	collmetricspb.UnimplementedMetricsServiceServer
	r *Receiver
}

func (s metricsService) Export(_ context.Context, req *collmetricspb.ExportMetricsServiceRequest) (*collmetricspb.ExportMetricsServiceResponse, error) {
	s.r.metrics(req)
	return &collmetricspb.ExportMetricsServiceResponse{}, nil
}
