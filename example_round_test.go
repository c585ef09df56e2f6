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
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	polls := map[string]int{}
	poll := func(url string, data []byte) error {
		polls[url]++
		if url == "https://a.example/rss" && polls[url] == 1 {
			fmt.Printf("poll %s: timeout\n", url)
			return errors.New("timeout")
		}
		fmt.Printf("poll %s (data %q)\n", url, data)
		return nil
	}
	feeds, err := conn.OpenRound("feeds", 5*time.Minute, redq.RoundTTL(24*time.Hour))
	must(err)
	_, err = feeds.Add(ctx, "https://b.example/rss", nil)
	must(err)
	must(func() error {
		// readme:start
		feeds, err := conn.OpenRound("feeds", 5*time.Minute, redq.RoundTTL(24*time.Hour))
		if err != nil {
			return err
		}
		if _, err := feeds.Add(ctx, "https://a.example/rss", []byte(`{"etag":"42"}`)); err != nil { // or renew
			return err
		}
		for { // each worker
			item, err := feeds.Next(ctx, 0) // 0: do not wait; a worker would wait a minute
			if errors.Is(err, redq.ErrorTimeout) {
				break // nothing is due for five minutes
			} else if err != nil {
				return err
			}
			if err := poll(item.ID, item.Data); err != nil {
				_, err = feeds.Reissue(ctx, item.ID) // due again at once
				return err
			}
		}
		// readme:end
		return nil
	}())
	// Output:
	// poll https://b.example/rss (data "")
	// poll https://a.example/rss: timeout
}
