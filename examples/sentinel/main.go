// Command sentinel publishes and consumes jobs through a Redis Sentinel
// failover client (redis.NewFailoverClient), so that a failover of the
// master can be watched from the worker's side: publishing and consuming
// pause while the sentinels promote a replica and go on by themselves.
//
//	go run ./examples/sentinel -sentinels 127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381 -master mymaster
//
// Kill the master (kill -9, or redis-cli -p <sentinel port> SENTINEL
// FAILOVER mymaster) while it runs. At the end it says how many jobs were
// published, consumed and acked, and the longest pause in consuming. It
// uses the queue sentinel-jobs in the namespace redq-examples.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// namespace keeps the examples' keys apart from real queues in the same
// Redis (the default namespace is "redq").
const namespace = "redq-examples"

// config is what the flags set.
type config struct {
	sentinels []string      // addresses of the sentinels
	master    string        // the name the sentinels monitor the master under
	jobs      int           // how many jobs to publish
	every     time.Duration // pause between two publishes
	timeout   time.Duration // how long to wait for the last acks
}

func main() {
	sentinels := flag.String("sentinels", "127.0.0.1:26379", "comma-separated addresses of the sentinels")
	master := flag.String("master", "mymaster", "name of the master the sentinels monitor")
	jobs := flag.Int("jobs", 2000, "number of jobs to publish")
	every := flag.Duration("every", 10*time.Millisecond, "pause between two publishes")
	timeout := flag.Duration("timeout", time.Minute, "how long to wait for the last jobs to be acked")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{sentinels: strings.Split(*sentinels, ","), master: *master, jobs: *jobs, every: *every, timeout: *timeout}
	if err := run(ctx, cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// tally is what the producer and the consumer saw.
type tally struct {
	mu        sync.Mutex
	published map[string]bool // Publish returned nil
	unknown   int             // Publish could not tell whether it happened
	consumed  map[string]int  // times each job was handed to the consumer
	acked     map[string]bool // Ack returned nil
	last      time.Time       // when the last job was consumed
	pause     time.Duration   // the longest time between two consumed jobs
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	// The failover client asks the sentinels where the master is, and asks
	// again when a connection fails or the sentinels announce a new
	// master. redq needs the master for everything (it writes even to
	// consume), so no ReplicaOnly, RouteByLatency or RouteRandomly.
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    cfg.master,
		SentinelAddrs: cfg.sentinels,
	})
	defer func() {
		if err := client.Close(); err != nil {
			log.Print(err)
		}
	}()

	// Background errors (heartbeats and fetches that failed while the
	// master was away) come with a consecutive count; the connection
	// keeps going.
	errChan := make(chan error, 100)
	var errorCount atomic.Int64
	go func() {
		for err := range errChan {
			errorCount.Add(1)
			log.Printf("redq: %v", err)
		}
	}()
	conn, err := redq.Open(ctx, "sentinel-example", client, errChan, redq.WithNamespace(namespace))
	if err != nil {
		return err
	}
	stopped := false
	stopAll := func() {
		if !stopped {
			stopped = true
			<-conn.StopAllConsuming()
		}
	}
	defer stopAll()
	queue, err := conn.OpenQueue("sentinel-jobs")
	if err != nil {
		return err
	}
	if err := queue.StartConsuming(50, 100*time.Millisecond); err != nil {
		return err
	}

	t := &tally{published: map[string]bool{}, consumed: map[string]int{}, acked: map[string]bool{}, last: time.Now()}
	if _, err := queue.AddConsumerFunc("worker", func(d redq.Delivery) {
		job := d.Payload()
		t.mu.Lock()
		now := time.Now()
		t.pause = max(t.pause, now.Sub(t.last))
		t.last = now
		t.consumed[job]++
		t.mu.Unlock()
		// An Ack that fails is not the end of the job: it stays this
		// connection's (or goes back to ready through a cleaner) and is
		// handed out again; an Ack that returns nil is final.
		if err := d.Ack(); err != nil {
			log.Printf("ack %s: %v", job, err)
			return
		}
		t.mu.Lock()
		t.acked[job] = true
		t.mu.Unlock()
	}); err != nil {
		return err
	}

	began := time.Now()
	for i := 0; i < cfg.jobs && ctx.Err() == nil; i++ {
		job := fmt.Sprintf("job-%d", i)
		// Publish resends by itself while the master is away (up to the
		// connection's retry timeout, a minute by default), so a failover
		// of a few seconds shows as a slow Publish, not as an error.
		err := queue.PublishContext(ctx, job)
		switch {
		case err == nil:
			t.mu.Lock()
			t.published[job] = true
			t.mu.Unlock()
		case errors.Is(err, redq.ErrorUnavailable), errors.Is(err, redq.ErrorWritesRefused):
			// Nothing was done: publishing the same job again is safe.
			log.Printf("publish %s: %v; trying again", job, err)
			i--
		case errors.Is(err, redq.ErrorOutcomeUnknown):
			// It may or may not be in Redis: publishing again could
			// make it twice. Count it and go on.
			log.Printf("publish %s: %v", job, err)
			t.mu.Lock()
			t.unknown++
			t.mu.Unlock()
		default:
			if ctx.Err() != nil {
				break
			}
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(cfg.every):
		}
	}
	fmt.Fprintf(out, "published %d jobs in %s\n", len(t.published), time.Since(began).Round(100*time.Millisecond))

	deadline := time.Now().Add(cfg.timeout)
	for !t.allAcked() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	stopAll()

	t.mu.Lock()
	defer t.mu.Unlock()
	lost, again := 0, 0
	for job := range t.published {
		if !t.acked[job] {
			lost++
		}
	}
	for _, n := range t.consumed {
		if n > 1 {
			again++
		}
	}
	fmt.Fprintf(out, "consumed %d jobs, acked %d; not acked %d, consumed more than once %d, publish outcome unknown %d\n",
		len(t.consumed), len(t.acked), lost, again, t.unknown)
	fmt.Fprintf(out, "longest pause in consuming: %s\n", t.pause.Round(100*time.Millisecond))
	fmt.Fprintf(out, "redq reported %d background errors\n", errorCount.Load())
	if lost > 0 {
		return fmt.Errorf("%d published jobs were not acked within %s", lost, cfg.timeout)
	}
	return nil
}

// allAcked reports whether every job published so far was acked.
func (t *tally) allAcked() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for job := range t.published {
		if !t.acked[job] {
			return false
		}
	}
	return true
}
