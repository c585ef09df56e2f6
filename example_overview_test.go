package redq_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// Overview reads every queue, connection, timer set and round of a
// namespace in two round trips, for a status page or a metrics scrape.
func ExampleInspector_Overview() {
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
	for _, name := range []string{"emails", "orders"} {
		q, _ := conn.OpenQueue(name)
		_ = q.Publish("a", "b")
	}

	inspector, err := redq.NewInspector(client)
	if err != nil {
		panic(err)
	}
	o, err := inspector.Overview(ctx)
	if err != nil {
		panic(err)
	}
	for _, q := range o.Queues {
		fmt.Printf("%s: ready %d, published %d\n", q.Name, q.Ready, q.Published)
	}
	fmt.Println(len(o.Connections), "connection,", o.Connections[0].State)
	// Output:
	// emails: ready 2, published 2
	// orders: ready 2, published 2
	// 1 connection, active
}
