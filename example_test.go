package redq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redq/redq"
)

// Publish, consume and ack on an embedded Redis.
func Example() {
	errs := make(chan error, 10)
	conn, err := redq.OpenConnectionWithTestRedisClient("example", errs)
	if err != nil {
		panic(err)
	}
	tasks, err := conn.OpenQueue("tasks")
	if err != nil {
		panic(err)
	}
	if err := tasks.Publish("resize image 1", "resize image 2"); err != nil {
		panic(err)
	}

	if err := tasks.StartConsuming(10, time.Second); err != nil {
		panic(err)
	}
	done := make(chan string)
	if _, err := tasks.AddConsumerFunc("resizer", func(d redq.Delivery) {
		// Work on d.Payload(), then settle the delivery: Ack when done,
		// Reject to park it in the rejected list.
		if err := d.Ack(); err != nil {
			fmt.Println("ack:", err)
		}
		done <- d.Payload()
	}); err != nil {
		panic(err)
	}
	fmt.Println(<-done)
	fmt.Println(<-done)
	<-conn.StopAllConsuming()
	// Output:
	// resize image 1
	// resize image 2
}

// A batch consumer gets up to batchSize deliveries at once and settles them
// in one Redis call.
func ExampleQueue_AddBatchConsumerFunc() {
	conn, err := redq.OpenConnectionWithTestRedisClient("example", nil)
	if err != nil {
		panic(err)
	}
	events, _ := conn.OpenQueue("events")
	_ = events.Publish("a", "b", "c")
	_ = events.StartConsuming(100, time.Second)
	batches := make(chan []string)
	_, _ = events.AddBatchConsumerFunc("indexer", 10, 50*time.Millisecond, func(batch redq.Deliveries) {
		if errs := batch.Ack(); len(errs) > 0 {
			fmt.Println("some acks failed:", errs)
		}
		batches <- batch.Payloads()
	})
	fmt.Println(<-batches)
	<-conn.StopAllConsuming()
	// Output: [a b c]
}

// Rejected deliveries wait in the queue's rejected list until an operator
// returns them, for example after a downstream outage.
func ExampleQueue_ReturnRejected() {
	conn, _ := redq.OpenConnectionWithTestRedisClient("example", nil)
	mails, _ := conn.OpenQueue("mails")
	_ = mails.Publish("mail 1")
	_ = mails.StartConsuming(1, time.Second)
	rejected := make(chan struct{})
	_, _ = mails.AddConsumerFunc("sender", func(d redq.Delivery) {
		_ = d.Reject() // the mail server is down
		close(rejected)
	})
	<-rejected
	<-mails.StopConsuming()

	n, _ := mails.ReturnRejected(100)
	stats, _ := conn.CollectStats([]string{"mails"})
	fmt.Println(n, "returned;", stats.QueueStats["mails"].ReadyCount, "ready")
	// Output: 1 returned; 1 ready
}

// A cleaner returns the unacked deliveries of connections whose heartbeat
// is gone. Run it periodically; several may run at once.
func ExampleCleaner() {
	conn, _ := redq.OpenConnectionWithTestRedisClient("cleaner", nil)
	cleaner := redq.NewCleaner(conn)
	returned, err := cleaner.Clean()
	fmt.Println(returned, err)
	// Output: 0 <nil>
}

// Put with Delay holds a delivery back until it is due by Redis's clock;
// Take waits for it.
func ExampleDelay() {
	conn, _ := redq.OpenConnectionWithTestRedisClient("example", nil)
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	reminders, _ := conn.OpenQueue("reminders")
	_ = reminders.Put(ctx, []byte("send reminder"), redq.Delay(500*time.Millisecond))

	_, err := reminders.Take(ctx, 0) // do not wait: it is not due yet
	fmt.Println(errors.Is(err, redq.ErrorTimeout))
	stats, _ := conn.CollectStats([]string{"reminders"})
	fmt.Println("delayed:", stats.QueueStats["reminders"].DelayedCount)

	d, err := reminders.Take(ctx, 5*time.Second) // returns when it is due
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Payload(), "attempt", d.Attempts())
	_ = d.Ack()
	// Output:
	// true
	// delayed: 1
	// send reminder attempt 1
}

// Higher priorities are taken first, and within a priority the oldest
// first. Take needs no StartConsuming.
func ExamplePriority() {
	conn, _ := redq.OpenConnectionWithTestRedisClient("example", nil)
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	jobs, _ := conn.OpenQueue("jobs")
	_ = jobs.Put(ctx, []byte("weekly report")) // priority 0, the default
	_ = jobs.Put(ctx, []byte("password reset"), redq.Priority(redq.MaxPriority))
	_ = jobs.Put(ctx, []byte("invoice"), redq.Priority(5))
	_ = jobs.Put(ctx, []byte("newsletter"))

	for {
		d, err := jobs.Take(ctx, 0)
		if errors.Is(err, redq.ErrorTimeout) {
			break // nothing left
		}
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Payload())
		_ = d.Ack()
	}
	// Output:
	// password reset
	// invoice
	// weekly report
	// newsletter
}

// A handler returns an error to have the delivery retried with the queue's
// retry policy; after the last attempt the delivery is rejected, with the
// error and the attempts in its headers.
func ExampleQueue_AddHandler() {
	conn, _ := redq.OpenConnectionWithTestRedisClient("example", nil)
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	policy := redq.RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond, MaxBackoff: time.Second}
	mails, _ := conn.OpenQueue("mails", redq.WithRetryPolicy(policy))
	_ = mails.Put(ctx, []byte("welcome mail"))

	_ = mails.StartConsuming(1, time.Second)
	attempts := make(chan int)
	_, _ = mails.AddHandler("sender", func(ctx context.Context, d redq.Message) error {
		attempts <- d.Attempts()
		return errors.New("mail server down") // nil would ack
	})
	for range policy.MaxAttempts {
		fmt.Println("attempt", <-attempts, "failed")
	}
	for { // until the last failure is settled
		stats, _ := conn.CollectStats([]string{"mails"})
		if stats.QueueStats["mails"].RejectedCount == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	<-mails.StopConsuming()

	// An operator returns it and reads why it failed.
	_, _ = mails.ReturnRejected(1)
	inspect, _ := conn.OpenQueue("mails")
	d, _ := inspect.Take(ctx, time.Second)
	fmt.Println(d.Payload()+":", d.Header().Get(redq.HeaderError), "after", d.Header().Get(redq.HeaderAttempts), "attempts")
	_ = d.Ack()
	// Output:
	// attempt 1 failed
	// attempt 2 failed
	// attempt 3 failed
	// welcome mail: mail server down after 3 attempts
}

// Unit-test a consumer without Redis.
func ExampleNewTestDeliveryString() {
	consume := func(d redq.Delivery) {
		if d.Payload() == "" {
			_ = d.Reject()
			return
		}
		_ = d.Ack()
	}
	d := redq.NewTestDeliveryString("")
	consume(d)
	fmt.Println(d.GetState())
	// Output: Rejected
}
