package redq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redq/redq"
)

// Groups: at most K deliveries of one group in flight, the groups taken
// in turn, and optionally a rate per group. Here each tenant runs one
// send at a time, and a tenant with many pending does not hold up another.
func ExampleGroup() {
	ctx := context.Background()
	conn, err := redq.OpenConnectionWithTestRedisClient("example", nil)
	if err != nil {
		panic(err)
	}
	defer func() { <-conn.StopAllConsuming() }()
	// readme:start
	mail, err := conn.OpenQueue("mail",
		redq.WithGroupConcurrency(1),              // one send per tenant at a time
		redq.WithGroupRateLimit(100, time.Minute)) // and at most 100 a minute each
	if err != nil {
		panic(err) // *ArgumentError for a bad setting; nothing changed in Redis
	}
	for _, p := range []string{"acme-1", "acme-2", "acme-3"} {
		_ = mail.Put(ctx, []byte(p), redq.Group("acme"))
	}
	_ = mail.Put(ctx, []byte("initech-1"), redq.Group("initech"))
	batch, _ := mail.TakeBatch(ctx, 10, 0) // one of each tenant: acme's K is 1
	for _, d := range batch {
		fmt.Println("sending", d.Payload())
	}
	// readme:end
	_ = batch.Ack() // frees acme's slot: acme-2 is next
	d, _ := mail.Take(ctx, time.Second)
	fmt.Println("then", d.Payload())
	_ = d.Ack()
	stats, _ := conn.CollectStats([]string{"mail"})
	st := stats.QueueStats["mail"]
	fmt.Println("ready:", st.ReadyCount, "groups pending:", st.GroupsPending, "K:", st.GroupConcurrency, "rate:", st.GroupRateLimit)
	// Output:
	// sending acme-1
	// sending initech-1
	// then acme-2
	// ready: 1 groups pending: 1 K: 1 rate: 100/1m0s
}
