package redq

// Benchmarks of the engine against the real redis-server that TestMain
// starts (they skip when there is none). Each run works in a namespace of
// its own and deletes that namespace's keys when it ends. The figures that
// matter are reported with b.ReportMetric; .ci/bench runs them all and
// prints medians.
//
// The end-to-end, latency, cleaner and memory benchmarks process one whole
// workload per b.N iteration: run them with -benchtime=1x. With -short the
// 100k workloads shrink to 2k so CI can smoke them quickly.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	benchPayloadSize  = 100
	benchWorkloadSize = 100_000
	benchShortSize    = 2_000
	benchFillBatch    = 1000
	benchWaitLimit    = 5 * time.Minute
)

// benchWorkload is the size of the 100k workloads (2k with -short).
func benchWorkload() int {
	if testing.Short() {
		return benchShortSize
	}
	return benchWorkloadSize
}

// benchPayload returns a distinct-looking payload of exactly 100 bytes.
func benchPayload(i int) []byte {
	p := bytes.Repeat([]byte{'x'}, benchPayloadSize)
	copy(p, strconv.Itoa(i))
	return p
}

// benchPayloads returns n payloads of 100 bytes.
func benchPayloads(n int) [][]byte {
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = benchPayload(i)
	}
	return ps
}

// benchEnv is one benchmark run's namespace on the real redis-server.
type benchEnv struct {
	b      *testing.B
	client *redis.Client
	ns     string

	cpu, redisCPU time.Duration // at resetStats
}

// newBenchEnv gives the run a namespace of its own whose keys are deleted
// when the run ends.
func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	client := realClient(b)
	e := &benchEnv{b: b, client: client, ns: fmt.Sprintf("bench%d-%d", os.Getpid(), nsCounter.Add(1))}
	b.Cleanup(e.dropKeys)
	return e
}

// open opens a connection in the run's namespace. Callers stop it; a
// cleanup stops it too in case the run fails first.
func (e *benchEnv) open(tag string, opts ...Option) *redisConnection {
	e.b.Helper()
	c, err := openConn(e.client, tag, nil, append([]Option{WithNamespace(e.ns)}, opts...)...)
	if err != nil {
		e.b.Fatal(err)
	}
	e.b.Cleanup(func() { <-c.StopAllConsuming() })
	return c
}

// dropKeys deletes every key of the namespace (the global keys "{ns}:..."
// and the queue keys "ns:{queue}:..."). DEL, not UNLINK, so that memory is
// given back before the next measurement starts.
func (e *benchEnv) dropKeys() {
	ctx := context.Background()
	for _, pattern := range []string{e.ns + ":*", "{" + e.ns + "}:*"} {
		var keys []string
		iter := e.client.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			e.b.Errorf("scan %s: %v", pattern, err)
			return
		}
		for len(keys) > 0 {
			n := min(len(keys), 1000)
			if err := e.client.Del(ctx, keys[:n]...).Err(); err != nil {
				e.b.Errorf("delete keys of %s: %v", e.ns, err)
				return
			}
			keys = keys[n:]
		}
	}
}

// fill publishes n 100-byte payloads in PublishBytes calls of 1000.
func (e *benchEnv) fill(q *redisQueue, n int) {
	e.b.Helper()
	payloads := benchPayloads(benchFillBatch)
	for done := 0; done < n; {
		k := min(benchFillBatch, n-done)
		if err := q.PublishBytes(payloads[:k]...); err != nil {
			e.b.Fatal(err)
		}
		done += k
	}
}

func (e *benchEnv) llen(key string) int64 {
	e.b.Helper()
	n, err := e.client.LLen(context.Background(), key).Result()
	if err != nil {
		e.b.Fatal(err)
	}
	return n
}

func (e *benchEnv) hlen(key string) int64 {
	e.b.Helper()
	n, err := e.client.HLen(context.Background(), key).Result()
	if err != nil {
		e.b.Fatal(err)
	}
	return n
}

// usedMemory reads used_memory from INFO memory.
func (e *benchEnv) usedMemory() int64 {
	e.b.Helper()
	info, err := e.client.Info(context.Background(), "memory").Result()
	if err != nil {
		e.b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				e.b.Fatal(err)
			}
			return n
		}
	}
	e.b.Fatal("INFO memory has no used_memory")
	return 0
}

