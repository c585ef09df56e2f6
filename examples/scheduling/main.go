// Command scheduling shows redq's scheduling features in a few seconds:
// priorities and a delayed delivery taken with Take, a time to live that
// runs out, and a handler whose failures are retried by a retry policy
// until the delivery succeeds or ends in rejected with the reason kept.
//
//	go run ./examples/scheduling                        # on an embedded Redis
//	go run ./examples/scheduling -redis redis://localhost:6379/0
//
// It uses the queues scheduling-take and scheduling-retries in the
// namespace redq-examples and destroys them at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// namespace keeps the examples' keys apart from real queues in the same
// Redis (the default namespace is "redq").
const namespace = "redq-examples"

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an embedded miniredis)")
	flag.Parse()
	if err := run(context.Background(), *redisURL, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, redisURL string, out io.Writer) error {
	errChan := make(chan error, 10)
	go func() {
		for err := range errChan {
			log.Printf("redq: %v", err)
		}
	}()
	conn, err := connect("scheduling", redisURL, errChan)
	if err != nil {
		return err
	}
	defer func() { <-conn.StopAllConsuming() }()

	if err := takeInOrder(ctx, conn, out); err != nil {
		return err
	}
	return retryWithHandler(ctx, conn, out)
}

// takeInOrder publishes with priorities, a delay and a time to live, and
// pulls the deliveries with Take.
func takeInOrder(ctx context.Context, conn redq.Connection, out io.Writer) error {
	q, err := conn.OpenQueue("scheduling-take")
	if err != nil {
		return err
	}
	defer func() { _, _, _ = q.Destroy() }()

	// Higher priorities are taken first (0 is the default, redq.MaxPriority
	// the highest); within one priority, first in, first out. Delay holds a
	// delivery back; Redis's clock decides when it is due, so publishers
	// whose clocks disagree still agree.
	published := time.Now()
	for _, p := range []struct {
		payload string
		opts    []redq.PublishOption
	}{
		{"reminder (delayed 800ms)", []redq.PublishOption{redq.Delay(800 * time.Millisecond)}},
		{"low 1", nil},
		{"normal", []redq.PublishOption{redq.Priority(3)}},
		{"urgent", []redq.PublishOption{redq.Priority(redq.MaxPriority)}},
		{"low 2", nil},
	} {
		if err := q.Put(ctx, []byte(p.payload), p.opts...); err != nil {
			return fmt.Errorf("put %q: %w", p.payload, err)
		}
	}
	fmt.Fprintln(out, "published: reminder (delayed 800ms), low 1, normal (priority 3), urgent (priority 9), low 2")

	// Take needs no StartConsuming: it returns a delivery owned by this
	// connection, which the caller settles like a consumer would. Timeout 0
	// means do not wait.
	for range 4 {
		d, err := q.Take(ctx, 0)
		if err != nil {
			return fmt.Errorf("take: %w", err)
		}
		fmt.Fprintf(out, "took %-8q (attempt %d, id %s)\n", d.Payload(), d.Attempts(), d.ID())
		if err := d.Ack(); err != nil {
			return err
		}
	}

	// A delivery with a time to live that nobody takes in time is never
	// delivered; it is counted as expired.
	if err := q.Put(ctx, []byte("flash sale"), redq.TTL(100*time.Millisecond)); err != nil {
		return err
	}
	fmt.Fprintln(out, "published: flash sale (TTL 100ms), then busy for 300ms")
	time.Sleep(300 * time.Millisecond)

	// Take waits for the reminder: the idle wait ends when it is due.
	d, err := q.Take(ctx, 5*time.Second)
	if err != nil {
		return fmt.Errorf("take the reminder: %w", err)
	}
	fmt.Fprintf(out, "took %q about %v after it was published\n", d.Payload(), time.Since(published).Round(100*time.Millisecond))
	if err := d.Ack(); err != nil {
		return err
	}
	if _, err := q.Take(ctx, 100*time.Millisecond); errors.Is(err, redq.ErrorTimeout) {
		fmt.Fprintln(out, "nothing else: Take timed out (the flash sale expired)")
	} else if err != nil {
		return err
	}
	stats, err := conn.CollectStats([]string{"scheduling-take"})
	if err != nil {
		return err
	}
	s := stats.QueueStats["scheduling-take"]
	fmt.Fprintf(out, "stats: ready %d, delayed %d, expired %d\n", s.ReadyCount, s.DelayedCount, s.ExpiredCount)
	return nil
}

