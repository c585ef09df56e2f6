package redq

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkPublishWaitReplicas measures what WithWaitReplicas(1, 1s) costs
// a publish: on a primary with one replica (both started here), rounds of
// 2000 one-payload publishes without and with the option alternate, in
// the same run, and the medians of the rounds are reported (ns per
// publish, and their ratio). Run it with -benchtime=1x.
func BenchmarkPublishWaitReplicas(b *testing.B) {
	const rounds, perRound = 7, 2000
	for _, goroutines := range []int{1, 8} {
		b.Run(fmt.Sprintf("%dgoroutines", goroutines), func(b *testing.B) {
			primary, _ := startReplicated(b)
			client := redis.NewClient(&redis.Options{Addr: primary.Addr()})
			b.Cleanup(func() { client.Close() })
			ns := namespace()
			open := func(opts ...Option) *redisQueue {
				c, err := openConn(client, "bench", nil, append(opts, ns)...)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { <-c.StopAllConsuming() })
				return openQueue(b, c, "publish")
			}
			plain, waiting := open(), open(WithWaitReplicas(1, time.Second))
			payload := string(benchPayload(0))
			round := func(q *redisQueue) time.Duration {
				var next atomic.Int64
				var wg sync.WaitGroup
				start := time.Now()
				for g := 0; g < goroutines; g++ {
					wg.Go(func() {
						for next.Add(1) <= perRound {
							if err := q.Publish(payload); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				d := time.Since(start) / perRound
				if _, err := q.PurgeReady(); err != nil {
					b.Fatal(err)
				}
				return d
			}
			var plainNs, waitNs []float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for r := 0; r < rounds; r++ {
					if r%2 == 0 {
						plainNs = append(plainNs, float64(round(plain)))
						waitNs = append(waitNs, float64(round(waiting)))
					} else {
						waitNs = append(waitNs, float64(round(waiting)))
						plainNs = append(plainNs, float64(round(plain)))
					}
				}
			}
			b.StopTimer()
			p, w := median(plainNs), median(waitNs)
			b.ReportMetric(p, "plain-ns/publish")
			b.ReportMetric(w, "wait-ns/publish")
			b.ReportMetric(w/p, "wait/plain")
		})
	}
}