// keyMemory reads MEMORY USAGE of a key, counting every element.
func (e *benchEnv) keyMemory(key string) int64 {
	e.b.Helper()
	n, err := e.client.MemoryUsage(context.Background(), key, 0).Result()
	if err != nil {
		e.b.Fatal(err)
	}
	return n
}

// benchStatsEnv turns on a report of what a timed section cost: Redis
// INFO commandstats and the slow log, and the CPU time of this process and
// of redis-server. It is off by default, so benchmarks print nothing.
const benchStatsEnv = "REDQ_BENCH_STATS"

// resetStats starts a fresh INFO commandstats when REDQ_BENCH_STATS=1.
func (e *benchEnv) resetStats() {
	if os.Getenv(benchStatsEnv) != "1" {
		return
	}
	ctx := context.Background()
	if err := e.client.ConfigResetStat(ctx).Err(); err != nil {
		e.b.Fatal(err)
	}
	if err := e.client.SlowLogReset(ctx).Err(); err != nil {
		e.b.Fatal(err)
	}
	e.cpu, e.redisCPU = processCPU(), e.serverCPU()
}

// logStats logs what Redis and this process did since resetStats when
// REDQ_BENCH_STATS=1.
func (e *benchEnv) logStats() {
	if os.Getenv(benchStatsEnv) != "1" {
		return
	}
	ctx := context.Background()
	e.b.Logf("cpu: this process %v, redis-server %v", processCPU()-e.cpu, e.serverCPU()-e.redisCPU)
	info, err := e.client.Info(ctx, "commandstats").Result()
	if err != nil {
		e.b.Fatal(err)
	}
	e.b.Logf("%s", info)
	slow, err := e.client.SlowLogGet(ctx, 10).Result()
	if err != nil {
		e.b.Fatal(err)
	}
	for _, l := range slow {
		e.b.Logf("slowlog %s %.120v", l.Duration, l.Args)
	}
}

// processCPU is the user and system CPU time of this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is used_cpu_user plus used_cpu_sys of redis-server.
func (e *benchEnv) serverCPU() time.Duration {
	info, err := e.client.Info(context.Background(), "cpu").Result()
	if err != nil {
		e.b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		for _, field := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, field); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					e.b.Fatal(err)
				}
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}

// reportRate reports deliveries/s and ns/delivery for n deliveries in d.
func reportRate(b *testing.B, n int, d time.Duration) {
	if n == 0 || d <= 0 {
		return
	}
	b.ReportMetric(float64(n)/d.Seconds(), "deliveries/s")
	b.ReportMetric(float64(d.Nanoseconds())/float64(n), "ns/delivery")
}

