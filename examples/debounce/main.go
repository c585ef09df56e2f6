// Command debounce shows redq's keyed deliveries: a burst of upserts of
// one key runs once, with the newest payload, after the burst calmed down;
// an upsert while the key runs is parked behind it and runs next; MaxWait
// makes a key that never calms down run anyway; Cancel removes a pending
// item before it runs.
//
//	go run ./examples/debounce                        # on an embedded Redis
//	go run ./examples/debounce -redis redis://localhost:6379/0
//
// It uses the queue debounce-index in the namespace redq-examples and
// destroys it at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
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

// run is the story. An indexer reindexes a user's profile after changes;
// every change upserts the user's key with the whole new profile.
func run(ctx context.Context, redisURL string, out io.Writer) error {
	errChan := make(chan error, 10)
	go func() {
		for err := range errChan {
			log.Printf("redq: %v", err)
		}
	}()
	conn, err := connect("debounce", redisURL, errChan)
	if err != nil {
		return err
	}
	defer func() { <-conn.StopAllConsuming() }()
	q, err := conn.OpenQueue("debounce-index")
	if err != nil {
		return err
	}
	defer func() { _, _, _ = q.Destroy() }()

	// The indexer: a handler that reports each run. The first run of
	// user-42 waits for the story to upsert while it runs.
	runs := make(chan string, 10)
	started, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	if err := q.StartConsuming(10, time.Second); err != nil {
		return err
	}
	if _, err := q.AddHandler("indexer", func(ctx context.Context, d redq.Message) error {
		if d.Key() == "user-42" {
			once.Do(func() {
				close(started)
				<-proceed
			})
		}
		runs <- fmt.Sprintf("indexed %s with %q", d.Key(), d.Payload())
		return nil
	}); err != nil {
		return err
	}

	// 1. A burst: five changes 50ms apart, each postponing the run by
	// 300ms (ReplaceAll, the default mode: debounce).
	for i := 1; i <= 5; i++ {
		o, err := q.Upsert(ctx, "user-42", []byte(fmt.Sprintf("profile v%d", i)), redq.Delay(300*time.Millisecond))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "upsert user-42 profile v%d: %v\n", i, o)
		time.Sleep(50 * time.Millisecond)
	}
	item, err := q.Lookup(ctx, "user-42")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "pending: %q, %d updates merged\n", item.Payload, item.Updates)

	// 2. An upsert while user-42 is being indexed is parked behind it.
	<-started
	o, err := q.Upsert(ctx, "user-42", []byte("profile v6"))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "upsert user-42 profile v6 while it runs: %v\n", o)
	close(proceed)
	fmt.Fprintln(out, <-runs)
	fmt.Fprintln(out, <-runs)

	// 3. A key that never calms down: a change every 100ms for 1.5s, each
	// postponing by 300ms, but MaxWait makes it run 1s after the first.
	first := time.Now()
	var ranAfter time.Duration
	for i := 0; i < 15; i++ {
		if _, err := q.Upsert(ctx, "user-7", []byte(fmt.Sprintf("chatty v%d", i)),
			redq.Delay(300*time.Millisecond), redq.MaxWait(time.Second)); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
		select {
		case r := <-runs:
			if ranAfter == 0 {
				ranAfter = time.Since(first)
				fmt.Fprintf(out, "%s, while its changes went on\n", r)
			}
		default:
		}
	}
	if ranAfter == 0 {
		return fmt.Errorf("user-7 did not run within its MaxWait")
	}
	fmt.Fprintf(out, "user-7 ran about %s after its first change (MaxWait 1s)\n", ranAfter.Round(100*time.Millisecond))
	fmt.Fprintln(out, <-runs) // the changes after that run, once they calmed down

	// 4. Cancel removes a pending item before it runs.
	if _, err := q.Upsert(ctx, "user-9", []byte("profile"), redq.Delay(time.Hour)); err != nil {
		return err
	}
	ok, err := q.Cancel(ctx, "user-9")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "cancelled user-9 before it ran: %v\n", ok)
	return nil
}

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
