// Command timers shows redq's timers: invoice reminders set, moved and
// cancelled by key, fired in due order to two waiting workers, each fire
// exactly once, and a timer set again while its fire is handled.
//
//	go run ./examples/timers                        # on an embedded Redis
//	go run ./examples/timers -redis redis://localhost:6379/0
//
// It uses the timer set invoice-reminders in the namespace redq-examples.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
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

func run(ctx context.Context, redisURL string, out io.Writer) error {
	errChan := make(chan error, 10)
	go func() {
		for err := range errChan {
			log.Printf("redq: %v", err)
		}
	}()
	conn, err := connect("timers", redisURL, errChan)
	if err != nil {
		return err
	}
	defer func() { <-conn.StopAllConsuming() }()
	timers, err := conn.OpenTimers("invoice-reminders")
	if err != nil {
		return err
	}

	// Set creates a timer or moves a pending one; Create only creates.
	for key, d := range map[string]time.Duration{"invoice-1": 200 * time.Millisecond, "invoice-2": 400 * time.Millisecond,
		"invoice-3": 600 * time.Millisecond, "invoice-4": time.Hour} {
		if err := timers.Set(ctx, key, d); err != nil {
			return err
		}
	}
	created, err := timers.Create(ctx, "invoice-1", time.Millisecond)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "create invoice-1 again: %v (it is pending)\n", created)
	if err := timers.Set(ctx, "invoice-4", 300*time.Millisecond); err != nil { // paid late: remind sooner
		return err
	}
	if ok, err := timers.Cancel(ctx, "invoice-3"); err != nil || !ok { // paid: no reminder
		return fmt.Errorf("cancel invoice-3: %v, %w", ok, err)
	}
	fmt.Fprintln(out, "moved invoice-4 to 300ms, cancelled invoice-3")

	// Two workers wait for fires; each fire goes to one of them.
	type fired struct {
		key    string
		worker int
		late   time.Duration
	}
	var mu sync.Mutex
	var fires []fired
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := 1; w <= 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				f, err := timers.Next(wctx, time.Second)
				if errors.Is(err, redq.ErrorTimeout) {
					continue
				}
				if errors.Is(err, context.Canceled) {
					return
				}
				if err != nil {
					log.Print(err)
					return
				}
				mu.Lock()
				fires = append(fires, fired{f.Key(), w, time.Since(f.Due())})
				mu.Unlock()
				if err := f.Ack(ctx); err != nil {
					log.Print(err)
				}
			}
		}()
	}
	time.Sleep(700 * time.Millisecond)
	stop()
	wg.Wait()
	var keys []string
	for _, f := range fires {
		keys = append(keys, f.key)
		fmt.Fprintf(out, "fired %s to worker %d, %s after its due time\n", f.key, f.worker, lateness(f.late))
	}
	fmt.Fprintf(out, "fired once each, in due order: %s\n", strings.Join(keys, " "))

	// A timer set again while its fire is handled is a new timer: the old
	// fire's Ack does not remove it.
	if err := timers.Set(ctx, "invoice-5", 0); err != nil {
		return err
	}
	f, err := timers.Next(ctx, 5*time.Second)
	if err != nil {
		return err
	}
	if err := timers.Set(ctx, f.Key(), 100*time.Millisecond); err != nil {
		return err
	}
	if err := f.Ack(ctx); err != nil {
		return err
	}
	due, err := timers.Lookup(ctx, "invoice-5")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "set %s again while it fired: still pending after the old fire's ack (due in %s)\n",
		f.Key(), lateness(time.Until(due)))
	f, err = timers.Next(ctx, 5*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "fired %s again\n", f.Key())
	return f.Ack(ctx)
}

// lateness rounds a short duration for the story: under 50ms reads "<50ms".
func lateness(d time.Duration) string {
	if d < 50*time.Millisecond {
		return "<50ms"
	}
	return d.Round(50 * time.Millisecond).String()
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