// BenchmarkPublish measures publishing 100-byte payloads: one payload per
// Publish call from one and from eight goroutines, and 100 payloads per
// PublishBytes call.
func BenchmarkPublish(b *testing.B) {
	payload := string(benchPayload(0))
	b.Run("single-1goroutine", func(b *testing.B) {
		e := newBenchEnv(b)
		q := openQueue(b, e.open("pub"), "publish")
		b.ReportAllocs()
		e.resetStats()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := q.Publish(payload); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		e.logStats()
		reportRate(b, b.N, b.Elapsed())
	})
	// Many goroutines publishing one payload each (request handlers):
	// concurrent calls are coalesced into shared LPUSHes.
	for _, goroutines := range []int{8, 64} {
		b.Run(fmt.Sprintf("single-%dgoroutines", goroutines), func(b *testing.B) {
			e := newBenchEnv(b)
			q := openQueue(b, e.open("pub"), "publish")
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ReportAllocs()
			e.resetStats()
			b.ResetTimer()
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if err := q.Publish(payload); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			e.logStats()
			reportRate(b, b.N, b.Elapsed())
		})
	}
	b.Run("batch100", func(b *testing.B) {
		e := newBenchEnv(b)
		q := openQueue(b, e.open("pub"), "publish")
		payloads := benchPayloads(100)
		b.ReportAllocs()
		e.resetStats()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := q.PublishBytes(payloads...); err != nil {
				b.Fatal(err)
			}
			if i%1000 == 999 {
				// Keep Redis small; LPUSH costs the same at any length.
				b.StopTimer()
				if _, err := q.PurgeReady(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		}
		b.StopTimer()
		e.logStats()
		reportRate(b, 100*b.N, b.Elapsed())
	})
}

// BenchmarkEndToEnd measures draining a queue prefilled with 100k
// deliveries (untimed) until every delivery is acked: ten consumers that
// Ack one by one, or one batch consumer that acks batches of 100.
func BenchmarkEndToEnd(b *testing.B) {
	b.Run("consumers10-prefetch1000", func(b *testing.B) {
		benchEndToEnd(b, func(q *redisQueue, ack func(n int, err error)) {
			for i := 0; i < 10; i++ {
				if _, err := q.AddConsumerFunc("e2e", func(dd Delivery) { d := dd.(Message); ack(1, d.Ack()) }); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("batch100", func(b *testing.B) {
		benchEndToEnd(b, func(q *redisQueue, ack func(n int, err error)) {
			_, err := q.AddBatchConsumerFunc("e2e", 100, 10*time.Millisecond, func(ds Deliveries) {
				var err error
				if errs := ds.Ack(); len(errs) != 0 {
					err = fmt.Errorf("batch ack failed for %d of %d deliveries: %v", len(errs), len(ds), errs)
				}
				ack(len(ds), err)
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	})
}

// benchEndToEnd runs the end-to-end workload once per b.N iteration;
// addConsumers adds consumers that call ack after settling deliveries.
func benchEndToEnd(b *testing.B, addConsumers func(q *redisQueue, ack func(n int, err error))) {
	b.StopTimer()
	n := benchWorkload()
	e := newBenchEnv(b)
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := e.open("e2e")
		q := openQueue(b, c, "e2e")
		e.fill(q, n)
		var acked atomic.Int64
		var failed atomic.Int64
		var firstErr atomic.Value
		done := make(chan struct{})
		ack := func(k int, err error) {
			if err != nil {
				if failed.Add(1) == 1 {
					firstErr.Store(err)
				}
			}
			if acked.Add(int64(k)) == int64(n) {
				close(done)
			}
		}

		e.resetStats()
		b.StartTimer()
		start := time.Now()
		if err := q.StartConsuming(1000, time.Second); err != nil {
			b.Fatal(err)
		}
		addConsumers(q, ack)
		select {
		case <-done:
		case <-time.After(benchWaitLimit):
			b.Fatalf("acked %d of %d deliveries in %s", acked.Load(), n, benchWaitLimit)
		}
		total += time.Since(start)
		b.StopTimer()
		e.logStats()

		<-c.StopAllConsuming()
		if f := failed.Load(); f > 0 {
			b.Fatalf("%d acks failed, the first: %v", f, firstErr.Load())
		}
		if r, u := e.llen(q.keys.ready), e.hlen(q.unackedKey); r != 0 || u != 0 {
			b.Fatalf("after acking all: ready %d, unacked %d, want 0 and 0", r, u)
		}
		e.dropKeys()
	}
	reportRate(b, n*b.N, total)
}

// BenchmarkIdleLatency measures how long a delivery published into an idle
// queue takes to reach the consumer (publish start to Consume called) with
// pollDuration 1s: the blocking wait must make this about a round trip or
// two, not a poll interval.
func BenchmarkIdleLatency(b *testing.B) {
	samples := 200
	if testing.Short() {
		samples = 50
	}
	e := newBenchEnv(b)
	c := e.open("latency")
	q := openQueue(b, c, "latency")
	if err := q.StartConsuming(1, time.Second); err != nil {
		b.Fatal(err)
	}
	consumed := make(chan time.Time, 1)
	_, err := q.AddConsumerFunc("latency", func(dd Delivery) {
		d := dd.(Message)
		at := time.Now()
		if err := d.Ack(); err != nil {
			b.Error(err)
		}
		consumed <- at
	})
	if err != nil {
		b.Fatal(err)
	}
	payload := string(benchPayload(0))
	var lat []time.Duration
	e.resetStats()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for s := -2; s < samples; s++ { // two warm-up deliveries first
			time.Sleep(5 * time.Millisecond) // let the consumer go idle, blocked on Redis
			start := time.Now()
			if err := q.Publish(payload); err != nil {
				b.Fatal(err)
			}
			select {
			case at := <-consumed:
				if s >= 0 {
					lat = append(lat, at.Sub(start))
				}
			case <-time.After(10 * time.Second):
				b.Fatal("delivery not consumed within 10s")
			}
		}
	}
	b.StopTimer()
	e.logStats()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		i := int(p*float64(len(lat))+0.999999) - 1
		return float64(lat[max(i, 0)].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(0.50), "p50-us")
	b.ReportMetric(pct(0.99), "p99-us")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds())/1e3, "max-us")
}

// BenchmarkCleaner100k measures one Clean returning the 100k unacked
// deliveries of a dead connection to ready.
//
// The dead connection takes the deliveries into its unacked storage
// exactly as its fetch loop would (registered for the queue, the fetch
// script in chunks of 1000) but without a fetch loop, so nothing is handed
// back on stop. It then dies: its
// heartbeat loop is stopped and the heartbeat key deleted, as when a
// process is killed and the key expires.
func BenchmarkCleaner100k(b *testing.B) {
	b.StopTimer()
	n := benchWorkload()
	e := newBenchEnv(b)
	ctx := context.Background()
	var total time.Duration
	var unacked float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dead := e.open("dead")
		q := openQueue(b, dead, "clean")
		e.fill(q, n)
		take(b, q, n) // registered, fetch script in chunks of 1000, no fetch loop
		if r, u := e.llen(q.keys.ready), e.hlen(q.unackedKey); r != 0 || u != int64(n) {
			b.Fatalf("before cleaning: ready %d, unacked %d, want 0 and %d", r, u, n)
		}
		unacked += float64(e.keyMemory(q.unackedKey)) / float64(n)
		dead.hbCancel()
		<-dead.hbDone
		if err := e.client.Del(ctx, dead.keys.heartbeat(dead.Name())).Err(); err != nil {
			b.Fatal(err)
		}
		other := e.open("cleaner")

		e.resetStats()
		b.StartTimer()
		start := time.Now()
		got, err := NewCleaner(other).Clean()
		total += time.Since(start)
		b.StopTimer()
		e.logStats()

		if err != nil {
			b.Fatal(err)
		}
		if got != int64(n) {
			b.Fatalf("Clean returned %d, want %d", got, n)
		}
		if r, u := e.llen(q.keys.ready), e.hlen(q.unackedKey); r != int64(n) || u != 0 {
			b.Fatalf("after cleaning: ready %d, unacked %d, want %d and 0", r, u, n)
		}
		<-dead.StopAllConsuming()
		<-other.StopAllConsuming()
		e.dropKeys()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/clean")
	b.ReportMetric(unacked/float64(b.N), "unacked-key-bytes/delivery")
	reportRate(b, n*b.N, total)
}

// BenchmarkMemoryPerReady measures what Redis holds per ready delivery of
// 100 bytes (the growth of used_memory over 100k deliveries), next to a
// plain LPUSH of 100k raw 100-byte strings. key-bytes are MEMORY USAGE of
// the list alone, which no other allocation disturbs.
func BenchmarkMemoryPerReady(b *testing.B) {
	n := benchWorkload()
	e := newBenchEnv(b)
	ctx := context.Background()
	raw := make([]any, benchFillBatch)
	for i := range raw {
		raw[i] = benchPayload(i)
	}
	rawKey := e.ns + ":raw"
	var env, envKey, plain, plainKey float64
	for i := 0; i < b.N; i++ {
		c := e.open("memory")
		q := openQueue(b, c, "memory")
		// Warm up the client connection first.
		if err := q.PublishBytes(benchPayload(0)); err != nil {
			b.Fatal(err)
		}
		if _, err := q.PurgeReady(); err != nil {
			b.Fatal(err)
		}

		before := e.usedMemory()
		e.fill(q, n)
		after := e.usedMemory()
		env += float64(after-before) / float64(n)
		envKey += float64(e.keyMemory(q.keys.ready)) / float64(n)
		if err := e.client.Del(ctx, q.keys.ready).Err(); err != nil {
			b.Fatal(err)
		}

		before = e.usedMemory()
		for done := 0; done < n; {
			k := min(benchFillBatch, n-done)
			if err := e.client.LPush(ctx, rawKey, raw[:k]...).Err(); err != nil {
				b.Fatal(err)
			}
			done += k
		}
		after = e.usedMemory()
		plain += float64(after-before) / float64(n)
		plainKey += float64(e.keyMemory(rawKey)) / float64(n)
		if err := e.client.Del(ctx, rawKey).Err(); err != nil {
			b.Fatal(err)
		}
		<-c.StopAllConsuming()
		e.dropKeys()
	}
	b.ReportMetric(env/float64(b.N), "bytes/delivery")
	b.ReportMetric(plain/float64(b.N), "raw-lpush-bytes/item")
	b.ReportMetric(envKey/float64(b.N), "key-bytes/delivery")
	b.ReportMetric(plainKey/float64(b.N), "raw-key-bytes/item")
}
