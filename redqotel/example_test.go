package redqotel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redq/redq"
	"github.com/redq/redq/redqotel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// A request publishes in its trace; the consumer's span continues it.
func ExampleHandler() {
	conn, _ := redq.OpenConnectionWithTestRedisClient("example", nil)
	defer func() { <-conn.StopAllConsuming() }()
	queue, _ := conn.OpenQueue("emails")
	tracer := sdktrace.NewTracerProvider().Tracer("example") // your tracer

	ctx, span := tracer.Start(context.Background(), "signup request")
	if err := redqotel.Put(ctx, queue, []byte("welcome mail"), nil); err != nil {
		panic(err)
	}
	span.End()

	done := make(chan bool)
	_ = queue.StartConsuming(10, time.Second)
	_, _ = queue.AddHandler("mailer", redqotel.Handler("emails", func(ctx context.Context, m redq.Message) error {
		done <- trace.SpanContextFromContext(ctx).TraceID() == span.SpanContext().TraceID()
		return nil
	}))
	fmt.Println("same trace:", <-done)
	// Output: same trace: true
}
