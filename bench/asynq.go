package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

const (
	// asynqTaskType is the type of every task the bench enqueues.
	asynqTaskType = "bench:payload"
	// asynqFillers is how many goroutines fill a queue before an
	// untimed phase ends.
	asynqFillers = 16
	// asynqIdleWait bounds the wait for one idle pickup.
	asynqIdleWait = 10 * time.Second
	// asynqIdleWarmups are idle deliveries made before measuring.
	asynqIdleWarmups = 2
	// asynqManyQueuesWorkers is the server concurrency in ManyQueues:
	// asynq has no consumer per queue, one worker pool serves them all.
	asynqManyQueuesWorkers = 10
)

// asynqSystem runs the workloads on github.com/hibiken/asynq through its
// public API only: Client.Enqueue to publish, a Server with a handler to
// consume, and an Inspector to check that nothing was left behind.
type asynqSystem struct {
	checkInterval time.Duration // Config.TaskCheckInterval; 0: asynq's default (1 s)
}

// newAsynq returns the asynq system. checkInterval is the server's
// TaskCheckInterval, the sleep between polls of empty queues; 0 keeps
// asynq's default.
func newAsynq(checkInterval time.Duration) system {
	return &asynqSystem{checkInterval: checkInterval}
}

// Name returns "asynq", or "asynq (check 10ms)" for a non-default
// check interval.
func (s *asynqSystem) Name() string {
	if s.checkInterval == 0 {
		return "asynq"
	}
	return fmt.Sprintf("asynq (check %s)", s.checkInterval)
}

