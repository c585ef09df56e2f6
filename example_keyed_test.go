package redq_test

// The README's keyed deliveries and timers (see example_test.go for how
// snippets are cut).

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redq/redq"
)

// A burst of upserts of one key runs once, with the newest payload, after
// the burst calmed down (debounce); MaxWait bounds how long that may take.
func ExampleQueue_Upsert() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	q, err := conn.OpenQueue("index")
	must(err)
	ran := make(chan string)
	reindex := func(ctx context.Context, key string, payload string) error {
		ran <- key + " " + payload
		return nil
	}
	must(func() error {
		// readme:start
		// Reindex once the changes were quiet for 100 ms, at most 1 s after the first.
		for _, change := range []string{"v1", "v2", "v3"} {
			out, err := q.Upsert(ctx, "user:42", []byte(change),
				redq.Delay(100*time.Millisecond), redq.MaxWait(time.Second))
			if err != nil {
				return err
			}
			fmt.Println("upsert", change, out) // Created, Updated, Kept or Queued
		}
		if err := q.StartConsuming(10, time.Second); err != nil {
			return err
		}
		_, err := q.AddHandler("indexer", func(ctx context.Context, d redq.Message) error {
			return reindex(ctx, d.Key(), d.Payload()) // the newest payload of the burst
		})
		// readme:end
		return err
	}())
	fmt.Println("run", <-ran)
	// Output:
	// upsert v1 Created
	// upsert v2 Updated
	// upsert v3 Updated
	// run user:42 v3
}

// Lookup, RunNow and Cancel act on a key's pending item; an upsert while
// the key runs is parked behind it.
func ExampleQueue_Lookup() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	q, err := conn.OpenQueue("index")
	must(err)
	_, err = q.Upsert(ctx, "user:42", []byte("v1"), redq.Delay(time.Hour))
	must(err)
	must(func() error {
		// readme:start
		item, err := q.Lookup(ctx, "user:42") // ErrorNotFound when there is none
		if err != nil {
			return err
		}
		fmt.Printf("%s pending: %v, running: %v\n", item.Payload, item.Pending, item.Running)
		if _, err := q.RunNow(ctx, "user:42"); err != nil { // due now
			return err
		}
		d, err := q.Take(ctx, time.Second)
		if err != nil {
			return err
		}
		out, err := q.Upsert(ctx, "user:42", []byte("v2")) // while it runs: parked
		if err != nil {
			return err
		}
		fmt.Println(d.Payload(), "runs; v2", out)
		if err := d.Ack(); err != nil {
			return err
		}
		removed, err := q.Cancel(ctx, "user:42") // the pending item, never a running one
		fmt.Println("cancelled v2:", removed)
		// readme:end
		return err
	}())
	_, err = q.Lookup(ctx, "user:42")
	fmt.Println(errors.Is(err, redq.ErrorNotFound))
	// Output:
	// v1 pending: true, running: false
	// v1 runs; v2 Queued
	// cancelled v2: true
	// true
}

// Timers fire once, by key, to whoever waits in Next.
func ExampleConnection_OpenTimers() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	remind := func(key string, due time.Time) { fmt.Println("remind", key, !due.IsZero()) }
	must(func() error {
		// readme:start
		timers, err := conn.OpenTimers("invoice-reminders")
		if err != nil {
			return err
		}
		if err := timers.Set(ctx, "invoice:7", 50*time.Millisecond); err != nil { // create, or move a pending one
			return err
		}
		fire, err := timers.Next(ctx, time.Minute) // each fire goes to one waiter
		if err != nil {
			return err // ErrorTimeout when none fired within the minute
		}
		remind(fire.Key(), fire.Due())
		return fire.Ack(ctx) // or fire.Release(ctx, delay) to fire again later
		// readme:end
	}())
	// Output: remind invoice:7 true
}

// NextBatch takes every due fire (up to max) in one call, and Fires.Ack
// acks them in one: the way to keep up with many timers firing each second.
func ExampleTimers_NextBatch() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	must(func() error {
		timers, err := conn.OpenTimers("session-expiry")
		if err != nil {
			return err
		}
		for _, key := range []string{"session:1", "session:2", "session:3"} {
			if err := timers.Set(ctx, key, 0); err != nil {
				return err
			}
		}
		fires, err := timers.NextBatch(ctx, 100, time.Minute) // every fire due now, up to 100
		if err != nil {
			return err
		}
		keys := make([]string, 0, len(fires))
		for _, f := range fires {
			keys = append(keys, f.Key())
		}
		sort.Strings(keys)
		fmt.Println(keys)
		for i, err := range fires.Ack(ctx) { // one call for the whole batch
			fmt.Println("not acked:", fires[i].Key(), err)
		}
		return nil
	}())
	// Output: [session:1 session:2 session:3]
}
