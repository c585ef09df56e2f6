package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/redq/redq"
)

// The redq side of the scheduling workloads (see scheduler).
var _ scheduler = (*redqSystem)(nil)

const (
	// redqFillWorkers publish in parallel when a scheduling run fills a
	// queue outside the clock.
	redqFillWorkers = 4
	// redqHalfChunk is how many payloads one PublishBytes call carries in
	// HalfDelayed's fill; every other call is delayed.
	redqHalfChunk = 100
	// redqShortDelays is the number of distinct delays of HalfDelayed:
	// 1, 2, …, redqShortDelays ms.
	redqShortDelays = 100
	// redqFarAhead is the delay of the deliveries that wait while others
	// are consumed in PrefetchDelayed.
	redqFarAhead = 24 * time.Hour
	// redqLeaseMargin is how long ExpiredLeases waits beyond the last
	// lease's end before it runs the cleaner.
	redqLeaseMargin = 20 * time.Millisecond
)

// redqLeaseTTR is the time to run of ExpiredLeases' n deliveries. It must
// outlast taking all n: every take also returns expired leases, so a
// lease running out while the others are still being taken would have
// its delivery taken twice (the run then fails). Taking moves about 1,000
// deliveries per few milliseconds; 1 s plus 20 µs per delivery (3 s for
// 100k) leaves room for a slow or busy machine (taking 2,000 took 155 ms
// beside race-enabled tests, where the bound was 140 ms). The time is not
// measured: the workload times the cleaner after the leases ran out.
func redqLeaseTTR(n int) time.Duration {
	return time.Second + time.Duration(n)*20*time.Microsecond
}

