package main

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// scheduler is what a system offers for the scheduling workloads (delayed
// deliveries and leases). Only redq implements it: the peers'
// schedulers work so differently (asynq moves due tasks on a 1 s tick,
// the Streams and list loops have none) that a row would compare designs,
// not costs. The sched workloads list redq alone; any other system given
// one reports errNotMeasured.
//
// Like the system methods, each one checks its own work (every delivery
// consumed exactly once, the queue left as expected) and returns an error
// otherwise; durations exclude filling.
type scheduler interface {
	// Lateness starts cfg.Consumers consumers, then publishes cfg.N
	// deliveries, delivery i with a delay of (i+1)·cfg.Spread/cfg.N
	// (whole ms), and returns for each the time from its due time to the
	// consumer receiving it. The due time is the start of the publish call
	// plus the delay, by this process's clock.
	Lateness(ctx context.Context, e *env, cfg latenessConfig) ([]time.Duration, error)

	// HalfDelayed is EndToEnd (single consumers) with half the deliveries
	// published with a delay of 1–100 ms and half without.
	HalfDelayed(ctx context.Context, e *env, cfg e2eConfig) (time.Duration, error)

	// PrefetchDelayed fills a queue with delayed deliveries due a day
	// ahead and k ready ones, then times 10 consumers consuming and acking
	// the k. The delayed ones must still be there afterwards.
	PrefetchDelayed(ctx context.Context, e *env, delayed, k int) (time.Duration, error)

	// ExpiredLeases leaves n deliveries taken (with a time to run) by a
	// live connection that never acks them, waits until every lease ran
	// out, and times one cleaner run returning them to ready.
	ExpiredLeases(ctx context.Context, e *env, n int) (time.Duration, error)
}

// latenessConfig describes a lateness run.
type latenessConfig struct {
	N           int           // deliveries
	Spread      time.Duration // the largest delay; delays are spread evenly up to it
	Publishers  int           // goroutines publishing, in order of delay
	Consumers   int
	Prefetch    int
	PayloadSize int
}

// spreadDelay is the delay of delivery i of n spread over spread: (i+1)/n
// of it, in whole milliseconds, at least 1 ms.
func spreadDelay(i, n int, spread time.Duration) time.Duration {
	ms := int64(i+1) * spread.Milliseconds() / int64(max(n, 1))
	return time.Duration(max(ms, 1)) * time.Millisecond
}

// schedulerOf returns s as a scheduler, or errNotMeasured.
func schedulerOf(s system) (scheduler, error) {
	sc, ok := s.(scheduler)
	if !ok {
		return nil, fmt.Errorf("%s: no scheduling workloads: %w", s.Name(), errNotMeasured)
	}
	return sc, nil
}

// schedWorkloads returns the scheduling workloads (redq only), sized from
// z like the others: lateness of n/10 deliveries spread over 10 s (at least
// 1 s, shorter for a small n), end-to-end with n deliveries half delayed,
// the cost of taking n/10 ready deliveries with 0 and with 10n delayed
// ones waiting, and the cleaner returning n expired leases.
func schedWorkloads(z sizes) []workload {
	n := z.n
	redqOnly := []string{"redq"}
	late := latenessConfig{
		N:          z.scaled(1, 10, 100),
		Spread:     max(time.Second, time.Duration(float64(10*time.Second)*float64(n)/100_000)),
		Publishers: 4, Consumers: 10, Prefetch: 1000, PayloadSize: 100,
	}
	half := e2eConfig{N: n, Consumers: 10, Prefetch: 1000, PayloadSize: 100}
	k, delayed := z.scaled(1, 10, 100), z.scaled(10, 1, 1000)
	return []workload{
		{
			name: "sched/lateness",
			about: fmt.Sprintf("%d deliveries with delays spread evenly over %s, %d consumers; consumer receipt − due time (publish call + delay, client clock)",
				late.N, late.Spread, late.Consumers),
			metrics: []metric{
				{"p50 lateness", "µs", lowerIsBetter}, {"p99 lateness", "µs", lowerIsBetter}, {"max lateness", "µs", lowerIsBetter},
			},
			systems: redqOnly,
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				sc, err := schedulerOf(s)
				if err != nil {
					return nil, err
				}
				lat, err := sc.Lateness(ctx, e, late)
				if err != nil {
					return nil, err
				}
				if len(lat) == 0 {
					return nil, fmt.Errorf("no lateness samples")
				}
				return []float64{micros(percentile(lat, 0.50)), micros(percentile(lat, 0.99)), micros(slices.Max(lat))}, nil
			},
		},
		{
			name: "sched/e2e-half-delayed",
			about: fmt.Sprintf("as e2e/10-consumers: consume and ack %d pre-filled deliveries (%s), half of them published with a delay of 1–100 ms",
				half.N, e2eShape(half)),
			metrics: []metric{rate},
			systems: redqOnly,
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				sc, err := schedulerOf(s)
				if err != nil {
					return nil, err
				}
				d, err := sc.HalfDelayed(ctx, e, half)
				return []float64{float64(half.N) / d.Seconds()}, err
			},
		},
		{
			name:  "sched/prefetch-" + count(delayed) + "-delayed",
			about: fmt.Sprintf("consume and ack %d ready deliveries, 10 consumers, prefetch 1000: with none and with %d delayed ones due in a day", k, delayed),
			metrics: []metric{
				{"cost, 0 delayed", "µs/delivery", lowerIsBetter},
				{"cost, " + count(delayed) + " delayed", "µs/delivery", lowerIsBetter},
			},
			systems: redqOnly,
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				sc, err := schedulerOf(s)
				if err != nil {
					return nil, err
				}
				var out []float64
				for _, waiting := range []int{0, delayed} {
					d, err := sc.PrefetchDelayed(ctx, e, waiting, k)
					if err != nil {
						return nil, fmt.Errorf("with %d delayed: %w", waiting, err)
					}
					out = append(out, micros(d)/float64(k))
				}
				return out, nil
			},
		},
		{
			name:    "sched/cleaner-" + count(n) + "-leases",
			about:   fmt.Sprintf("one cleaner run returning %d deliveries whose lease (TTR) ran out, held by a live connection", n),
			metrics: []metric{seconds},
			systems: redqOnly,
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				sc, err := schedulerOf(s)
				if err != nil {
					return nil, err
				}
				d, err := sc.ExpiredLeases(ctx, e, n)
				return []float64{d.Seconds()}, err
			},
		},
	}
}
