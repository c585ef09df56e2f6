// Command producer publishes tasks to a redq queue and prints the queue's
// counts.
//
//	go run ./examples/producer                        # on an embedded Redis
//	go run ./examples/producer -redis redis://localhost:6379/0 -count 100
//
// Run examples/consumer with the same -redis to work the tasks off.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// namespace keeps the examples' keys apart from real queues in the same
// Redis (the default namespace is "redq").
const namespace = "redq-examples"

// Task is the payload: any bytes will do, JSON is a common choice.
type Task struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an embedded miniredis)")
	queueName := flag.String("queue", "tasks", "queue to publish to")
	count := flag.Int("count", 10, "number of tasks to publish")
	flag.Parse()
	if err := run(*redisURL, *queueName, *count); err != nil {
		log.Fatal(err)
	}
}

func run(redisURL, queueName string, count int) error {
	conn, err := connect("producer", redisURL)
	if err != nil {
		return err
	}
	// StopAllConsuming also ends the connection's heartbeat; wait for it.
	defer func() { <-conn.StopAllConsuming() }()

	// OpenQueue is cheap and idempotent: it lists the queue in Redis so
	// that stats and cleaners see it.
	queue, err := conn.OpenQueue(queueName)
	if err != nil {
		return err
	}

	// Publish takes any number of payloads and sends them in one round
	// trip. When it returns nil, the tasks are safely in Redis.
	payloads := make([]string, count)
	for i := range payloads {
		b, err := json.Marshal(Task{ID: i + 1, Name: fmt.Sprintf("task %d", i+1)})
		if err != nil {
			return err
		}
		payloads[i] = string(b)
	}
	if err := queue.Publish(payloads...); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	log.Printf("published %d tasks to %q", count, queueName)

	// Put publishes one payload with options; Header attaches metadata the
	// consumer reads with Delivery.Header.
	urgent, _ := json.Marshal(Task{ID: 0, Name: "urgent task"})
	header := http.Header{"Priority": {"high"}, "Trace-Id": {"4bf92f3577b34da6"}}
	if err := queue.Put(context.Background(), urgent, redq.Header(header)); err != nil {
		return fmt.Errorf("publish with header: %w", err)
	}
	log.Printf("published 1 task with headers %v", header)

	// CollectStats reads the counts of the named queues.
	stats, err := conn.CollectStats([]string{queueName})
	if err != nil {
		return err
	}
	fmt.Print(stats)
	return nil
}

// connect opens a redq connection on the Redis at redisURL, or on a fresh
// embedded miniredis when redisURL is empty.
func connect(tag, redisURL string) (redq.Connection, error) {
	if redisURL == "" {
		return redq.OpenConnectionWithTestRedisClient(tag, nil, redq.WithNamespace(namespace))
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("invalid -redis: %w", err)
	}
	return redq.OpenConnectionWithRedisOptions(tag, opts, nil, redq.WithNamespace(namespace))
}
