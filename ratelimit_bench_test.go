package redq

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkRateLimitedFetch compares a fetch of a rate-limited queue
// (whose limit is checked but does not hold: the log of takes grows to
// every take of the run) with a fetch of an unlimited one: TakeBatch of
// 10 deliveries, in alternating rounds of 200 calls on each, on the real
// redis-server. It reports the medians over the rounds of the time per
// call and of Redis's CPU time per call, and the memory of the log per
// take. Run it with -benchtime=1x.
func BenchmarkRateLimitedFetch(b *testing.B) {
	const (
		rounds = 9
		calls  = 200
		batch  = 10
	)
	e := newBenchEnv(b)
	ctx := context.Background()
	c := e.open("ratebench")
	plain := openQueue(b, c, "plain")
	lq, err := c.OpenQueue("limited", WithRateLimit(MaxRateLimitN, time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	limited := lq.(*redisQueue)
	n := rounds * calls * batch * b.N
	e.fill(plain, n)
	e.fill(limited, n)
	measure := func(q *redisQueue) (wall, cpu time.Duration) {
		taken := make([]Deliveries, 0, calls)
		cpu0, t0 := e.serverCPU(), time.Now()
		for i := 0; i < calls; i++ {
			ds, err := q.TakeBatch(ctx, batch, 0)
			if err != nil || len(ds) != batch {
				b.Fatalf("TakeBatch: %d, %v", len(ds), err)
			}
			taken = append(taken, ds)
		}
		wall, cpu = time.Since(t0)/calls, (e.serverCPU()-cpu0)/calls
		// settle outside the measurement; the log of takes stays
		for _, ds := range taken {
			for _, err := range ds.Ack() {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		return wall, cpu
	}
	var pw, pc, lw, lc []time.Duration
	for i := 0; i < b.N*rounds; i++ {
		w, cp := measure(plain)
		pw, pc = append(pw, w), append(pc, cp)
		w, cp = measure(limited)
		lw, lc = append(lw, w), append(lc, cp)
	}
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds()) / 1e3
	}
	b.ReportMetric(med(pw), "unlimited-µs/call")
	b.ReportMetric(med(lw), "limited-µs/call")
	b.ReportMetric(med(pc), "unlimited-redis-cpu-µs/call")
	b.ReportMetric(med(lc), "limited-redis-cpu-µs/call")
	takes, err := e.client.ZCard(ctx, limited.keys.rate()).Result()
	if err != nil || takes == 0 {
		b.Fatalf("log of takes: %d, %v", takes, err)
	}
	b.ReportMetric(float64(e.keyMemory(limited.keys.rate()))/float64(takes), "log-bytes/take")
	b.ReportMetric(float64(takes), "log-takes")
}
