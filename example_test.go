package redq_test

// The README's tour. Each README snippet is the region between the
// "readme:start" and "readme:end" lines of the Example it names (see
// readme_test.go); the rest of an Example sets up an embedded Redis and
// prints what the snippet did.

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// exampleConnection opens a connection on a fresh embedded Redis.
func exampleConnection() redq.Connection {
	conn, err := redq.OpenConnectionWithTestRedisClient("example", nil)
	if err != nil {
		panic(err)
	}
	return conn
}

// must stops an Example at its first error.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// Publish, consume and ack on an embedded Redis.
func Example() {
	errs := make(chan error, 10)
	conn, err := redq.OpenConnectionWithTestRedisClient("example", errs)
	must(err)
	tasks, err := conn.OpenQueue("tasks")
	must(err)
	must(tasks.Publish("resize image 1", "resize image 2"))

	must(tasks.StartConsuming(10, time.Second))
	done := make(chan string)
	_, err = tasks.AddConsumerFunc("resizer", func(d redq.Delivery) {
		// Work on d.Payload(), then settle the delivery: Ack when done,
		// Reject to park it in the rejected list.
		if err := d.Ack(); err != nil {
			fmt.Println("ack:", err)
		}
		done <- d.Payload()
	})
	must(err)
	fmt.Println(<-done)
	fmt.Println(<-done)
	<-conn.StopAllConsuming()
	// Output:
	// resize image 1
	// resize image 2
}

// Open a connection on any go-redis client: a single node, a failover
// (Sentinel) client or a cluster client.
func ExampleOpen() {
	server, err := miniredis.Run()
	must(err)
	defer server.Close()
	addr := server.Addr()
	ctx := context.Background()
	errs := make(chan error, 100)
	go func() {
		for err := range errs {
			log.Print(err)
		}
	}()
	conn, err := func() (redq.Connection, error) {
		// readme:start
		client := redis.NewClient(&redis.Options{Addr: addr}) // or a cluster or failover client
		conn, err := redq.Open(ctx, "api", client, errs, redq.WithNamespace("myapp"))
		if err != nil {
			return nil, err // ErrorUnavailable, ErrorConfiguration, …
		}
		// readme:end
		return conn, nil
	}()
	must(err)
	queues, err := conn.GetOpenQueues()
	must(err)
	fmt.Println(len(queues))
	<-conn.StopAllConsuming()
	// Output: 0
}

// Publish one payload, many in one round trip, or one with options.
func ExampleQueue_Publish() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	must(func() error {
		// readme:start
		tasks, err := conn.OpenQueue("tasks")
		if err != nil {
			return err // *ArgumentError for a bad name
		}
		if err := tasks.Publish("resize 1", "resize 2", "resize 3"); err != nil { // one round trip
			return err
		}
		return tasks.Put(ctx, []byte("resize 4"), redq.Header(http.Header{"Trace-Id": {"7f3a"}}))
		// readme:end
	}())
	stats, err := conn.CollectStats([]string{"tasks"})
	must(err)
	fmt.Println(stats.QueueStats["tasks"].ReadyCount, "ready")
	// Output: 4 ready
}

// Consumers get deliveries through a prefetch buffer and settle each one.
func ExampleQueue_AddConsumerFunc() {
	conn := exampleConnection()
	tasks, err := conn.OpenQueue("tasks")
	must(err)
	must(tasks.Publish("resize 1", ""))
	settled := make(chan string, 2)
	resize := func(payload string) error {
		if payload == "" {
			settled <- "rejected " + payload
			return fmt.Errorf("empty payload")
		}
		settled <- "acked " + payload
		return nil
	}
	must(func() error {
		// readme:start
		if err := tasks.StartConsuming(100, time.Second); err != nil { // prefetch limit, poll bound
			return err
		}
		_, err := tasks.AddConsumerFunc("resizer", func(d redq.Delivery) {
			if err := resize(d.Payload()); err != nil {
				if err := d.Reject(); err != nil { // parked in the rejected list
					log.Print(err)
				}
				return
			}
			if err := d.Ack(); err != nil { // nil: it is gone from Redis
				log.Print(err)
			}
		})
		// readme:end
		return err
	}())
	fmt.Println(<-settled)
	fmt.Printf("%q\n", <-settled)
	<-conn.StopAllConsuming()
	// Output:
	// acked resize 1
	// "rejected "
}

