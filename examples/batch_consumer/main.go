// Command batch_consumer works off a redq queue in batches: the consumer
// gets up to -batch deliveries at once (or fewer when -batch-timeout passes
// first) and acks each batch in one Redis call.
//
//	go run ./examples/batch_consumer                  # on an embedded Redis
//	go run ./examples/batch_consumer -redis redis://localhost:6379/0 -duration 0
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// namespace keeps the examples' keys apart from real queues in the same
// Redis (the default namespace is "redq").
const namespace = "redq-examples"

// batchWriter stands for a consumer that is cheaper per item in bulk, for
// example one that inserts rows into a database with one statement.
type batchWriter struct {
	batches, written atomic.Int64
}

// Consume implements redq.BatchConsumer.
func (w *batchWriter) Consume(batch redq.Deliveries) {
	n := w.batches.Add(1)
	log.Printf("batch %d: writing %d items: %v", n, len(batch), batch.Payloads())

	// ... one bulk write of batch.Payloads() goes here ...

	// Ack the whole batch in one Redis call. Errors come back by index in
	// the batch; an empty map means every delivery was acked. (On a failed
	// write you would call batch.Reject() instead.)
	errs := batch.Ack()
	for i, err := range errs {
		log.Printf("batch %d: ack of %q: %v", n, batch[i].Payload(), err)
	}
	w.written.Add(int64(len(batch) - len(errs)))
}

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an embedded miniredis, with some items published first)")
	queueName := flag.String("queue", "rows", "queue to consume")
	batchSize := flag.Int64("batch", 20, "largest batch")
	batchTimeout := flag.Duration("batch-timeout", 500*time.Millisecond, "hand over a smaller batch once this passed since its first delivery")
	duration := flag.Duration("duration", 3*time.Second, "stop after this long (0: run until Ctrl-C)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := run(ctx, *redisURL, *queueName, *batchSize, *batchTimeout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, redisURL, queueName string, batchSize int64, batchTimeout time.Duration) error {
	errChan := make(chan error, 10)
	go func() {
		for err := range errChan {
			log.Printf("redq: %v", err)
		}
	}()
	conn, err := connect("batch-consumer", redisURL, errChan)
	if err != nil {
		return err
	}
	queue, err := conn.OpenQueue(queueName)
	if err != nil {
		return err
	}
	if redisURL == "" {
		// 45 items: two full batches of 20, then 5 after the timeout.
		items := make([]string, 45)
		for i := range items {
			items[i] = fmt.Sprintf("row-%02d", i+1)
		}
		if err := queue.Publish(items...); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}

	// Prefetch at least a batch, so that full batches can form.
	if err := queue.StartConsuming(2*batchSize, time.Second); err != nil {
		return err
	}
	w := &batchWriter{}
	if _, err := queue.AddBatchConsumer("writer", batchSize, batchTimeout, w); err != nil {
		return err
	}
	log.Printf("consuming %q in batches of up to %d; Ctrl-C to stop", queueName, batchSize)

	<-ctx.Done()
	// A batch being collected when consuming stops goes back to ready;
	// one being consumed is finished first.
	<-conn.StopAllConsuming()
	log.Printf("stopped: %d batches, %d items written", w.batches.Load(), w.written.Load())
	return nil
}

// connect opens a redq connection on the Redis at redisURL, or on a fresh
// embedded miniredis when redisURL is empty.
func connect(tag, redisURL string, errChan chan<- error) (redq.Connection, error) {
	if redisURL == "" {
		return redq.OpenConnectionWithTestRedisClient(tag, errChan, redq.WithNamespace(namespace))
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("invalid -redis: %w", err)
	}
	return redq.OpenConnectionWithRedisOptions(tag, opts, errChan, redq.WithNamespace(namespace))
}