// retryWithHandler runs a handler under a retry policy: errors send the
// delivery back after a backoff until MaxAttempts, then it is rejected
// with the reason in its headers.
func retryWithHandler(ctx context.Context, conn redq.Connection, out io.Writer) error {
	const name = "scheduling-retries"
	policy := redq.RetryPolicy{MaxAttempts: 3, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	q, err := conn.OpenQueue(name,
		redq.WithRetryPolicy(policy),
		// Every delivery this handle publishes gets a lease of 10s: if the
		// handler hangs, the delivery goes back to ready for another try.
		redq.WithPublishDefaults(redq.TTR(10*time.Second)),
	)
	if err != nil {
		return err
	}
	defer func() { _, _, _ = q.Destroy() }()
	for _, p := range []string{"flaky", "broken"} {
		if err := q.Put(ctx, []byte(p)); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "published: flaky, broken; retry policy: %d attempts, backoff from %v\n", policy.MaxAttempts, policy.InitialBackoff)

	// The lease starts when a delivery is fetched, so keep the prefetch
	// small next to what the handlers get through within the TTR.
	if err := q.StartConsuming(2, time.Second); err != nil {
		return err
	}
	events := make(chan string, 10)
	_, err = q.AddHandler("sender", func(ctx context.Context, d redq.Message) error {
		// ctx ends when the lease runs out or consuming stops.
		var err error
		switch {
		case d.Payload() == "broken":
			err = errors.New("mailbox unavailable")
		case d.Attempts() < 3:
			err = errors.New("server busy")
		}
		if err != nil {
			events <- fmt.Sprintf("handler: %s attempt %d failed: %v", d.Payload(), d.Attempts(), err)
		} else {
			events <- fmt.Sprintf("handler: %s attempt %d done", d.Payload(), d.Attempts())
		}
		return err // nil acks; an error retries, or rejects after the last attempt
	})
	if err != nil {
		return err
	}
	// flaky: attempts 1 and 2 fail, 3 succeeds; broken: 3 failures.
	for range 6 {
		select {
		case e := <-events:
			fmt.Fprintln(out, e)
		case <-time.After(10 * time.Second):
			return errors.New("the handler did not get every attempt")
		}
	}
	// Wait until the last failure is settled (rejected).
	deadline := time.Now().Add(10 * time.Second)
	for {
		stats, err := conn.CollectStats([]string{name})
		if err != nil {
			return err
		}
		if s := stats.QueueStats[name]; s.RejectedCount == 1 && s.ReadyCount+s.DelayedCount+s.UnackedCount() == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("broken was not rejected: %v", stats)
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-q.StopConsuming()

	// The rejected delivery says why. ReturnRejected puts it back (with
	// its attempts reset); a new handle takes it to look.
	if _, err := q.ReturnRejected(1); err != nil {
		return err
	}
	look, err := conn.OpenQueue(name)
	if err != nil {
		return err
	}
	d, err := look.Take(ctx, time.Second)
	if err != nil {
		return fmt.Errorf("take the rejected delivery: %w", err)
	}
	fmt.Fprintf(out, "rejected %q after %s attempts: %s\n", d.Payload(), d.Header().Get(redq.HeaderAttempts), d.Header().Get(redq.HeaderError))
	return d.Ack()
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
