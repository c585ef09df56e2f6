// Command stats_handler mounts redq's stats page on an http.ServeMux next
// to the application's own handlers.
//
//	go run ./examples/stats_handler                   # then open http://localhost:3333/stats?refresh=1
//	go run ./examples/stats_handler -redis redis://localhost:6379/0 -duration 0
//
// The page takes ?refresh=N (reload every N seconds), ?layout=condensed
// (one row per queue) and ?format=json.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// namespace keeps the examples' keys apart from real queues in the same
// Redis (the default namespace is "redq").
const namespace = "redq-examples"

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an embedded miniredis, with some traffic)")
	addr := flag.String("addr", "localhost:3333", "address to listen on")
	duration := flag.Duration("duration", 3*time.Second, "stop after this long (0: run until Ctrl-C)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := run(ctx, *redisURL, *addr); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, redisURL, addr string) error {
	conn, err := connect("stats-handler", redisURL)
	if err != nil {
		return err
	}
	defer func() { <-conn.StopAllConsuming() }()
	if redisURL == "" {
		// An empty embedded Redis makes a dull page: add some traffic.
		if err := startTraffic(ctx, conn); err != nil {
			return err
		}
	}

	mux := http.NewServeMux()
	mux.Handle("/stats", redq.NewHandler(conn))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "the application lives here; queue stats are at /stats")
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.ListenAndServe() }()
	log.Printf("stats page on http://%s/stats?refresh=1", addr)

	select {
	case err := <-serveErr:
		return err // could not listen, for example
	case <-ctx.Done():
	}
	// Let requests in flight finish, for up to five seconds.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Print("stopped")
	return nil
}

// startTraffic publishes to two queues now and then, and consumes one of
// them, acking most deliveries and rejecting a few.
func startTraffic(ctx context.Context, conn redq.Connection) error {
	emails, err := conn.OpenQueue("emails")
	if err != nil {
		return err
	}
	reports, err := conn.OpenQueue("reports") // nobody consumes this one
	if err != nil {
		return err
	}
	if err := emails.StartConsuming(10, time.Second); err != nil {
		return err
	}
	for range 2 {
		_, err := emails.AddConsumerFunc("mailer", func(d redq.Delivery) {
			time.Sleep(20 * time.Millisecond)
			if rand.IntN(10) == 0 {
				_ = d.Reject()
				return
			}
			_ = d.Ack()
		})
		if err != nil {
			return err
		}
	}
	go func() {
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			_ = emails.Publish(fmt.Sprintf("mail-%d", i), fmt.Sprintf("mail-%d-cc", i))
			if i%5 == 0 {
				_ = reports.Publish(fmt.Sprintf("report-%d", i))
			}
		}
	}()
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
