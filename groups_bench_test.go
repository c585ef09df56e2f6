package redq

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkGroups measures groups on a real Redis (see docs/performance.md,
// "Groups"): the hand-out rate of 10,000 groups with K=1 against the same
// number of plain deliveries in the same run, Redis's time per take from
// INFO commandstats, and Redis memory per group and per grouped pending
// delivery. Run it with -benchtime=1x.
func BenchmarkGroups(b *testing.B) {
	client := realClient(b)
	ctx := context.Background()
	c, err := openConn(client, "bench", nil, namespace())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { <-c.StopAllConsuming() }()
	const groups, perGroup = 10_000, 2
	payload := strings.Repeat("x", 100)

	// publish: grouped (10,000 groups of perGroup) and plain (as many)
	gq, err := c.OpenQueue("grouped", WithGroupConcurrency(1))
	if err != nil {
		b.Fatal(err)
	}
	pq := openQueue(b, c, "plain")
	load := func() {
		for g := 0; g < groups; g++ {
			for i := 0; i < perGroup; i++ {
				if err := gq.Put(ctx, []byte(payload), Group("tenant-"+strconv.Itoa(g))); err != nil {
					b.Fatal(err)
				}
			}
		}
		ps := make([]string, 1000)
		for i := range ps {
			ps[i] = payload
		}
		for i := 0; i < groups*perGroup; i += len(ps) {
			if err := pq.Publish(ps...); err != nil {
				b.Fatal(err)
			}
		}
	}
	// consume all with 8 consumers (prefetch 100), acking each; returns
	// deliveries per second
	consume := func(name string) float64 {
		q := openQueue(b, c, name)
		var n atomic.Int64
		done := make(chan struct{})
		start := time.Now()
		if err := q.StartConsuming(100, 100*time.Millisecond); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < 8; i++ {
			if _, err := q.AddConsumerFunc("c", func(d Delivery) {
				_ = d.Ack()
				if n.Add(1) == groups*perGroup {
					close(done)
				}
			}); err != nil {
				b.Fatal(err)
			}
		}
		<-done
		rate := float64(groups*perGroup) / time.Since(start).Seconds()
		<-q.StopConsuming()
		return rate
	}
	for i := 0; i < b.N; i++ {
		load()
		if err := client.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		plainRate := consume("plain")
		plainUsec := scriptUsec(b, client)
		if err := client.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		groupRate := consume("grouped")
		groupUsec := scriptUsec(b, client)
		b.ReportMetric(plainRate, "plain/s")
		b.ReportMetric(groupRate, "grouped/s")
		b.ReportMetric(groupRate/plainRate, "grouped/plain")
		b.ReportMetric(plainUsec/float64(groups*perGroup), "plain-redis-µs/take+ack")
		b.ReportMetric(groupUsec/float64(groups*perGroup), "grouped-redis-µs/take+ack")
	}

	// memory: 10,000 groups of 1 pending each, and 10,000 pending in one
	// group, against the same deliveries in a plain ready list
	rq := gq.(*redisQueue)
	usage := func(keys ...string) int64 {
		var sum int64
		for _, k := range keys {
			n, err := client.MemoryUsage(ctx, k, 0).Result()
			if err == nil {
				sum += n
			}
		}
		return sum
	}
	gkeys := func() []string { return rq.keys.block[queueBlockLen-groupKeys:] }
	for g := 0; g < groups; g++ {
		if err := gq.Put(ctx, []byte(payload), Group("tenant-"+strconv.Itoa(g))); err != nil {
			b.Fatal(err)
		}
	}
	many := usage(gkeys()...)
	if _, err := gq.PurgeReady(); err != nil {
		b.Fatal(err)
	}
	one, err := c.OpenQueue("grouped", WithPublishDefaults(Group("tenant-0")))
	if err != nil {
		b.Fatal(err)
	}
	ps := make([]string, groups)
	for i := range ps {
		ps[i] = payload
	}
	if err := one.Publish(ps...); err != nil {
		b.Fatal(err)
	}
	single := usage(gkeys()...)
	if err := pq.Publish(ps...); err != nil {
		b.Fatal(err)
	}
	plain := usage(pq.keys.ready)
	b.ReportMetric(float64(single)/groups, "B/grouped-pending")
	b.ReportMetric(float64(plain)/groups, "B/plain-ready")
	b.ReportMetric(float64(many-single)/groups, "B/group")
	fmt.Printf("memory: 10k groups of 1: %d B; 1 group of 10k: %d B; plain list of 10k: %d B\n", many, single, plain)
}

// scriptUsec reads the Redis time spent in scripts since the last CONFIG
// RESETSTAT (cmdstat_evalsha and cmdstat_eval): the fetches and the acks
// of a run.
func scriptUsec(b *testing.B, client *redis.Client) float64 {
	b.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				sum += n
			}
		}
	}
	return sum
}
