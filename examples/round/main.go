// Command round shows a round queue in a few seconds: feeds that a pool of
// workers polls over and over, each about once per period and never more
// often, the least recently polled first; a feed a worker failed on comes
// back at once with Reissue; feeds nobody renews are forgotten after their
// time to live.
//
//	go run ./examples/round                        # on an embedded Redis
//	go run ./examples/round -redis redis://localhost:6379/0
//
// It uses the round round-feeds in the namespace redq-examples and removes
// its items at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

// namespace keeps the examples' keys apart from real queues in the same
// Redis (the default namespace is "redq").
const namespace = "redq-examples"

const (
	name    = "round-feeds"
	period  = 500 * time.Millisecond // poll each feed at most every 500ms
	ttl     = 1500 * time.Millisecond
	workers = 3
	runFor  = 2500 * time.Millisecond
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an embedded miniredis)")
	flag.Parse()
	if err := run(context.Background(), *redisURL, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// poll is one hand-out a worker got.
type poll struct {
	worker int
	item   redq.RoundItem
}

func run(ctx context.Context, redisURL string, out io.Writer) error {
	conn, err := connect("round", redisURL)
	if err != nil {
		return err
	}
	defer func() { <-conn.StopAllConsuming() }()

	// The period (and the TTL) is stored with the round when it is first
	// opened; every process that opens it must agree on the period, or
	// give redq.RoundChangeSettings to change it.
	feeds, err := conn.OpenRound(name, period, redq.RoundTTL(ttl))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "round %s: period %s, TTL %s, %d workers for %s\n", name, period, ttl, workers, runFor)
	all := []string{"feed-1", "feed-2", "feed-3", "feed-4", "feed-5"}
	for _, id := range all {
		if _, err := feeds.Add(ctx, id, []byte("https://example.com/"+id+".xml")); err != nil {
			return err
		}
	}
	defer func() {
		for _, id := range all {
			_, _ = feeds.Remove(ctx, id)
		}
	}()

	// A producer renews feed-1 to feed-3 (Add of an existing id keeps its
	// place in the round and renews its TTL); feed-4 and feed-5 are
	// forgotten once their TTL runs out.
	ctx, cancel := context.WithTimeout(ctx, runFor)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			for _, id := range all[:3] {
				if _, err := feeds.Add(ctx, id, []byte("https://example.com/"+id+".xml")); err != nil && ctx.Err() == nil {
					log.Print(err)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(ttl / 3):
			}
		}
	}()

	var mu sync.Mutex
	var polls []poll
	failed := false
	for w := 1; w <= workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				// Next waits for the next due feed: no polling of Redis.
				item, err := feeds.Next(ctx, time.Second)
				if errors.Is(err, redq.ErrorTimeout) {
					continue
				}
				if err != nil {
					return // the context ended
				}
				mu.Lock()
				polls = append(polls, poll{worker: w, item: item})
				failNow := item.ID == "feed-3" && !failed
				failed = failed || failNow
				mu.Unlock()
				if failNow {
					// The fetch failed: try again at once rather than in
					// a period.
					if _, err := feeds.Reissue(ctx, item.ID); err != nil {
						log.Print(err)
					}
				}
			}
		}()
	}
	wg.Wait()

	report(out, polls)
	stats, err := conn.CollectStats(nil)
	if err != nil {
		return err
	}
	s := stats.RoundStats[name]
	fmt.Fprintf(out, "stats: %d items, %d expired, %d handed out\n", s.ItemCount, s.ExpiredCount, s.IssuedCount)
	return nil
}

// report prints, per feed, how often it was polled and the shortest time
// between two polls by Redis's clock (the hand-out right after the
// Reissue excepted).
func report(out io.Writer, polls []poll) {
	byFeed := map[string][]redq.RoundItem{}
	for _, p := range polls {
		byFeed[p.item.ID] = append(byFeed[p.item.ID], p.item)
	}
	ids := make([]string, 0, len(byFeed))
	for id := range byFeed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		items := byFeed[id]
		sort.Slice(items, func(i, j int) bool { return items[i].Issued < items[j].Issued })
		gap := time.Duration(0)
		for i := 1; i < len(items); i++ {
			if id == "feed-3" && i == 1 {
				continue // reissued at once after the failure
			}
			if d := items[i].LastIssued.Sub(items[i-1].LastIssued); gap == 0 || d < gap {
				gap = d
			}
		}
		note := ""
		switch id {
		case "feed-3":
			note = ", failed once and was reissued"
		case "feed-4", "feed-5":
			note = ", not renewed: forgotten after its TTL"
		}
		fmt.Fprintf(out, "%s: polled %d times, at least %s apart%s\n", id, len(items), gap.Round(100*time.Millisecond), note)
	}
}

// connect opens a redq connection on the Redis at redisURL, or on a fresh
// embedded miniredis when redisURL is empty.
func connect(tag, redisURL string) (redq.Connection, error) {
	if redisURL == "" {
		return redq.OpenConnectionWithTestRedisClient(tag, nil, redq.WithNamespace(namespace))
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("invalid -redis: %w", err)
	}
	return redq.OpenConnectionWithRedisOptions(tag, opts, nil, redq.WithNamespace(namespace))
}
