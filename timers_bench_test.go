package redq

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkTimerFires handles a backlog of timers, all due, with 2
// connections × 2 goroutines, one fire per Next and Fire.Ack ("next") or
// up to 100 per NextBatch and Fires.Ack ("batch"), and reports what a fire
// costs: script calls (EVALSHA), Redis's CPU and this process's CPU. One
// workload per b.N iteration: run it with -benchtime=1x. It measures the
// cost per fire, which other load on the host changes little, where the
// bench's timers rows measure rates and lateness.
func BenchmarkTimerFires(b *testing.B) {
	for _, batch := range []int64{0, 100} {
		name := "next"
		if batch > 0 {
			name = "batch"
		}
		b.Run(name, func(b *testing.B) {
			n := benchWorkload() / 5
			e := newBenchEnv(b)
			ctx := context.Background()
			var total time.Duration
			var calls, redisCPU, cpu float64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				var sets []Timers
				for c := 0; c < 2; c++ {
					sets = append(sets, openTimers(b, e.open(fmt.Sprintf("c%d", c)), "fires"))
				}
				err := parallelRange(8, n, func(k int) error {
					return sets[0].Set(ctx, "k"+strconv.Itoa(k), 0)
				})
				if err != nil {
					b.Fatal(err)
				}
				calls0, redis0, cpu0 := evalshaCalls(b, e), e.serverCPU(), processCPU()
				b.StartTimer()
				start := time.Now()
				if err := handleFires(ctx, sets, n, batch); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				b.StopTimer()
				calls += evalshaCalls(b, e) - calls0
				redisCPU += float64(e.serverCPU() - redis0)
				cpu += float64(processCPU() - cpu0)
				e.dropKeys()
			}
			fires := float64(n * b.N)
			b.ReportMetric(fires/total.Seconds(), "fires/s")
			b.ReportMetric(calls/fires, "script-calls/fire")
			b.ReportMetric(redisCPU/fires/1e3, "redis-cpu-µs/fire")
			b.ReportMetric(cpu/fires/1e3, "client-cpu-µs/fire")
		})
	}
}

// parallelRange runs f(0) … f(n-1) from g goroutines; the first error.
func parallelRange(g, n int, f func(k int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, g)
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := int(next.Add(1) - 1); k < n; k = int(next.Add(1) - 1) {
				if err := f(k); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// handleFires takes and acks n fires from 2 goroutines per timer set, each
// fire once; one per Next, or up to batch per NextBatch.
func handleFires(ctx context.Context, sets []Timers, n int, batch int64) error {
	var done atomic.Int64
	var mu sync.Mutex
	seen := map[string]bool{}
	var firstErr error
	var wg sync.WaitGroup
	for g := 0; g < 2*len(sets); g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := sets[g%len(sets)]
			for done.Load() < int64(n) {
				var fs Fires
				var err error
				if batch > 0 {
					fs, err = ts.NextBatch(ctx, batch, 100*time.Millisecond)
				} else {
					var f Fire
					if f, err = ts.Next(ctx, 100*time.Millisecond); err == nil {
						fs = Fires{f}
					}
				}
				if errors.Is(err, ErrorTimeout) {
					continue
				}
				if err == nil {
					if errs := fs.Ack(ctx); len(errs) > 0 {
						err = fmt.Errorf("ack: %v", errs)
					}
				}
				mu.Lock()
				for _, f := range fs {
					if seen[f.Key()] && err == nil {
						err = fmt.Errorf("%s fired twice", f.Key())
					}
					seen[f.Key()] = true
				}
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				if err != nil {
					done.Store(int64(n))
					return
				}
				done.Add(int64(len(fs)))
			}
		}()
	}
	wg.Wait()
	return firstErr
}

var evalshaStat = regexp.MustCompile(`cmdstat_evalsha:calls=(\d+)`)

// evalshaCalls is the number of EVALSHA calls Redis counted so far.
func evalshaCalls(b *testing.B, e *benchEnv) float64 {
	b.Helper()
	info, err := e.client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	m := evalshaStat.FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