// A batch consumer gets up to batchSize deliveries at once and settles them
// in one Redis call.
func ExampleQueue_AddBatchConsumerFunc() {
	conn := exampleConnection()
	events, err := conn.OpenQueue("events")
	must(err)
	must(events.Publish("a", "b", "c"))
	must(events.StartConsuming(100, time.Second))
	batches := make(chan []string)
	// readme:start
	_, err = events.AddBatchConsumerFunc("indexer", 100, 50*time.Millisecond, func(batch redq.Deliveries) {
		batches <- batch.Payloads() // work on the batch

		if errs := batch.Ack(); len(errs) > 0 { // one Redis call
			log.Print(errs) // by index in the batch
		}
	})
	// readme:end
	must(err)
	fmt.Println(<-batches)
	<-conn.StopAllConsuming()
	// Output: [a b c]
}

// Push moves a delivery to the push queue; rejected deliveries wait until
// an operator returns them.
func ExampleQueue_SetPushQueue() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	tasks, err := conn.OpenQueue("tasks")
	must(err)
	must(tasks.Publish("resize 1", "resize 2"))
	d, err := tasks.Take(ctx, time.Second)
	must(err)
	other, err := tasks.Take(ctx, time.Second)
	must(err)
	must(other.Reject())
	n, err := func() (int64, error) {
		// readme:start
		failed, err := conn.OpenQueue("tasks-failed")
		if err != nil {
			return 0, err
		}
		tasks.SetPushQueue(failed)
		if err := d.Push(); err != nil { // to tasks-failed's ready list (Reject when no push queue is set)
			return 0, err
		}
		// Rejected deliveries wait in tasks' rejected list; after the
		// downstream outage, back to ready:
		return tasks.ReturnRejected(1000)
		// readme:end
	}()
	must(err)
	stats, err := conn.CollectStats([]string{"tasks", "tasks-failed"})
	must(err)
	fmt.Println(n, "returned to tasks;", stats.QueueStats["tasks-failed"].ReadyCount, "ready in tasks-failed")
	// Output: 1 returned to tasks; 1 ready in tasks-failed
}

// A cleaner returns the unacked deliveries of connections whose heartbeat
// is gone. Run it periodically; several may run at once.
func ExampleCleaner() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	// readme:start
	cleaner := redq.NewCleaner(conn)
	returned, err := cleaner.Clean() // call it every minute or so
	if err != nil {
		log.Print(err) // a *CleanError names what was left for the next run
	}
	// readme:end
	fmt.Println(returned, err)
	// Output: 0 <nil>
}

// CollectStats reads every queue's counts in two round trips.
func ExampleConnection_CollectStats() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	tasks, err := conn.OpenQueue("tasks")
	must(err)
	must(tasks.Publish("resize 1"))
	must(func() error {
		// readme:start
		stats, err := conn.CollectStats([]string{"tasks"})
		if err != nil {
			return err
		}
		q := stats.QueueStats["tasks"]
		fmt.Println(q.ReadyCount, q.RejectedCount, q.DelayedCount, q.UnackedCount(), q.ConsumerCount())
		http.Handle("/queues", redq.NewHandler(conn)) // HTML; ?format=json, ?refresh=5
		// readme:end
		return nil
	}())
	// Output: 1 0 0 0 0
}

// Unit-test code that publishes, and consumers, without Redis.
func ExampleNewTestConnection() {
	publishSignup := func(conn redq.Connection) error {
		q, err := conn.OpenQueue("mails")
		if err != nil {
			return err
		}
		return q.Publish("welcome")
	}
	consume := func(d redq.Delivery) {
		if err := d.Ack(); err != nil {
			log.Print(err)
		}
	}
	// readme:start
	conn := redq.NewTestConnection() // queues that record what is published
	if err := publishSignup(conn); err != nil {
		panic(err)
	}
	fmt.Println(conn.GetDeliveries("mails"))

	d := redq.NewTestDeliveryString("welcome")
	consume(d)
	fmt.Println(d.GetState()) // Unacked, Acked, Rejected or Pushed
	// readme:end

	// Output:
	// [welcome]
	// Acked
}
