package redq_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// An Inspector reads the dead letters of a queue, with the reason each was
// rejected, and retries one by id; it needs no connection of its own.
func ExampleInspector() {
	ctx := context.Background()
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	conn, err := redq.OpenConnectionWithRedisClient("worker", client, nil)
	if err != nil {
		panic(err)
	}
	defer func() { <-conn.StopAllConsuming() }()
	orders, _ := conn.OpenQueue("orders")
	_ = orders.Put(ctx, []byte(`{"order":42}`), redq.Header(http.Header{redq.HeaderError: {"payment service: 503"}}))
	d, _ := orders.Take(ctx, time.Second)
	_ = d.Reject()

	// readme:start
	inspector, err := redq.NewInspector(client)
	if err != nil {
		panic(err)
	}
	page, err := inspector.List(ctx, "orders", redq.ListOptions{State: redq.StateRejected})
	if err != nil {
		panic(err)
	}
	for _, dead := range page.Items {
		fmt.Printf("%s %s: %s\n", dead.State, dead.Payload, dead.Reason)
		if err := inspector.Retry(ctx, "orders", dead.ID); err != nil {
			panic(err)
		}
	}
	// readme:end
	q, _ := inspector.Queue(ctx, "orders")
	fmt.Printf("ready %d, rejected %d, retried %d\n", q.Ready, q.Rejected, q.Retried)
	// A second retry finds the delivery gone from rejected: nothing changes.
	err = inspector.Retry(ctx, "orders", page.Items[0].ID)
	fmt.Println(errors.Is(err, redq.ErrorInvalidArgument) || errors.Is(err, redq.ErrorNotFound))
	// Output:
	// rejected {"order":42}: payment service: 503
	// ready 1, rejected 0, retried 1
	// true
}

// Pause stops every connection's consumers of a queue (publishes go on and
// wait in ready) until Resume.
func ExampleQueue_Pause() {
	ctx := context.Background()
	conn, err := redq.OpenConnectionWithTestRedisClient("example", nil)
	if err != nil {
		panic(err)
	}
	defer func() { <-conn.StopAllConsuming() }()
	emails, _ := conn.OpenQueue("emails")
	if err := emails.Pause(ctx); err != nil {
		panic(err)
	}
	_ = emails.Publish("welcome mail")
	_, err = emails.Take(ctx, 100*time.Millisecond)
	fmt.Println("while paused:", errors.Is(err, redq.ErrorTimeout))
	stats, _ := conn.CollectStats([]string{"emails"})
	fmt.Println("paused:", stats.QueueStats["emails"].Paused, "ready:", stats.QueueStats["emails"].ReadyCount)

	if err := emails.Resume(ctx); err != nil {
		panic(err)
	}
	d, err := emails.Take(ctx, time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("after Resume:", d.Payload())
	_ = d.Ack()
	// Output:
	// while paused: true
	// paused: true ready: 1
	// after Resume: welcome mail
}