// asynqQueuePrefix returns a queue name no earlier run used, so that runs on
// an unflushed database (as in tests) never see each other's tasks.
func asynqQueuePrefix() string {
	return "redq-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// asynqRun holds what one measurement opened: a go-redis client for the
// producer side (shared by the asynq Client and Inspector) and, once
// started, a Server with its own go-redis client. close releases them all.
type asynqRun struct {
	s      *asynqSystem
	e      *env
	rdb    *redis.Client
	client *asynq.Client
	insp   *asynq.Inspector
	srv    *asynq.Server
	srvRdb *redis.Client
}

// open returns a run whose producer side has a pool of at least pool
// connections.
func (s *asynqSystem) open(e *env, pool int) *asynqRun {
	rdb := e.newClient(pool)
	return &asynqRun{
		s:      s,
		e:      e,
		rdb:    rdb,
		client: asynq.NewClientFromRedisClient(rdb),
		insp:   asynq.NewInspectorFromRedisClient(rdb),
	}
}

// start starts a Server with concurrency workers serving queues (equal
// weights) with handler.
func (r *asynqRun) start(concurrency int, queues []string, handler asynq.HandlerFunc) error {
	if r.srv != nil {
		return errors.New("asynq: server already started")
	}
	weights := make(map[string]int, len(queues))
	for _, q := range queues {
		weights[q] = 1
	}
	r.srvRdb = r.e.newClient(concurrency + 8)
	r.srv = asynq.NewServerFromRedisClient(r.srvRdb, asynq.Config{
		Concurrency:       concurrency,
		TaskCheckInterval: r.s.checkInterval, // 0: asynq's default
		Queues:            weights,
		LogLevel:          asynq.FatalLevel,
	})
	if err := r.srv.Start(handler); err != nil {
		return fmt.Errorf("asynq: start server: %w", err)
	}
	return nil
}

// shutdown stops the server, if one was started, waiting for its workers
// (and their acks) to finish. It may be called more than once.
func (r *asynqRun) shutdown() {
	if r.srv != nil {
		r.srv.Shutdown()
	}
}

// close shuts the server down and closes both connection pools. The asynq
// Client and Inspector were made from a shared go-redis client, so closing
// that client is how they are closed.
func (r *asynqRun) close() {
	r.shutdown()
	if r.srvRdb != nil {
		_ = r.srvRdb.Close()
	}
	_ = r.rdb.Close()
}

// enqueue enqueues one task with payload p into queue q.
func (r *asynqRun) enqueue(ctx context.Context, q string, p []byte) error {
	if _, err := r.client.EnqueueContext(ctx, asynq.NewTask(asynqTaskType, p), asynq.Queue(q)); err != nil {
		return fmt.Errorf("asynq: enqueue into %s: %w", q, err)
	}
	return nil
}

// enqueueAll enqueues payloads with sequence numbers 0..n-1 of size bytes
// from goroutines goroutines, payload seq going to queueOf(seq). The first
// error stops every goroutine and is returned.
func (r *asynqRun) enqueueAll(ctx context.Context, n, goroutines, size int, queueOf func(seq int) string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	for range max(goroutines, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				seq := int(next.Add(1) - 1)
				if seq >= n {
					return
				}
				if err := r.enqueue(ctx, queueOf(seq), newPayload(seq, size)); err != nil {
					once.Do(func() { firstErr = err })
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if next.Load() < int64(n) {
		return fmt.Errorf("asynq: enqueueing stopped before %d of %d: %w", next.Load(), n, ctx.Err())
	}
	return nil
}

// expectQueue checks that queue q holds exactly pending tasks and nothing
// else (no active, retry, archived or scheduled tasks). With pending 0
// after a shutdown it proves every handled task was also acked.
func (r *asynqRun) expectQueue(q string, pending int) error {
	info, err := r.insp.GetQueueInfo(q)
	if err != nil {
		return fmt.Errorf("asynq: inspect queue %s: %w", q, err)
	}
	if info.Size != pending || info.Pending != pending {
		return fmt.Errorf("asynq: queue %s holds %d tasks (%d pending, %d active, %d retry, %d archived), want %d pending",
			q, info.Size, info.Pending, info.Active, info.Retry, info.Archived, pending)
	}
	return nil
}

// asynqDrainLimit bounds the wait for n tasks to be handled.
func asynqDrainLimit(n int) time.Duration {
	return time.Minute + time.Duration(n)*time.Millisecond
}

// Publish enqueues n payloads from goroutines goroutines, one Enqueue call
// each, and returns the elapsed time. asynq has no batch enqueue, so
// perCall > 1 is not measured.
func (s *asynqSystem) Publish(ctx context.Context, e *env, n, goroutines, perCall int) (time.Duration, error) {
	if perCall > 1 {
		return 0, fmt.Errorf("asynq has no batch enqueue: %w", errNotMeasured)
	}
	r := s.open(e, goroutines)
	defer r.close()
	q := asynqQueuePrefix()
	cpuStart(ctx)
	start := time.Now()
	if err := r.enqueueAll(ctx, n, goroutines, e.payloadSize, func(int) string { return q }); err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	elapsed := time.Since(start)
	cpuStop(ctx)
	if err := r.expectQueue(q, n); err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	return elapsed, nil
}

// consumeAll starts a server with concurrency workers on queues, which
// hold the n payloads 0..n-1, and returns the time from starting it until
// every payload has been handled. The handlers' acks finish just after
// they return; the queues are checked to be empty after the shutdown.
func (r *asynqRun) consumeAll(ctx context.Context, n, concurrency int, queues []string) (time.Duration, error) {
	tl := newTally(n)
	handler := func(_ context.Context, t *asynq.Task) error {
		tl.see(t.Payload())
		return nil
	}
	cpuStart(ctx)
	start := time.Now()
	if err := r.start(concurrency, queues, handler); err != nil {
		return 0, err
	}
	if err := tl.wait(ctx, asynqDrainLimit(n)); err != nil {
		return 0, fmt.Errorf("asynq: consume: %w", err)
	}
	elapsed := time.Since(start)
	cpuStop(ctx)
	r.shutdown()
	for _, q := range queues {
		if err := r.expectQueue(q, 0); err != nil {
			return 0, fmt.Errorf("after consuming: %w", err)
		}
	}
	return elapsed, nil
}

// EndToEnd fills a queue with cfg.N tasks (untimed), then times starting a
// server with cfg.Consumers workers until every task is handled. asynq has
// no prefetch (a worker fetches one task at a time), so cfg.Prefetch is
// ignored; it has no batch consumer, so cfg.Batch > 0 is not measured.
func (s *asynqSystem) EndToEnd(ctx context.Context, e *env, cfg e2eConfig) (time.Duration, error) {
	if cfg.Batch > 0 {
		return 0, fmt.Errorf("asynq has no batch consumer: %w", errNotMeasured)
	}
	r := s.open(e, asynqFillers)
	defer r.close()
	q := asynqQueuePrefix()
	if err := r.enqueueAll(ctx, cfg.N, asynqFillers, cfg.PayloadSize, func(int) string { return q }); err != nil {
		return 0, fmt.Errorf("e2e fill: %w", err)
	}
	d, err := r.consumeAll(ctx, cfg.N, cfg.Consumers, []string{q})
	if err != nil {
		return 0, fmt.Errorf("e2e: %w", err)
	}
	return d, nil
}

// Steady runs a server with cfg.Consumers workers while pace enqueues at
// cfg.Rate, then waits up to cfg.DrainLimit for the rest. A task's latency
// is taken in the handler once it has processed the payload: asynq acks
// (deletes the task) only after the handler returns, and its API offers
// no hook after the ack, so this is as close to publish→ack as it gets.
func (s *asynqSystem) Steady(ctx context.Context, e *env, cfg steadyConfig) (steadyResult, error) {
	r := s.open(e, cfg.Producers)
	defer r.close()
	q := asynqQueuePrefix()
	// pace makes at most rate×d calls plus about two per producer.
	capacity := int(float64(cfg.Rate)*cfg.Duration.Seconds()*1.1) + 2*cfg.Producers + 16
	tl := newTally(capacity)
	rec := &latencyRecorder{}
	handler := func(_ context.Context, t *asynq.Task) error {
		rec.record(tl.see(t.Payload()))
		return nil
	}
	if err := r.start(cfg.Consumers, []string{q}, handler); err != nil {
		return steadyResult{}, fmt.Errorf("steady: %w", err)
	}
	cpuStart(ctx)
	start := time.Now()
	published, err := pace(ctx, cfg.Rate, cfg.Producers, cfg.Duration, func(seq int) error {
		if seq >= capacity {
			return fmt.Errorf("asynq: steady run publishing more than the %d expected", capacity)
		}
		return r.enqueue(ctx, q, newPayload(seq, cfg.Payload))
	})
	if err != nil {
		return steadyResult{}, fmt.Errorf("steady publish: %w", err)
	}
	tl.expect(published)
	if err := tl.wait(ctx, cfg.DrainLimit); err != nil {
		return steadyResult{}, fmt.Errorf("steady: after %s drain: %w", cfg.DrainLimit, err)
	}
	cpuStop(ctx)
	r.shutdown()
	if err := r.expectQueue(q, 0); err != nil {
		return steadyResult{}, fmt.Errorf("steady: %w", err)
	}
	return rec.result(published, start), nil
}

// asynqPickup is one idle delivery as the handler saw it.
type asynqPickup struct {
	seq int
	at  time.Time // when the handler started
}

// Idle runs a server with one worker on an empty queue and, samples
// times, sleeps gap, enqueues one task and waits for the handler to start
// on it. The latency is from just before Enqueue to the handler's start:
// mostly what is left of the processor's sleep between polls of an empty
// queue (TaskCheckInterval/2 plus up to TaskCheckInterval of jitter).
// Two warm-up deliveries come first and are not counted.
func (s *asynqSystem) Idle(ctx context.Context, e *env, samples int, gap time.Duration) ([]time.Duration, error) {
	r := s.open(e, 1)
	defer r.close()
	q := asynqQueuePrefix()
	total := asynqIdleWarmups + samples
	tl := newTally(total)
	got := make(chan asynqPickup, total)
	handler := func(_ context.Context, t *asynq.Task) error {
		at := time.Now()
		seq, _, _ := parsePayload(t.Payload())
		tl.see(t.Payload())
		select {
		case got <- asynqPickup{seq: seq, at: at}:
		default: // a duplicate beyond the buffer; tally reports it
		}
		return nil
	}
	if err := r.start(1, []string{q}, handler); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	lat := make([]time.Duration, 0, samples)
	for seq := range total {
		d, err := r.idleOne(ctx, q, seq, gap, got)
		if err != nil {
			return nil, fmt.Errorf("idle: %w", err)
		}
		if seq >= asynqIdleWarmups {
			lat = append(lat, d)
		}
	}
	if err := tl.check(); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	r.shutdown()
	if err := r.expectQueue(q, 0); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	return lat, nil
}

// idleOne sleeps gap, enqueues payload seq into q and waits for its
// pickup on got, returning the time from the enqueue call to the pickup.
func (r *asynqRun) idleOne(ctx context.Context, q string, seq int, gap time.Duration, got <-chan asynqPickup) (time.Duration, error) {
	if err := sleep(ctx, gap); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := r.enqueue(ctx, q, newPayload(seq, r.e.payloadSize)); err != nil {
		return 0, err
	}
	timer := time.NewTimer(asynqIdleWait)
	defer timer.Stop()
	select {
	case p := <-got:
		if p.seq != seq {
			return 0, fmt.Errorf("asynq: handler got payload %d, want %d", p.seq, seq)
		}
		return p.at.Sub(t0), nil
	case <-timer.C:
		return 0, fmt.Errorf("asynq: payload %d not picked up within %s", seq, asynqIdleWait)
	case <-ctx.Done():
		return 0, fmt.Errorf("asynq: waiting for payload %d: %w", seq, ctx.Err())
	}
}

// Queued is not measured: filling a queue with a million tasks through
// Enqueue (one Lua script and a task hash per task) would take minutes in
// every repetition.
func (s *asynqSystem) Queued(ctx context.Context, e *env, depth, k int) (time.Duration, error) {
	return 0, fmt.Errorf("asynq: filling %d tasks through Enqueue takes minutes: %w", depth, errNotMeasured)
}

// Unacked is not measured: an asynq task stays unacked only while its
// handler runs, so holding tasks unacked occupies one worker each.
func (s *asynqSystem) Unacked(ctx context.Context, e *env, held, k int) (time.Duration, error) {
	return 0, fmt.Errorf("asynq: a held task occupies a worker: %w", errNotMeasured)
}

// ManyQueues fills queues queues with perQueue tasks each (untimed), then
// times one server listing every queue with equal weights and 10 workers
// until every task is handled. asynq has no consumer per queue: its one
// processor polls the queues in random order.
func (s *asynqSystem) ManyQueues(ctx context.Context, e *env, queues, perQueue int) (time.Duration, error) {
	r := s.open(e, asynqFillers)
	defer r.close()
	prefix := asynqQueuePrefix()
	names := make([]string, queues)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	n := queues * perQueue
	if err := r.enqueueAll(ctx, n, asynqFillers, e.payloadSize, func(seq int) string { return names[seq%queues] }); err != nil {
		return 0, fmt.Errorf("many queues fill: %w", err)
	}
	d, err := r.consumeAll(ctx, n, asynqManyQueuesWorkers, names)
	if err != nil {
		return 0, fmt.Errorf("many queues: %w", err)
	}
	return d, nil
}

// Recover is not measured: asynq returns the tasks of a dead worker when
// their lease expires (30 s), found by a recoverer that runs every minute;
// there is no cleaner to call.
func (s *asynqSystem) Recover(ctx context.Context, e *env, n int) (time.Duration, error) {
	return 0, fmt.Errorf("asynq recovers by lease expiry, there is no cleaner to call: %w", errNotMeasured)
}

// Memory enqueues n tasks of e.payloadSize bytes with no server running
// and returns Redis's used_memory growth per task. asynq keeps a hash per
// task (message and state) besides the pending list entry; measuring that
// is the point. One task is enqueued first, uncounted, so that the Lua
// script and the queue's registration are in place, and the producer's
// connections are opened before the first reading.
func (s *asynqSystem) Memory(ctx context.Context, e *env, n int) (float64, error) {
	if n <= 0 {
		return 0, fmt.Errorf("memory: n %d must be positive", n)
	}
	r := s.open(e, asynqFillers)
	defer r.close()
	q := asynqQueuePrefix()
	if err := openConns(ctx, r.rdb, asynqFillers); err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	if err := r.enqueue(ctx, q, newPayload(n, e.payloadSize)); err != nil {
		return 0, fmt.Errorf("memory warm-up: %w", err)
	}
	before, err := usedMemory(ctx, e.admin)
	if err != nil {
		return 0, fmt.Errorf("memory before: %w", err)
	}
	if err := r.enqueueAll(ctx, n, asynqFillers, e.payloadSize, func(int) string { return q }); err != nil {
		return 0, fmt.Errorf("memory fill: %w", err)
	}
	after, err := usedMemory(ctx, e.admin)
	if err != nil {
		return 0, fmt.Errorf("memory after: %w", err)
	}
	if err := r.expectQueue(q, n+1); err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	return float64(after-before) / float64(n), nil
}
