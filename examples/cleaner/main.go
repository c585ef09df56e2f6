// Command cleaner runs a redq cleaner on a ticker. A cleaner hands the
// unacked deliveries of dead connections (processes that crashed or were
// stopped while holding work) back to ready, so that live consumers get
// them. Run one or more in your deployment; they do not get in each
// other's way.
//
//	go run ./examples/cleaner                         # embedded Redis, with a crashed worker
//	go run ./examples/cleaner -redis redis://localhost:6379/0 -interval 1m -duration 0
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// namespace keeps the examples' keys apart from real queues in the same
// Redis (the default namespace is "redq").
const namespace = "redq-examples"

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an embedded miniredis with a crashed worker in it)")
	interval := flag.Duration("interval", time.Second, "how often to clean")
	duration := flag.Duration("duration", 3*time.Second, "stop after this long (0: run until Ctrl-C)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := run(ctx, *redisURL, *interval); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, redisURL string, interval time.Duration) error {
	// This example needs two connections on one Redis (the crashed worker
	// and the cleaner), so it starts the embedded Redis itself instead of
	// calling redq.OpenConnectionWithTestRedisClient, which starts a new
	// one for every connection.
	var client *redis.Client
	if redisURL == "" {
		m, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer m.Close()
		client = redis.NewClient(&redis.Options{Addr: m.Addr()})
		if err := crashWorker(client, "tasks", 5); err != nil {
			return err
		}
	} else {
		opts, err := redis.ParseURL(redisURL)
		if err != nil {
			return fmt.Errorf("invalid -redis: %w", err)
		}
		client = redis.NewClient(opts)
	}
	defer func() {
		if err := client.Close(); err != nil {
			log.Print(err)
		}
	}()

	conn, err := redq.OpenConnectionWithRedisClient("cleaner", client, nil, redq.WithNamespace(namespace))
	if err != nil {
		return err
	}
	defer func() { <-conn.StopAllConsuming() }()
	if err := printStats(ctx, conn, "before"); err != nil {
		return err
	}

	cleaner := redq.NewCleaner(conn)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		// Clean reports how many deliveries it returned to ready. An error
		// (Redis unreachable, say) is worth a log line, not an exit: the
		// next tick tries again.
		returned, err := cleaner.CleanContext(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			log.Printf("clean: %v", err)
		default:
			log.Printf("cleaned: returned %d deliveries to ready", returned)
		}
		select {
		case <-ctx.Done():
			// Use a fresh context: ctx is done.
			return printStats(context.Background(), conn, "after")
		case <-ticker.C:
		}
	}
}

// crashWorker leaves a dead connection behind that holds n unacked
// deliveries of queue, as a worker process that crashed mid-work would.
func crashWorker(client *redis.Client, queueName string, n int) error {
	worker, err := redq.OpenConnectionWithRedisClient("worker", client, nil, redq.WithNamespace(namespace))
	if err != nil {
		return err
	}
	queue, err := worker.OpenQueue(queueName)
	if err != nil {
		return err
	}
	for i := range n {
		if err := queue.Publish(fmt.Sprintf("task-%d", i+1)); err != nil {
			return err
		}
	}
	if err := queue.StartConsuming(int64(n), time.Second); err != nil {
		return err
	}
	// This consumer takes deliveries and never acks them.
	taken := make(chan struct{}, n)
	if _, err := queue.AddConsumerFunc("stuck", func(redq.Delivery) { taken <- struct{}{} }); err != nil {
		return err
	}
	for range n {
		<-taken
	}
	// A crashed process's heartbeat expires after the heartbeat TTL (a
	// minute by default). StopAllConsuming deletes it at once, which is
	// the same to a cleaner: the connection is dead, its deliveries stay
	// unacked until a cleaner returns them.
	<-worker.StopAllConsuming()
	log.Printf("a worker died holding %d unacked deliveries of %q", n, queueName)
	return nil
}

func printStats(ctx context.Context, conn redq.Connection, when string) error {
	queues, err := conn.GetOpenQueuesContext(ctx)
	if err != nil {
		return err
	}
	stats, err := conn.CollectStatsContext(ctx, queues)
	if err != nil {
		return err
	}
	fmt.Printf("%s cleaning:\n%s\n", when, stats)
	return nil
}
