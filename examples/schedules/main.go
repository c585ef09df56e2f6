// Command schedules shows redq's cron schedules: a nightly report at 02:00
// Berlin time and a heartbeat every second, published by the loops of two
// processes (two connections here) at once, each tick exactly once, and
// what a paused schedule and a changed one do.
//
//	go run ./examples/schedules                        # on an embedded Redis
//	go run ./examples/schedules -redis redis://localhost:6379/0
//
// It uses the schedule set and queue "reports" in the namespace
// redq-examples, and removes its schedules at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
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
	errChan := make(chan error, 10)
	go func() {
		for err := range errChan {
			log.Printf("redq: %v", err)
		}
	}()
	opts, err := redisOptions(redisURL)
	if err != nil {
		return err
	}
	// two "processes", each running the schedules' loop
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var conns []redq.Connection
	defer func() {
		for _, c := range conns {
			<-c.StopAllConsuming()
		}
	}()
	var schedules redq.Schedules
	for _, tag := range []string{"scheduler-a", "scheduler-b"} {
		conn, err := redq.OpenConnectionWithRedisOptions(tag, opts, errChan, redq.WithNamespace(namespace))
		if err != nil {
			return err
		}
		conns = append(conns, conn)
		s, err := conn.OpenSchedules("reports")
		if err != nil {
			return err
		}
		schedules = s
		go func() { _ = s.Run(ctx) }()
	}
	defer func() {
		for _, id := range []string{"nightly-sales", "heartbeat"} {
			_, _ = schedules.Remove(context.Background(), id)
		}
	}()

	err = schedules.Upsert(ctx, "nightly-sales", "0 2 * * *", []byte(`{"report":"sales"}`),
		redq.ScheduleTimeZone("Europe/Berlin"), redq.ScheduleOverlap(redq.OverlapSkip))
	if err != nil {
		return err
	}
	info, err := schedules.Lookup(ctx, "nightly-sales")
	if err != nil {
		return err
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	fmt.Fprintf(out, "nightly-sales: next at %s Berlin time\n", info.Next.In(berlin).Format("15:04"))

	if err := schedules.Upsert(ctx, "heartbeat", "@every 1s", []byte("beat")); err != nil {
		return err
	}
	reports, err := conns[0].OpenQueue("reports")
	if err != nil {
		return err
	}
	seen := map[string]int{}
	for len(seen) < 3 {
		d, err := reports.Take(ctx, 5*time.Second)
		if err != nil {
			return err
		}
		seen[d.Header().Get(redq.HeaderScheduleTick)]++
		if err := d.Ack(); err != nil {
			return err
		}
	}
	doubles := 0
	for _, n := range seen {
		doubles += n - 1
	}
	fmt.Fprintf(out, "heartbeat: 3 ticks from two loops, %d published twice\n", doubles)

	if err := schedules.Pause(ctx, "heartbeat"); err != nil {
		return err
	}
	info, err = schedules.Lookup(ctx, "heartbeat")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "heartbeat paused: %v, %d ticks published so far\n", info.Paused, info.Fired)

	// a changed spec takes effect from the next tick
	if err := schedules.Upsert(ctx, "nightly-sales", "30 3 * * *", []byte(`{"report":"sales"}`),
		redq.ScheduleTimeZone("Europe/Berlin")); err != nil {
		return err
	}
	info, err = schedules.Lookup(ctx, "nightly-sales")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "nightly-sales moved: next at %s Berlin time (version %d)\n", info.Next.In(berlin).Format("15:04"), info.Version)
	return nil
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
