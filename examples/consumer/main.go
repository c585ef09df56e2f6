// Command consumer works off tasks from a redq queue with consumers that
// implement the redq.Consumer interface, and stops cleanly after -duration
// or on Ctrl-C.
//
//	go run ./examples/consumer                        # on an embedded Redis
//	go run ./examples/consumer -redis redis://localhost:6379/0 -duration 0
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
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

// Task is the payload examples/producer publishes.
type Task struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

// taskConsumer handles one delivery at a time. Every delivery must end in
// Ack (done), Reject (parked in the rejected list for an operator) or Push
// (handed on to the push queue); until then it stays unacked in Redis, and
// if this process dies a cleaner returns it to ready for another consumer.
type taskConsumer struct {
	name              string
	acked, rejected   *atomic.Int64
	simulatedWorkTime time.Duration
}

// Consume implements redq.Consumer.
func (c *taskConsumer) Consume(d redq.Delivery) {
	var task Task
	if err := json.Unmarshal([]byte(d.Payload()), &task); err != nil {
		// Retrying will not help a payload we cannot read: reject it.
		log.Printf("%s: rejecting unreadable payload %q: %v", c.name, d.Payload(), err)
		if err := d.Reject(); err != nil {
			log.Printf("%s: reject: %v", c.name, err)
			return
		}
		c.rejected.Add(1)
		return
	}

	time.Sleep(c.simulatedWorkTime) // the actual work goes here
	if trace := d.(redq.WithHeader).Header().Get("Trace-Id"); trace != "" {
		log.Printf("%s: did task %d (%s) for trace %s", c.name, task.ID, task.Name, trace)
	} else {
		log.Printf("%s: did task %d (%s)", c.name, task.ID, task.Name)
	}

	// Ack after the work is done: a crash before this line means the task
	// is done again by someone else (at-least-once delivery).
	if err := d.Ack(); err != nil {
		// ErrorNotFound with ErrorConnectionLost: a cleaner declared this
		// process dead and gave the task to somebody else.
		log.Printf("%s: ack: %v", c.name, err)
		return
	}
	c.acked.Add(1)
}

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an embedded miniredis, with some tasks published first)")
	queueName := flag.String("queue", "tasks", "queue to consume")
	consumers := flag.Int("consumers", 3, "number of consumers")
	duration := flag.Duration("duration", 3*time.Second, "stop after this long (0: run until Ctrl-C)")
	flag.Parse()

	// Ctrl-C (or SIGTERM from a process manager) cancels ctx.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := run(ctx, *redisURL, *queueName, *consumers); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, redisURL, queueName string, consumers int) error {
	// Background problems (lost heartbeats, failed fetches) arrive on this
	// channel; the connection never blocks on it.
	errChan := make(chan error, 10)
	go func() {
		for err := range errChan {
			log.Printf("redq: %v", err)
		}
	}()

	conn, err := connect("consumer", redisURL, errChan)
	if err != nil {
		return err
	}
	queue, err := conn.OpenQueue(queueName)
	if err != nil {
		return err
	}
	if redisURL == "" {
		// The embedded Redis starts empty: give the consumers something.
		if err := publishSome(queue, 12); err != nil {
			return err
		}
	}

	// Hold up to 10 unacked deliveries at a time; an idle queue waits on
	// Redis for up to a second per call, and a publish wakes it at once.
	if err := queue.StartConsuming(10, time.Second); err != nil {
		return err
	}
	var acked, rejected atomic.Int64
	for i := range consumers {
		c := &taskConsumer{name: fmt.Sprintf("worker-%d", i+1), acked: &acked, rejected: &rejected, simulatedWorkTime: 50 * time.Millisecond}
		if _, err := queue.AddConsumer("worker", c); err != nil {
			return err
		}
	}
	log.Printf("consuming %q with %d consumers; Ctrl-C to stop", queueName, consumers)

	<-ctx.Done()
	// Stop fetching, let each consumer finish its current task, and hand
	// fetched-but-unstarted deliveries back to ready.
	<-conn.StopAllConsuming()
	log.Printf("stopped: acked %d, rejected %d", acked.Load(), rejected.Load())

	// A stopped connection can still read stats.
	stats, err := conn.CollectStats([]string{queueName})
	if err != nil {
		return err
	}
	fmt.Print(stats)
	return nil
}

func publishSome(queue redq.Queue, n int) error {
	payloads := make([]string, 0, n+1)
	for i := 1; i <= n; i++ {
		b, _ := json.Marshal(Task{ID: i, Name: fmt.Sprintf("task %d", i)})
		payloads = append(payloads, string(b))
	}
	payloads = append(payloads, "not json") // one the consumers reject
	if err := queue.Publish(payloads...); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	// And one with headers, which the consumer reads with Delivery.Header.
	b, _ := json.Marshal(Task{ID: n + 1, Name: "traced task"})
	header := http.Header{"Trace-Id": {"4bf92f3577b34da6"}}
	if err := queue.Put(context.Background(), b, redq.Header(header)); err != nil {
		return fmt.Errorf("publish with header: %w", err)
	}
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
