package redq_test

import (
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
	// Output: rejected
}
