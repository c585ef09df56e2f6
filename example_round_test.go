package redq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redq/redq"
)

// A round hands out each item again and again, at most once per period,
// the least recently handed out first: here, poll each feed about every
// five minutes and forget feeds nobody renewed for a day.
func ExampleConnection_OpenRound() {
	conn, err := redq.OpenConnectionWithTestRedisClient("example", nil)
	if err != nil {
		panic(err)
	}
	defer func() { <-conn.StopAllConsuming() }()
	feeds, err := conn.OpenRound("feeds", 5*time.Minute, redq.RoundTTL(24*time.Hour))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, url := range []string{"https://a.example/rss", "https://b.example/rss"} {
		isNew, err := feeds.Add(ctx, url, nil)
		if err != nil {
			panic(err)
		}
		fmt.Println("added", url, isNew)
	}
	// Adding an existing id renews it (new data, a fresh TTL) and keeps its
	// place in the round.
	isNew, _ := feeds.Add(ctx, "https://a.example/rss", []byte(`etag "42"`))
	fmt.Println("renewed https://a.example/rss", !isNew)

	for {
		item, err := feeds.Next(ctx, 0) // 0: do not wait
		if errors.Is(err, redq.ErrorTimeout) {
			fmt.Println("nothing is due for five minutes")
			break
		}
		if err != nil {
			panic(err)
		}
		fmt.Printf("poll %s (hand-out %d, data %q)\n", item.ID, item.Issued, item.Data)
	}

	// A worker that failed puts the item back to be handed out at once.
	if _, err := feeds.Reissue(ctx, "https://b.example/rss"); err != nil {
		panic(err)
	}
	item, err := feeds.Next(ctx, time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Printf("retry %s (hand-out %d)\n", item.ID, item.Issued)
	// Output:
	// added https://a.example/rss true
	// added https://b.example/rss true
	// renewed https://a.example/rss true
	// poll https://a.example/rss (hand-out 1, data "etag \"42\"")
	// poll https://b.example/rss (hand-out 1, data "")
	// nothing is due for five minutes
	// retry https://b.example/rss (hand-out 2)
}
