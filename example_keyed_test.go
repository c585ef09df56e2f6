package redq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redq/redq"
)

// A burst of upserts of one key runs once, with the newest payload, after
// the burst calmed down (debounce); MaxWait bounds how long that may take.
func ExampleQueue_Upsert() {
	conn, _ := redq.OpenConnectionWithTestRedisClient("example", nil)
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	index, _ := conn.OpenQueue("index")
	for _, p := range []string{"v1", "v2", "v3"} {
		out, _ := index.Upsert(ctx, "user:42", []byte(p), redq.Delay(100*time.Millisecond), redq.MaxWait(time.Second))
		fmt.Println("upsert", p, out)
	}
	item, _ := index.Lookup(ctx, "user:42")
	fmt.Printf("pending %s, %d updates\n", item.Payload, item.Updates)

	d, _ := index.Take(ctx, 5*time.Second) // returns once the burst is 100ms quiet
	fmt.Println("run", d.Key(), d.Payload())
	out, _ := index.Upsert(ctx, "user:42", []byte("v4")) // while it runs: parked behind it
	fmt.Println("upsert v4", out)
	_ = d.Ack()
	d, _ = index.Take(ctx, 5*time.Second)
	fmt.Println("run", d.Key(), d.Payload())
	_ = d.Ack()
	// Output:
	// upsert v1 Created
	// upsert v2 Updated
	// upsert v3 Updated
	// pending v3, 2 updates
	// run user:42 v3
	// upsert v4 Queued
	// run user:42 v4
}

// Timers fire once, by key, to whoever waits in Next.
func ExampleConnection_OpenTimers() {
	conn, _ := redq.OpenConnectionWithTestRedisClient("example", nil)
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	timers, _ := conn.OpenTimers("reminders")
	_ = timers.Set(ctx, "invoice:7", 50*time.Millisecond)
	created, _ := timers.Create(ctx, "invoice:7", time.Hour)
	fmt.Println("created again:", created)

	fire, _ := timers.Next(ctx, time.Second)
	fmt.Println("fired", fire.Key(), !fire.Due().IsZero())
	_ = fire.Ack(ctx)
	// Output:
	// created again: false
	// fired invoice:7 true
}
