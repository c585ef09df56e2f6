package redq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redq/redq"
)

// A rate limit holds for every connection and process that consumes the
// queue: here at most 2 deliveries are handed out in any 100 ms.
func ExampleWithRateLimit() {
	ctx := context.Background()
	conn, err := redq.OpenConnectionWithTestRedisClient("example", nil)
	if err != nil {
		panic(err)
	}
	defer func() { <-conn.StopAllConsuming() }()
	// readme:start
	sms, err := conn.OpenQueue("sms", redq.WithRateLimit(2, 100*time.Millisecond))
	if err != nil {
		panic(err) // *ArgumentError for a bad limit; nothing changed in Redis
	}
	_ = sms.Publish("a", "b", "c")
	batch, _ := sms.TakeBatch(ctx, 10, 0) // what the window allows: 2
	fmt.Println("taken at once:", len(batch))
	_, err = sms.Take(ctx, 0) // the window is full: no wait, ErrorTimeout
	fmt.Println("then:", errors.Is(err, redq.ErrorTimeout))
	d, _ := sms.Take(ctx, time.Second) // waits until the first hand-out leaves the window
	fmt.Println("after the window:", d.Payload())
	// readme:end
	_ = batch.Ack()
	_ = d.Ack()
	stats, _ := conn.CollectStats([]string{"sms"})
	fmt.Println("limit:", stats.QueueStats["sms"].RateLimit)
	// Output:
	// taken at once: 2
	// then: true
	// after the window: c
	// limit: 2/100ms
}
