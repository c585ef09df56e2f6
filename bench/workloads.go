package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"
)

// metric is one number a workload reports.
type metric struct {
	name   string
	unit   string
	better Direction
}

var (
	rate        = metric{"rate", "deliveries/s", higherIsBetter}
	perDelivery = metric{"cost", "µs/delivery", lowerIsBetter}
	seconds     = metric{"time", "s", lowerIsBetter}
	// redisCPUPer is the Redis server's CPU time in the timed part per
	// delivery (see redisCPU): what the work costs Redis, whatever the
	// client does meanwhile.
	redisCPUPer = metric{"Redis CPU", "µs/delivery", lowerIsBetter}
)

// workload is one measurement, run for each of its systems in turn.
type workload struct {
	name    string
	about   string   // one line for -list
	metrics []metric // what run returns, in this order
	// systems lists which of the systems take part, by name prefix
	// ("asynq" matches every asynq variant); nil means all of them
	// except the variants that only matter for latency.
	systems []string
	run     func(ctx context.Context, e *env, s system) ([]float64, error)
}

// sizes are the workload sizes derived from -n (default 100,000), so that
// a smoke run with a small -n shrinks everything alike.
type sizes struct {
	n int
}

// scaled returns n*num/den, at least lo.
func (z sizes) scaled(num, den, lo int) int { return max(z.n*num/den, lo) }

