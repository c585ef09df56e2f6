// Package redqotel carries OpenTelemetry trace context through redq
// deliveries, from the publisher to the consumer, in the delivery's
// headers (W3C traceparent and tracestate, and baggage).
//
// On the publishing side, [Put] publishes in a span of kind producer and
// writes its context into the delivery's headers; [Header] and [Inject]
// write the context of any ctx for a publish made by hand. On the
// consuming side, [Handler] and [Consumer] wrap a handler or a consumer
// function and run it in a span of kind consumer whose parent is the
// publisher's span, so a trace runs from the request that published to the
// work done; [Extract] returns that context for code that reads
// deliveries itself (Queue.Take, batches).
//
// The tracer provider and the propagator are OpenTelemetry's global ones
// unless [WithTracerProvider] or [WithPropagator] say otherwise. When the
// global propagator propagates nothing (the default until a program sets
// one), redqotel uses W3C trace context and baggage.
//
// It is a module of its own, so that redq itself does not depend on
// OpenTelemetry.
package redqotel

import (
	"context"
	"fmt"
	"net/http"

	"github.com/redq/redq"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of redqotel's tracer.
const ScopeName = "github.com/redq/redq/redqotel"

// Option configures the functions of this package.
type Option func(*config)

type config struct {
	tp   trace.TracerProvider
	prop propagation.TextMapPropagator
}

// WithTracerProvider sets the tracer provider the spans come from.
// Default: otel.GetTracerProvider() at the time of the call.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	}
}

// WithPropagator sets how trace context is written into headers and read
// back. Default: otel.GetTextMapPropagator(), or W3C trace context and
// baggage when that propagates nothing.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) {
		if p != nil {
			c.prop = p
		}
	}
}

func newConfig(opts []Option) config {
	c := config{}
	for _, o := range opts {
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.prop == nil {
		c.prop = otel.GetTextMapPropagator()
		if len(c.prop.Fields()) == 0 {
			c.prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
		}
	}
	return c
}

func (c config) tracer() trace.Tracer { return c.tp.Tracer(ScopeName) }

// Inject writes the trace context of ctx into h (which must not be nil),
// for a delivery published with redq.Header(h).
func Inject(ctx context.Context, h http.Header, opts ...Option) {
	newConfig(opts).prop.Inject(ctx, propagation.HeaderCarrier(h))
}

// Header returns a publish option that attaches h (which may be nil) and
// the trace context of ctx to the delivery. h is not changed. Pass it in
// place of redq.Header: of several header options, the last wins.
func Header(ctx context.Context, h http.Header, opts ...Option) redq.PublishOption {
	out := h.Clone()
	if out == nil {
		out = http.Header{}
	}
	Inject(ctx, out, opts...)
	return redq.Header(out)
}

// Extract returns ctx with the trace context that the publisher attached
// to d (a remote span context, as parent for the consumer's span). A
// delivery without one, or one that is not a redq.WithHeader, gives ctx.
func Extract(ctx context.Context, d redq.Delivery, opts ...Option) context.Context {
	wh, ok := d.(redq.WithHeader)
	if !ok {
		return ctx
	}
	h := wh.Header()
	if h == nil {
		return ctx
	}
	return newConfig(opts).prop.Extract(ctx, propagation.HeaderCarrier(h))
}

// Put publishes payload to q as q.Put does, in a span of kind producer
// named "publish <queue>", and attaches header (which may be nil; it is
// not changed) with the span's context to the delivery. Do not pass
// redq.Header in opts: it would replace those headers.
func Put(ctx context.Context, q redq.Queue, payload []byte, header http.Header, opts ...redq.PublishOption) error {
	return PutWith(ctx, nil, q, payload, header, opts...)
}

// PutWith is Put with options of this package (tracer provider,
// propagator).
func PutWith(ctx context.Context, o []Option, q redq.Queue, payload []byte, header http.Header, opts ...redq.PublishOption) error {
	c := newConfig(o)
	name := ""
	if s, ok := q.(fmt.Stringer); ok { // redq's queues print their name
		name = s.String()
	}
	ctx, span := c.tracer().Start(ctx, "publish "+name, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "redq"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", name),
			attribute.Int("messaging.message.body.size", len(payload)),
		))
	defer span.End()
	err := q.Put(ctx, payload, append(opts, Header(ctx, header, WithPropagator(c.prop)))...)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// startConsume starts the consumer's span for d, as a child of the
// publisher's span when d carries one.
func startConsume(ctx context.Context, c config, queue string, d redq.Delivery) (context.Context, trace.Span) {
	ctx = Extract(ctx, d, WithPropagator(c.prop))
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "redq"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", queue),
	}
	if m, ok := d.(redq.Message); ok {
		attrs = append(attrs,
			attribute.String("messaging.message.id", m.ID()),
			attribute.Int("messaging.redq.attempts", m.Attempts()),
		)
	}
	return c.tracer().Start(ctx, "process "+queue, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// Handler wraps h, the handler of the named queue (see
// redq.Queue.AddHandler), so that each delivery is handled in a span of
// kind consumer named "process <queue>", whose parent is the publisher's
// span when the delivery carries one. The span ends when h returns; an
// error of h is recorded on it. The context h gets is redq's (cancelled
// when the lease runs out or consuming stops) with the span and the
// publisher's baggage in it.
func Handler(queue string, h redq.Handler, opts ...Option) redq.Handler {
	c := newConfig(opts)
	return func(ctx context.Context, m redq.Message) error {
		ctx, span := startConsume(ctx, c, queue, m)
		defer span.End()
		err := h(ctx, m)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return err
	}
}

// Consumer wraps f, a consumer of the named queue, as a redq.Consumer
// (see redq.Queue.AddConsumer) that runs f for each delivery in a span of
// kind consumer named "process <queue>", whose parent is the publisher's
// span when the delivery carries one; ctx holds the span. The span ends
// when f returns. f settles the delivery itself, as any consumer does.
func Consumer(queue string, f func(ctx context.Context, d redq.Delivery), opts ...Option) redq.ConsumerFunc {
	c := newConfig(opts)
	return func(d redq.Delivery) {
		ctx, span := startConsume(context.Background(), c, queue, d)
		defer span.End()
		f(ctx, d)
	}
}