// Lateness starts cfg.Consumers consumers (prefetch cfg.Prefetch), then
// publishes cfg.N payloads with Put and Delay from cfg.Publishers
// goroutines in order of delay. Each payload carries its due time: the
// time just before its Put call plus its delay, by this process's clock
// (redq judges due times by Redis's clock; both run on one machine here).
// A consumer notes the time it received a delivery before acking it; the
// result is that time minus the due time, per delivery.
func (s *redqSystem) Lateness(ctx context.Context, e *env, cfg latenessConfig) (_ []time.Duration, err error) {
	r := s.open(e, cfg.Consumers+cfg.Publishers)
	defer closeRun(r, &err)
	conn, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		return nil, fmt.Errorf("lateness: %w", err)
	}
	tl := newTally(cfg.N)
	var mu sync.Mutex
	late := make([]time.Duration, 0, cfg.N)
	consumer := func(d redq.Delivery) {
		got := time.Now()
		if err := d.Ack(); err != nil {
			r.fail(fmt.Errorf("redq: ack: %w", err))
			return
		}
		due := tl.see([]byte(d.Payload()))
		mu.Lock()
		late = append(late, got.Sub(due))
		mu.Unlock()
	}
	if err := r.consume(q, cfg.Prefetch, cfg.Consumers, consumer, s.poll); err != nil {
		return nil, fmt.Errorf("lateness: %w", err)
	}
	err = parallel(ctx, cfg.Publishers, cfg.N, func(ctx context.Context, i int) error {
		delay := spreadDelay(i, cfg.N, cfg.Spread)
		p := newPayloadAt(i, cfg.PayloadSize, time.Now().Add(delay))
		if err := q.Put(ctx, p, redq.Delay(delay)); err != nil {
			return fmt.Errorf("redq: put payload %d with delay %s: %w", i, delay, err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lateness publish: %w", err)
	}
	if err := r.wait(ctx, tl, cfg.Spread+redqLimit(cfg.N)); err != nil {
		return nil, fmt.Errorf("lateness: %w", err)
	}
	if err := r.settled(ctx, conn, 0, redqQueue); err != nil {
		return nil, fmt.Errorf("lateness: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(late), nil
}

// HalfDelayed is EndToEnd with single consumers over a queue filled
// (untimed) by fillHalfDelayed: half the payloads in the delayed set, the
// other half ready. Nobody consumes while it fills, so the delayed ones
// are all still in the delayed set when the clock starts (checked), and
// the fetches move them to ready as they come due; since the fill takes
// longer than their delays at the default sizes, most are due by then.
func (s *redqSystem) HalfDelayed(ctx context.Context, e *env, cfg e2eConfig) (time.Duration, error) {
	if cfg.Batch > 0 {
		return 0, fmt.Errorf("half delayed: batch consumers are not part of this workload")
	}
	return s.endToEnd(ctx, e, cfg, "half delayed", func(ctx context.Context, conn redq.Connection, q redq.Queue) error {
		return fillHalfDelayed(ctx, conn, q, cfg.N, cfg.PayloadSize)
	})
}

// fillHalfDelayed publishes payloads 0..n-1 into q (queue redqQueue on
// conn), redqHalfChunk per PublishBytes call: even calls as they are, odd
// calls through handles of the same queue opened with a default delay,
// which grows by 1 ms from one odd call to the next, from 1 ms up to
// redqShortDelays ms and round again. It then checks that the queue holds
// the plain ones as ready and the others as delayed.
func fillHalfDelayed(ctx context.Context, conn redq.Connection, q redq.Queue, n, size int) error {
	calls := (n + redqHalfChunk - 1) / redqHalfChunk
	delayedHandles := make([]redq.Queue, min(redqShortDelays, calls/2))
	for i := range delayedHandles {
		h, err := conn.OpenQueue(redqQueue, redq.WithPublishDefaults(redq.Delay(time.Duration(i+1)*time.Millisecond)))
		if err != nil {
			return fmt.Errorf("redq: open queue %s with a delay: %w", redqQueue, err)
		}
		delayedHandles[i] = h
	}
	delayed := 0
	for c := 1; c < calls; c += 2 {
		delayed += min(redqHalfChunk, n-c*redqHalfChunk)
	}
	err := fillRedqParallel(ctx, redqFillWorkers, 0, n, redqHalfChunk, size, func(c int) redq.Queue {
		if c%2 == 1 {
			return delayedHandles[(c/2)%len(delayedHandles)]
		}
		return q
	})
	if err != nil {
		return err
	}
	return expectRedqCounts(ctx, conn, redqCounts{ready: n - delayed, delayed: delayed}, redqQueue)
}

// PrefetchDelayed fills a queue (untimed) with delayed payloads due in
// redqFarAhead, redqChunk per PublishBytes call from redqFillWorkers
// goroutines through a handle opened with that default delay, and then
// with k ready ones. It checks the counts, then times 10 consumers
// (prefetch redqWorkPrefetch) consuming and acking all k, from
// StartConsuming to the last ack. The delayed payloads carry sequence
// numbers from k on, so
// the tally fails the run if one of them is consumed; afterwards the queue
// must hold the delayed ones and nothing else.
func (s *redqSystem) PrefetchDelayed(ctx context.Context, e *env, delayed, k int) (_ time.Duration, err error) {
	r := s.open(e, redqWorkers+redqFillWorkers)
	defer closeRun(r, &err)
	conn, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		return 0, fmt.Errorf("prefetch: %w", err)
	}
	if delayed > 0 {
		far, err := conn.OpenQueue(redqQueue, redq.WithPublishDefaults(redq.Delay(redqFarAhead)))
		if err != nil {
			return 0, fmt.Errorf("prefetch: open queue with a delay: %w", err)
		}
		err = fillRedqParallel(ctx, redqFillWorkers, k, delayed, redqChunk, e.payloadSize, func(int) redq.Queue { return far })
		if err != nil {
			return 0, fmt.Errorf("prefetch fill delayed: %w", err)
		}
	}
	if err := fillRedq(ctx, q, 0, k, e.payloadSize); err != nil {
		return 0, fmt.Errorf("prefetch fill ready: %w", err)
	}
	if err := expectRedqCounts(ctx, conn, redqCounts{ready: k, delayed: delayed}, redqQueue); err != nil {
		return 0, fmt.Errorf("prefetch fill: %w", err)
	}
	// Filling a million made as many payloads here: collect them now, so
	// that the collector does not run during the timed part of one case
	// and not the other.
	runtime.GC()
	tl := newTally(k)
	start := time.Now()
	if err := r.consume(q, redqWorkPrefetch, redqWorkers, r.acker(tl, nil), s.poll); err != nil {
		return 0, fmt.Errorf("prefetch: %w", err)
	}
	if err := r.wait(ctx, tl, redqLimit(k)); err != nil {
		return 0, fmt.Errorf("prefetch: %w", err)
	}
	elapsed := time.Since(start)
	if err := r.settledWith(ctx, conn, redqCounts{delayed: delayed}, redqQueue); err != nil {
		return 0, fmt.Errorf("prefetch: %w", err)
	}
	return elapsed, nil
}

// ExpiredLeases publishes n payloads with a time to run of redqLeaseTTR(n)
// (untimed) and has connection A take all of them with TakeBatch (no
// consumers) and never ack them. A stays alive. Once every lease has run
// out (by this process's clock, on the same machine as Redis, plus
// redqLeaseMargin), it times one Cleaner.CleanContext through a second
// connection B. The cleaner must report n returned and the queue must
// hold n ready and nothing unacked; a late Ack of one of A's deliveries
// must fail with ErrorLeaseLost; and draining the queue must give back
// every payload exactly once.
func (s *redqSystem) ExpiredLeases(ctx context.Context, e *env, n int) (_ time.Duration, err error) {
	r := s.open(e, 1)
	defer closeRun(r, &err)
	connA, _, err := r.connect(ctx, redqQueue)
	if err != nil {
		return 0, fmt.Errorf("leases: %w", err)
	}
	connB, _, err := r.connect(ctx, redqQueue)
	if err != nil {
		return 0, fmt.Errorf("leases: %w", err)
	}
	ttr := redqLeaseTTR(n)
	q, err := connA.OpenQueue(redqQueue, redq.WithPublishDefaults(redq.TTR(ttr)))
	if err != nil {
		return 0, fmt.Errorf("leases: open queue with a TTR: %w", err)
	}
	if err := fillRedq(ctx, q, 0, n, e.payloadSize); err != nil {
		return 0, fmt.Errorf("leases fill: %w", err)
	}
	held, lastTake, err := takeAll(ctx, q, n, ttr)
	if err != nil {
		return 0, fmt.Errorf("leases: %w", err)
	}
	if err := sleep(ctx, time.Until(lastTake.Add(ttr+redqLeaseMargin))); err != nil {
		return 0, fmt.Errorf("leases: waiting for the leases to run out: %w", err)
	}
	start := time.Now()
	returned, err := redq.NewCleaner(connB).CleanContext(ctx)
	elapsed := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("leases: clean: %w", err)
	}
	if returned != int64(n) {
		return 0, fmt.Errorf("leases: cleaner returned %d deliveries, want %d", returned, n)
	}
	if err := expectRedqCounts(ctx, connB, redqCounts{ready: n}, redqQueue); err != nil {
		return 0, fmt.Errorf("leases: after clean: %w", err)
	}
	if err := held[0].AckContext(ctx); !errors.Is(err, redq.ErrorLeaseLost) {
		return 0, fmt.Errorf("leases: a late Ack after the cleaner returned the delivery: %v, want ErrorLeaseLost", err)
	}
	if err := drainAll(ctx, q, n); err != nil {
		return 0, fmt.Errorf("leases: after clean: %w", err)
	}
	if err := r.settled(ctx, connB, 0, redqQueue); err != nil {
		return 0, fmt.Errorf("leases: %w", err)
	}
	return elapsed, nil
}

// takeAll takes n deliveries from q with TakeBatch, redqChunk per call,
// checks that each payload 0..n-1 came exactly once and that taking took
// less than ttr, and returns them and the time the last take returned.
func takeAll(ctx context.Context, q redq.Queue, n int, ttr time.Duration) ([]redq.Message, time.Time, error) {
	tl := newTally(n)
	held := make([]redq.Message, 0, n)
	start := time.Now()
	for len(held) < n {
		ds, err := q.TakeBatch(ctx, int64(min(redqChunk, n-len(held))), 0)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("take after %d of %d: %w", len(held), n, err)
		}
		for _, d := range ds {
			tl.see([]byte(d.Payload()))
		}
		held = append(held, ds...)
	}
	last := time.Now()
	if took := last.Sub(start); took >= ttr {
		return nil, time.Time{}, fmt.Errorf("taking %d took %s, longer than their time to run %s (see redqLeaseTTR)", n, took, ttr)
	}
	if err := tl.check(); err != nil {
		return nil, time.Time{}, fmt.Errorf("taking: %w", err)
	}
	return held, last, nil
}

// drainAll drains q's ready deliveries, redqChunk per call, and checks that
// they are payloads 0..n-1, each exactly once.
func drainAll(ctx context.Context, q redq.Queue, n int) error {
	tl := newTally(n)
	for {
		ps, err := q.DrainContext(ctx, redqChunk)
		if err != nil {
			return fmt.Errorf("drain: %w", err)
		}
		if len(ps) == 0 {
			break
		}
		for _, p := range ps {
			tl.see([]byte(p))
		}
	}
	if err := tl.check(); err != nil {
		return fmt.Errorf("drained: %w", err)
	}
	return nil
}
