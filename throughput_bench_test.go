package redq

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// clusterBenchEnv turns BenchmarkThroughputSingleVsCluster on: it starts a cluster
// of its own and takes a while, so it stays out of the benchmark smoke run.
const clusterBenchEnv = "REDQ_BENCH_CLUSTER"

// BenchmarkThroughputSingleVsCluster compares the throughput of 3 queues on a
// Redis Cluster of 3 masters (no replicas, the queues on different
// masters) with the same 3 queues on a single redis-server, in the same
// run: rounds alternate between the two, and the medians are reported
// (single-deliveries/s, cluster3-deliveries/s and their ratio). A round
// publishes n 100-byte payloads round the queues from 16 goroutines (one
// Publish each, coalesced) while one connection consumes every queue with
// 10 consumers (prefetch 1000) that Ack one by one; it ends when every
// delivery is acked. Every round works in a namespace of its own.
//
//	REDQ_BENCH_CLUSTER=1 go test -run '^$' -bench ThroughputSingleVsCluster -benchtime=1x .
//
// REDQ_BENCH_CLUSTER_N (default 30000; 3000 with -short) sets n and
// REDQ_BENCH_CLUSTER_ROUNDS (default 5) the rounds of each.
func BenchmarkThroughputSingleVsCluster(b *testing.B) {
	if os.Getenv(clusterBenchEnv) == "" {
		b.Skipf("starts a Redis Cluster of its own; set %s=1 to run it", clusterBenchEnv)
	}
	n := benchEnvInt(b, "REDQ_BENCH_CLUSTER_N", 30000)
	if testing.Short() {
		n = benchEnvInt(b, "REDQ_BENCH_CLUSTER_N", 3000)
	}
	rounds := benchEnvInt(b, "REDQ_BENCH_CLUSTER_ROUNDS", 5)
	single := realClient(b)
	cl := redistest.StartCluster(b, redistest.WithReplicas(0))
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	b.Cleanup(func() { cluster.Close() })

	// Three queues on three masters.
	ctx := context.Background()
	var names []string
	seen := map[*redistest.Server]bool{}
	for k := 0; len(names) < 3; k++ {
		name := "tp-" + strconv.Itoa(k)
		m, err := cl.MasterFor(ctx, DefaultNamespace+":{"+name+"}:ready")
		if err != nil {
			b.Fatal(err)
		}
		if !seen[m] {
			seen[m] = true
			names = append(names, name)
		}
	}

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var singleRates, clusterRates []float64
		for r := 0; r < rounds; r++ {
			singleRates = append(singleRates, throughputRound(b, single, names, n))
			clusterRates = append(clusterRates, throughputRound(b, cluster, names, n))
			b.Logf("round %d: single %.0f/s, cluster3 %.0f/s", r+1, singleRates[r], clusterRates[r])
		}
		s, c := median(singleRates), median(clusterRates)
		b.ReportMetric(s, "single-deliveries/s")
		b.ReportMetric(c, "cluster3-deliveries/s")
		b.ReportMetric(c/s, "cluster3/single")
	}
}

func benchEnvInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// throughputRound publishes n payloads round the queues while consumers
// ack them, and returns the deliveries acked per second.
func throughputRound(b *testing.B, client redis.UniversalClient, names []string, n int) float64 {
	b.Helper()
	ns := WithNamespace(fmt.Sprintf("tp%d-%d", os.Getpid(), nsCounter.Add(1)))
	pub, err := openConn(client, "tp-pub", nil, ns)
	if err != nil {
		b.Fatal(err)
	}
	con, err := openConn(client, "tp-con", nil, ns)
	if err != nil {
		b.Fatal(err)
	}
	var acked, failed atomic.Int64
	var firstErr atomic.Value
	done := make(chan struct{})
	var pubQueues []Queue
	for _, name := range names {
		q := openQueue(b, con, name)
		if err := q.StartConsuming(1000, 100*time.Millisecond); err != nil {
			b.Fatal(err)
		}
		for c := 0; c < 10; c++ {
			if _, err := q.AddConsumerFunc("tp", func(d Delivery) {
				if err := d.(Message).Ack(); err != nil && failed.Add(1) == 1 {
					firstErr.Store(err)
				}
				if acked.Add(1) == int64(n) {
					close(done)
				}
			}); err != nil {
				b.Fatal(err)
			}
		}
		pubQueues = append(pubQueues, openQueue(b, pub, name))
	}
	payload := string(benchPayload(0))
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := next.Add(1) - 1; p < int64(n); p = next.Add(1) - 1 {
				if err := pubQueues[p%int64(len(pubQueues))].Publish(payload); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(benchWaitLimit):
		b.Fatalf("acked %d of %d deliveries in %s", acked.Load(), n, benchWaitLimit)
	}
	elapsed := time.Since(start)
	<-con.StopAllConsuming()
	<-pub.StopAllConsuming()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d acks failed, the first: %v", f, firstErr.Load())
	}
	return float64(n) / elapsed.Seconds()
}