// workloads returns every workload in the order they run.
func workloads(z sizes, idleSamples int, steadyRate int) []workload {
	perSec := func(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }
	publish := func(name string, n, goroutines, perCall int) workload {
		return workload{
			name:    name,
			about:   fmt.Sprintf("publish %d payloads, %d per call, from %d goroutines", n, perCall, goroutines),
			metrics: []metric{rate, redisCPUPer},
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				ctx, cpu := withRedisCPU(ctx, e.admin)
				d, err := s.Publish(ctx, e, n, goroutines, perCall)
				if err != nil {
					return nil, err
				}
				c, err := cpu.per(n)
				return []float64{perSec(n, d), c}, err
			},
		}
	}
	e2e := func(name string, cfg e2eConfig, systems []string) workload {
		return workload{
			name:    name,
			about:   fmt.Sprintf("consume and ack %d pre-filled deliveries of %d B (%s)", cfg.N, cfg.PayloadSize, e2eShape(cfg)),
			metrics: []metric{rate, redisCPUPer},
			systems: systems,
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				ctx, cpu := withRedisCPU(ctx, e.admin)
				d, err := s.EndToEnd(ctx, e, cfg)
				if err != nil {
					return nil, err
				}
				c, err := cpu.per(cfg.N)
				return []float64{perSec(cfg.N, d), c}, err
			},
		}
	}
	queued := func(depth int) workload {
		k := min(depth, z.scaled(1, 10, 100))
		return workload{
			name:    "scale/queued-" + count(depth),
			about:   fmt.Sprintf("consume and ack %d of %d queued deliveries, 10 consumers", k, depth),
			metrics: []metric{perDelivery},
			systems: []string{"redq", "streams", "list"},
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				d, err := s.Queued(ctx, e, depth, k)
				return []float64{micros(d) / float64(k)}, err
			},
		}
	}
	unacked := func(held int) workload {
		k := z.scaled(1, 10, 100)
		return workload{
			name:    "scale/unacked-" + count(held),
			about:   fmt.Sprintf("ack %d deliveries while %d others stay unacked, 10 consumers", k, held),
			metrics: []metric{perDelivery},
			systems: []string{"redq", "streams", "list"},
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				d, err := s.Unacked(ctx, e, held, k)
				return []float64{micros(d)}, err
			},
		}
	}

	n := z.n
	steadyFor := time.Duration(float64(5*time.Second) * float64(n) / 100_000)
	steadyFor = max(steadyFor, 200*time.Millisecond)
	steady := steadyConfig{
		Rate: steadyRate, Duration: steadyFor, Producers: 4, Consumers: 10, Prefetch: 1000,
		Payload: 100, DrainLimit: 30 * time.Second,
	}
	asynqIdleSamples := min(idleSamples, 20, z.scaled(1, 1000, 3))
	queues := z.scaled(1, 100, 10)
	big := z.scaled(1, 100, 20)
	return append([]workload{
		publish("publish/1-goroutine", z.scaled(1, 10, 100), 1, 1),
		publish("publish/8-goroutines", z.scaled(1, 4, 100), 8, 1),
		publish("publish/32-goroutines", z.scaled(1, 4, 100), 32, 1),
		publish("publish/100-per-call", n, 1, 100),
		e2e("e2e/10-consumers", e2eConfig{N: n, Consumers: 10, Prefetch: 1000, PayloadSize: 100}, nil),
		e2e("e2e/batch-100", e2eConfig{N: n, Batch: 100, Prefetch: 1000, PayloadSize: 100}, nil),
		{
			name: "e2e/steady",
			about: fmt.Sprintf("publish %d/s for %s from %d producers while %d consumers ack; publish→ack latency",
				steady.Rate, steady.Duration, steady.Producers, steady.Consumers),
			metrics: []metric{rate, {"p50 latency", "µs", lowerIsBetter}, {"p99 latency", "µs", lowerIsBetter}, redisCPUPer},
			systems: []string{"redq", "asynq", "streams", "list"},
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				ctx, cpu := withRedisCPU(ctx, e.admin)
				r, err := s.Steady(ctx, e, steady)
				if err != nil {
					return nil, err
				}
				if len(r.Latencies) == 0 || r.Elapsed <= 0 {
					return nil, fmt.Errorf("steady run consumed nothing")
				}
				c, err := cpu.per(r.Consumed)
				if err != nil {
					return nil, err
				}
				return []float64{perSec(r.Consumed, r.Elapsed), micros(percentile(r.Latencies, 0.50)), micros(percentile(r.Latencies, 0.99)), c}, nil
			},
		},
		{
			name: "idle/pickup",
			about: fmt.Sprintf("%d deliveries (asynq with its default 1 s check: %d) published 5 ms apart into an idle queue; publish→consumer latency",
				idleSamples, asynqIdleSamples),
			metrics: []metric{
				{"p50 latency", "µs", lowerIsBetter}, {"p99 latency", "µs", lowerIsBetter}, {"max latency", "µs", lowerIsBetter},
			},
			systems: []string{"redq", "redq (poll 30s)", "asynq", "asynq (check 10ms)", "streams", "list"},
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				samples := idleSamples
				if s.Name() == "asynq" {
					// asynq's default check interval is 1 s: each sample
					// waits up to about that long, so fewer samples keep
					// the run bounded (the about line says so).
					samples = asynqIdleSamples
				}
				lat, err := s.Idle(ctx, e, samples, 5*time.Millisecond)
				if err != nil {
					return nil, err
				}
				if len(lat) == 0 {
					return nil, fmt.Errorf("no latency samples")
				}
				return []float64{micros(percentile(lat, 0.50)), micros(percentile(lat, 0.99)), micros(slices.Max(lat))}, nil
			},
		},
		queued(z.scaled(1, 100, 10)),
		queued(n),
		queued(z.scaled(10, 1, 1000)),
		unacked(z.scaled(1, 10_000, 1)),
		unacked(z.scaled(1, 100, 10)),
		unacked(z.scaled(1, 10, 100)),
		{
			name:    fmt.Sprintf("scale/%d-queues", queues),
			about:   fmt.Sprintf("%d queues with 10 deliveries each, one consumer per queue", queues),
			metrics: []metric{perDelivery, {"connections", "opened", lowerIsBetter}},
			systems: []string{"redq", "asynq", "streams", "list"},
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				before, err := connectionsReceived(ctx, e.admin)
				if err != nil {
					return nil, err
				}
				d, err := s.ManyQueues(ctx, e, queues, 10)
				if err != nil {
					return nil, err
				}
				after, err := connectionsReceived(ctx, e.admin)
				if err != nil {
					return nil, err
				}
				return []float64{micros(d) / float64(queues*10), float64(after - before)}, nil
			},
		},
		e2e("scale/64KiB-payloads", e2eConfig{N: big, Consumers: 10, Prefetch: 1000, PayloadSize: 64 << 10},
			[]string{"redq", "asynq", "streams", "list"}),
		{
			name:    "recovery/cleaner",
			about:   fmt.Sprintf("return %d unacked deliveries of a dead consumer to ready", n),
			metrics: []metric{seconds},
			systems: []string{"redq", "streams", "list"},
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				d, err := s.Recover(ctx, e, n)
				return []float64{d.Seconds()}, err
			},
		},
		{
			name:    "memory/ready",
			about:   fmt.Sprintf("Redis used_memory growth per ready delivery, %d deliveries of %d B", n, 100),
			metrics: []metric{{"bytes", "B/delivery", lowerIsBetter}},
			systems: []string{"redq", "asynq", "streams", "list"},
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				b, err := s.Memory(ctx, e, n)
				return []float64{b}, err
			},
		},
	}, slices.Concat(schedWorkloads(z), keyedWorkloads(z))...)
}

// e2eShape describes who consumes in an end-to-end run.
func e2eShape(cfg e2eConfig) string {
	if cfg.Batch > 0 {
		return fmt.Sprintf("one batch consumer of %d", cfg.Batch)
	}
	return fmt.Sprintf("%d consumers, prefetch %d", cfg.Consumers, cfg.Prefetch)
}

// takesPart reports whether system name runs workload w.
func (w workload) takesPart(name string) bool {
	if w.systems == nil {
		// Variants that only change idle behaviour add nothing elsewhere,
		// the round baseline is no work queue, and the timer baseline runs
		// only the timer workloads.
		return name != "redq (poll 30s)" && name != "asynq (check 10ms)" && name != zsetRoundName && name != "poll-timers"
	}
	return slices.Contains(w.systems, name)
}

// count formats a size for a workload name: 1k, 100k, 1M.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// micros returns d in microseconds.
func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// percentile returns the p-quantile (0 < p ≤ 1) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
