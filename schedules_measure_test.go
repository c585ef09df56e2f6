package redq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestScheduleMeasure measures what docs/performance.md reports for
// schedules: how late ticks reach a consumer with 10,000 schedules, and
// Redis memory per schedule. It runs only with REDQ_SCHEDULES_MEASURE=1
// (it takes about a minute), on the real redis-server:
//
//	REDQ_SCHEDULES_MEASURE=1 go test -run TestScheduleMeasure -v -count=1 .
//
// REDQ_SCHEDULES_N (default 10000), REDQ_SCHEDULES_LOOPS (default 3),
// REDQ_SCHEDULES_SPEC (default "@every 10s") and REDQ_SCHEDULES_RUN
// (default 40s) change the workload; REDQ_SCHEDULES_STATS=1 logs Redis's
// command stats of the run.
func TestScheduleMeasure(t *testing.T) {
	if os.Getenv("REDQ_SCHEDULES_MEASURE") != "1" {
		t.Skip("a measurement: set REDQ_SCHEDULES_MEASURE=1")
	}
	n := procEnvInt("REDQ_SCHEDULES_N", 10000)
	loops := procEnvInt("REDQ_SCHEDULES_LOOPS", 3)
	run := procEnvDuration("REDQ_SCHEDULES_RUN", 40*time.Second)
	spec := os.Getenv("REDQ_SCHEDULES_SPEC")
	if spec == "" {
		spec = "@every 10s"
	}
	b := backend{name: "redis", client: realClient(t)}
	ctx := context.Background()
	ns := namespace()
	admin := openT(t, b, "admin", ns)
	s := openSchedules(t, admin, "measure")
	q := openQueue(t, admin, "measure")

	usedMemory := func() int64 {
		info := b.client.Info(ctx, "memory").Val()
		m := regexp.MustCompile(`used_memory:(\d+)`).FindStringSubmatch(info)
		v, _ := strconv.ParseInt(m[1], 10, 64)
		return v
	}
	before := usedMemory()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				mustSchedule(t, s, fmt.Sprintf("report-%06d", i), spec, `{"report":"sales","region":"emea"}`)
			}
		}()
	}
	wg.Wait()
	t.Logf("upserted %d schedules in %v (%.0f a second)", n, time.Since(start).Round(time.Millisecond), float64(n)/time.Since(start).Seconds())
	after := usedMemory()
	var keysBytes int64
	keys, _ := b.client.Keys(ctx, s.q.keys.prefix+":*").Result()
	for _, k := range keys {
		keysBytes += b.client.MemoryUsage(ctx, k, 0).Val()
	}
	t.Logf("memory: used_memory grew %d bytes, %.0f per schedule; MEMORY USAGE of the set's %d keys %d bytes, %.0f per schedule",
		after-before, float64(after-before)/float64(n), len(keys), keysBytes, float64(keysBytes)/float64(n))

	b.client.ConfigResetStat(ctx)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := 0; i < loops; i++ {
		c := openT(t, b, fmt.Sprintf("loop%d", i), ns)
		ls := openSchedules(t, c, "measure")
		wg.Add(1)
		go func() { defer wg.Done(); _ = ls.Run(runCtx) }()
	}
	var late []time.Duration
	var mu sync.Mutex
	stop := time.Now().Add(run)
	var cwg sync.WaitGroup
	for w := 0; w < 4; w++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for time.Now().Before(stop) {
				ds, err := q.TakeBatch(ctx, 500, 200*time.Millisecond)
				if errors.Is(err, ErrorTimeout) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				now := time.Now()
				mu.Lock()
				for _, d := range ds {
					tick, _ := time.Parse(time.RFC3339, d.Header().Get(HeaderScheduleTick))
					late = append(late, now.Sub(tick))
				}
				mu.Unlock()
				ds.AckContext(ctx)
			}
		}()
	}
	cwg.Wait()
	cancel()
	wg.Wait()
	if os.Getenv("REDQ_SCHEDULES_STATS") == "1" {
		t.Log(b.client.Info(ctx, "commandstats").Val())
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	if len(late) == 0 {
		t.Fatal("no tick arrived")
	}
	pct := func(p float64) time.Duration { return late[int(p*float64(len(late)-1))].Round(100 * time.Microsecond) }
	t.Logf("%d schedules %q, %d loops, %v: %d ticks, %.0f a second; lateness (tick to a consumer's take) p50 %v p90 %v p99 %v max %v",
		n, spec, loops, run, len(late), float64(len(late))/run.Seconds(), pct(0.5), pct(0.9), pct(0.99), late[len(late)-1].Round(100*time.Microsecond))
}
