package redqotel_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/redq/redq"
	"github.com/redq/redq/redqotel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// setup returns a queue on an embedded Redis and a tracer provider that
// records every span.
func setup(t *testing.T) (redq.Queue, *tracetest.SpanRecorder, redqotel.Option) {
	t.Helper()
	conn, err := redq.OpenConnectionWithTestRedisClient("otel", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-conn.StopAllConsuming() })
	q, err := conn.OpenQueue("jobs")
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return q, rec, redqotel.WithTracerProvider(tp)
}

func ended(t *testing.T, rec *tracetest.SpanRecorder, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(rec.Ended()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d spans ended, want %d", len(rec.Ended()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return rec.Ended()
}

// A delivery published with Put inside a request's span is handled in a
// consumer span of the same trace, a child of the producer span, and the
// handler sees the publisher's baggage.
func TestHandlerSpanContinuesThePublishersTrace(t *testing.T) {
	q, rec, tpOpt := setup(t)
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	ctx, request := tracer.Start(context.Background(), "request")
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	ctx = baggage.ContextWithBaggage(ctx, bag)
	if err := redqotel.PutWith(ctx, []redqotel.Option{tpOpt}, q, []byte("work"), http.Header{"X-Own": {"kept"}}); err != nil {
		t.Fatal(err)
	}
	request.End()

	if err := q.StartConsuming(10, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		tenant, own string
		span        trace.SpanContext
	}
	got := make(chan seen, 1)
	if _, err := q.AddHandler("w", redqotel.Handler("jobs", func(ctx context.Context, m redq.Message) error {
		got <- seen{baggage.FromContext(ctx).Member("tenant").Value(), m.Header().Get("X-Own"), trace.SpanContextFromContext(ctx)}
		return nil
	}, tpOpt)); err != nil {
		t.Fatal(err)
	}
	s := <-got
	spans := ended(t, rec, 3)
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range spans {
		byName[sp.Name()] = sp
	}
	producer, consumer := byName["publish jobs"], byName["process jobs"]
	if producer == nil || consumer == nil {
		t.Fatalf("spans: %v", spans)
	}
	if producer.SpanKind() != trace.SpanKindProducer || consumer.SpanKind() != trace.SpanKindConsumer {
		t.Fatalf("kinds %v and %v", producer.SpanKind(), consumer.SpanKind())
	}
	traceID := request.SpanContext().TraceID()
	if producer.SpanContext().TraceID() != traceID || consumer.SpanContext().TraceID() != traceID {
		t.Fatalf("trace ids: request %v, producer %v, consumer %v", traceID, producer.SpanContext().TraceID(), consumer.SpanContext().TraceID())
	}
	if consumer.Parent().SpanID() != producer.SpanContext().SpanID() || !consumer.Parent().IsRemote() {
		t.Fatalf("consumer's parent %v, want the producer span %v (remote)", consumer.Parent(), producer.SpanContext())
	}
	if s.span.SpanID() != consumer.SpanContext().SpanID() {
		t.Fatal("the handler's context does not hold the consumer span")
	}
	if s.tenant != "acme" || s.own != "kept" {
		t.Fatalf("baggage %q, own header %q", s.tenant, s.own)
	}
}

// A handler's error is recorded on its span; Consumer and Extract work for
// deliveries published by hand with Header.
func TestConsumerAndHandlerErrors(t *testing.T) {
	q, rec, tpOpt := setup(t)
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	ctx, parent := tracer.Start(context.Background(), "request")
	if err := q.Put(ctx, []byte("by hand"), redqotel.Header(ctx, nil)); err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	redqotel.Inject(ctx, h)
	if h.Get("Traceparent") == "" {
		t.Fatalf("Inject wrote no traceparent: %v", h)
	}
	parent.End()

	if err := q.StartConsuming(10, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got := make(chan trace.SpanContext, 1)
	if _, err := q.AddConsumer("c", redqotel.Consumer("jobs", func(ctx context.Context, d redq.Delivery) {
		remote := trace.SpanContextFromContext(redqotel.Extract(context.Background(), d))
		if err := d.Ack(); err != nil {
			t.Error(err)
		}
		got <- remote
	}, tpOpt)); err != nil {
		t.Fatal(err)
	}
	if remote := <-got; remote.TraceID() != parent.SpanContext().TraceID() || remote.SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("Extract: %v, want the publisher's %v", remote, parent.SpanContext())
	}
	spans := ended(t, rec, 2)
	consumer := spans[len(spans)-1]
	if consumer.Name() != "process jobs" || consumer.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("consumer span %q with parent %v", consumer.Name(), consumer.Parent())
	}

	// A failing handler: its error is on the span (and redq retries).
	errFailed := errors.New("downstream is down")
	q2, rec2, tpOpt2 := setup(t)
	if err := q2.Put(ctx, []byte("fails"), redqotel.Header(ctx, nil)); err != nil {
		t.Fatal(err)
	}
	if err := q2.StartConsuming(1, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := q2.AddHandler("h", redqotel.Handler("jobs", func(context.Context, redq.Message) error { return errFailed }, tpOpt2)); err != nil {
		t.Fatal(err)
	}
	failed := ended(t, rec2, 1)[0]
	if failed.Status().Code != codes.Error || failed.Status().Description != errFailed.Error() {
		t.Fatalf("status %+v", failed.Status())
	}
}

// A delivery without trace context gets a consumer span that starts a
// trace of its own.
func TestNoTraceContext(t *testing.T) {
	q, rec, tpOpt := setup(t)
	if err := q.Publish("plain"); err != nil {
		t.Fatal(err)
	}
	if err := q.StartConsuming(1, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := q.AddHandler("h", redqotel.Handler("jobs", func(context.Context, redq.Message) error { return nil }, tpOpt)); err != nil {
		t.Fatal(err)
	}
	sp := ended(t, rec, 1)[0]
	if sp.Parent().IsValid() || !sp.SpanContext().IsValid() {
		t.Fatalf("parent %v, span %v", sp.Parent(), sp.SpanContext())
	}
}
