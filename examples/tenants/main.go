// Command tenants is a per-tenant rate-limited sender: tenants publish
// messages into their own group (redq.Group), and the queue runs at most
// one send per tenant at a time (WithGroupConcurrency) and at most 2 a
// second per tenant (WithGroupRateLimit), while the tenants take turns: a
// tenant with many messages does not hold up one with few.
//
//	go run ./examples/tenants                        # on an embedded Redis
//	go run ./examples/tenants -redis redis://localhost:6379/0
//
// It uses the queue "outbox" in the namespace redq-examples and leaves it
// empty at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
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
	opts, err := redisOptions(redisURL)
	if err != nil {
		return err
	}
	errChan := make(chan error, 10)
	go func() {
		for err := range errChan {
			log.Printf("redq: %v", err)
		}
	}()
	conn, err := redq.OpenConnection("tenants", "tcp", opts.Addr, opts.DB, errChan, redq.WithNamespace(namespace))
	if err != nil {
		return err
	}
	defer func() { <-conn.StopAllConsuming() }()
	outbox, err := conn.OpenQueue("outbox",
		redq.WithGroupConcurrency(1),            // one send per tenant at a time
		redq.WithGroupRateLimit(2, time.Second)) // at most 2 a second per tenant
	if err != nil {
		return err
	}
	if _, err := outbox.PurgeReady(); err != nil { // a clean start
		return err
	}

	// acme has 4 messages, published first; initech and globex 2 each
	work := map[string]int{"acme": 4, "initech": 2, "globex": 2}
	for _, tenant := range []string{"acme", "initech", "globex"} {
		for i := 1; i <= work[tenant]; i++ {
			msg := fmt.Sprintf("%s #%d", tenant, i)
			if err := outbox.Put(ctx, []byte(msg), redq.Group(tenant)); err != nil {
				return err
			}
		}
	}

	// three senders; each records when it sent what
	var mu sync.Mutex
	var running, worst int
	sent := map[string][]time.Time{}
	var order []string
	done := make(chan struct{})
	total := 0
	if err := outbox.StartConsuming(10, 100*time.Millisecond); err != nil {
		return err
	}
	start := time.Now()
	for i := 0; i < 3; i++ {
		if _, err := outbox.AddConsumerFunc("sender", func(d redq.Delivery) {
			tenant := d.Payload()[:len(d.Payload())-3]
			mu.Lock()
			running++
			worst = max(worst, running)
			sent[tenant] = append(sent[tenant], time.Now())
			order = append(order, d.Payload())
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // "send"
			mu.Lock()
			running--
			mu.Unlock()
			if err := d.Ack(); err != nil {
				log.Printf("ack: %v", err)
			}
			mu.Lock()
			total++
			if total == 8 {
				close(done)
			}
			mu.Unlock()
		}); err != nil {
			return err
		}
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("sent %d of 8 within 30s", total)
	}
	mu.Lock()
	defer mu.Unlock()
	// the first round: every tenant's first message before acme's second
	fmt.Fprintf(out, "first three sends: one per tenant: %v\n", firstRound(order[:3]))
	tenants := make([]string, 0, len(sent))
	for t := range sent {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	for _, t := range tenants {
		ts := sent[t]
		// with 2 a second, a tenant's third send waits for its first to
		// leave the window
		third := "-"
		if len(ts) >= 3 {
			third = fmt.Sprint(ts[2].Sub(ts[0]) >= 900*time.Millisecond)
		}
		fmt.Fprintf(out, "%s: %d sent, third waited for the window: %s\n", t, len(ts), third)
	}
	fmt.Fprintf(out, "all sent within %ds\n", int(time.Since(start).Seconds()+0.999))
	stats, err := conn.CollectStats([]string{"outbox"})
	if err != nil {
		return err
	}
	st := stats.QueueStats["outbox"]
	fmt.Fprintf(out, "left: %d ready, %d groups pending; K %d, rate %v per tenant\n",
		st.ReadyCount, st.GroupsPending, st.GroupConcurrency, st.GroupRateLimit)
	return nil
}

// firstRound reports whether sends holds one message of each tenant.
func firstRound(sends []string) bool {
	seen := map[string]bool{}
	for _, s := range sends {
		seen[s[:len(s)-3]] = true
	}
	return len(seen) == len(sends)
}

func redisOptions(redisURL string) (*redis.Options, error) {
	if redisURL == "" {
		m, err := miniredis.Run()
		if err != nil {
			return nil, err
		}
		return &redis.Options{Addr: m.Addr()}, nil
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("invalid -redis: %w", err)
	}
	return opts, nil
}
