package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
)

const (
	// redqChunk is how many payloads one PublishBytes call carries when a
	// queue is filled outside the clock.
	redqChunk = 1000
	// redqWorkers is the consumer count of Queued and Unacked.
	redqWorkers = 10
	// redqWorkPrefetch is the prefetch limit of Queued, Unacked and Recover.
	redqWorkPrefetch = 1000
	// redqManyPrefetch is the prefetch limit of each queue in ManyQueues.
	redqManyPrefetch = 100
	// redqBatchTimeout is how long a batch consumer waits to fill a batch.
	redqBatchTimeout = 10 * time.Millisecond
	// redqIdleWarmups are idle deliveries made before measuring.
	redqIdleWarmups = 2
	// redqIdleWait bounds the wait for one idle pickup beyond the poll.
	redqIdleWait = 10 * time.Second
	// redqStopLimit bounds stopping a connection's consumers.
	redqStopLimit = 30 * time.Second
	// redqPoolSpare is added to every client's pool for heartbeats, fetch
	// waits and acks.
	redqPoolSpare = 20
	// redqQueue is the queue name of the single-queue workloads.
	redqQueue = "bench"
)

// redqSystem runs the workloads on redq through its public API only.
type redqSystem struct {
	poll time.Duration // pollDuration given to StartConsuming
}

// newRedq returns the redq system whose queues consume with pollDuration
// poll (the longest one wait on an idle queue lasts).
func newRedq(poll time.Duration) system {
	return &redqSystem{poll: poll}
}

// Name returns "redq" for the default poll of 1 s, else e.g.
// "redq (poll 30s)".
func (s *redqSystem) Name() string {
	if s.poll == time.Second {
		return "redq"
	}
	return fmt.Sprintf("redq (poll %s)", s.poll)
}

// redqLimit bounds the wait for n deliveries to be consumed.
func redqLimit(n int) time.Duration {
	return time.Minute + time.Duration(n)*100*time.Microsecond
}

// redqRun holds what one measurement opened: a go-redis client, the redq
// connections on it (all in a namespace of their own, so that runs never
// see each other's keys), and a reader of their background errors. The
// first failure, from the background or from a consumer, is kept and
// ends every wait of the run.
type redqRun struct {
	rdb        *redis.Client
	ns         string
	errs       chan error
	quit       chan struct{} // ends the errs reader
	readerDone chan struct{}
	conns      []redq.Connection

	failOnce sync.Once
	failed   chan struct{} // closed at the first failure
	failErr  error

	stopOnce  sync.Once
	closeOnce sync.Once
}

// open returns a run whose client has a pool of at least pool connections.
func (s *redqSystem) open(e *env, pool int) *redqRun {
	r := &redqRun{
		rdb:        e.newClient(pool + redqPoolSpare),
		ns:         "bench-" + strings.ToLower(rand.Text()[:12]),
		errs:       make(chan error, 64),
		quit:       make(chan struct{}),
		readerDone: make(chan struct{}),
		failed:     make(chan struct{}),
	}
	go r.readErrors()
	return r
}

// readErrors turns every background error into the run's failure.
func (r *redqRun) readErrors() {
	defer close(r.readerDone)
	for {
		select {
		case err := <-r.errs:
			r.fail(fmt.Errorf("redq background error: %w", err))
		case <-r.quit:
			return
		}
	}
}

// fail records err as the run's failure unless one came first.
func (r *redqRun) fail(err error) {
	r.failOnce.Do(func() {
		r.failErr = err
		close(r.failed)
	})
}

// err returns the run's failure, if any.
func (r *redqRun) err() error {
	select {
	case <-r.failed:
		return r.failErr
	default:
		return nil
	}
}

// connect opens a connection of the run and one queue on it.
func (r *redqRun) connect(ctx context.Context, queue string) (redq.Connection, redq.Queue, error) {
	conn, err := redq.Open(ctx, "bench", r.rdb, r.errs, redq.WithNamespace(r.ns))
	if err != nil {
		return nil, nil, fmt.Errorf("redq: open connection: %w", err)
	}
	r.conns = append(r.conns, conn)
	q, err := conn.OpenQueue(queue)
	if err != nil {
		return nil, nil, fmt.Errorf("redq: open queue %s: %w", queue, err)
	}
	return conn, q, nil
}

// stopConn stops all consuming on conn and waits, at most redqStopLimit.
func (r *redqRun) stopConn(conn redq.Connection) error {
	timer := time.NewTimer(redqStopLimit)
	defer timer.Stop()
	select {
	case <-conn.StopAllConsuming():
		return nil
	case <-timer.C:
		err := fmt.Errorf("redq: stopping a connection took longer than %s", redqStopLimit)
		r.fail(err)
		return err
	}
}

// stopAll stops every connection of the run (once) and returns the run's
// failure, if any.
func (r *redqRun) stopAll() error {
	r.stopOnce.Do(func() {
		for _, c := range r.conns {
			if r.stopConn(c) != nil {
				break // the run failed; close does not wait again
			}
		}
	})
	return r.err()
}

// close stops every connection, reads the errors reported while stopping,
// closes the client and returns the run's failure. It may be called more
// than once.
func (r *redqRun) close() error {
	r.closeOnce.Do(func() {
		_ = r.stopAll()
		close(r.quit)
		<-r.readerDone
		for drained := false; !drained; {
			select {
			case err := <-r.errs:
				r.fail(fmt.Errorf("redq background error: %w", err))
			default:
				drained = true
			}
		}
		_ = r.rdb.Close()
	})
	return r.err()
}

// closeRun closes r when a measurement returns and keeps the first
// failure: *errp, or else what closing found (a background error the run
// reported late).
func closeRun(r *redqRun, errp *error) {
	if err := r.close(); *errp == nil {
		*errp = err
	}
}

// stopCrew stops crew when a measurement returns and keeps the first
// failure: *errp, or else the crew's.
func stopCrew(crew *baseCrew, errp *error) {
	if err := crew.stop(); *errp == nil {
		*errp = err
	}
}

// wait waits until tl has seen everything, the run fails, ctx ends or
// limit passes, and returns the failure or tally's verdict.
func (r *redqRun) wait(ctx context.Context, tl *tally, limit time.Duration) error {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-tl.Done():
	case <-r.failed:
	case <-ctx.Done():
	case <-timer.C:
	}
	if err := r.err(); err != nil {
		return err
	}
	if err := tl.check(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return fmt.Errorf("after waiting up to %s: %w", limit, err)
	}
	return nil
}

// fillRedq publishes payloads from..from+n-1 of size bytes into q, redqChunk
// per PublishBytes call.
func fillRedq(ctx context.Context, q redq.Queue, from, n, size int) error {
	return fillRedqParallel(ctx, 1, from, n, redqChunk, size, func(int) redq.Queue { return q })
}

// fillRedqParallel publishes payloads from..from+n-1 of size bytes from
// workers goroutines, perCall per PublishBytes call, call c (counting from
// 0) into queueOf(c). The first error stops them all.
func fillRedqParallel(ctx context.Context, workers, from, n, perCall, size int, queueOf func(c int) redq.Queue) error {
	perCall = max(perCall, 1)
	calls := (n + perCall - 1) / perCall
	return parallel(ctx, workers, calls, func(ctx context.Context, c int) error {
		lo, hi := from+c*perCall, from+min((c+1)*perCall, n)
		batch := make([][]byte, 0, hi-lo)
		for seq := lo; seq < hi; seq++ {
			batch = append(batch, newPayload(seq, size))
		}
		if err := queueOf(c).PublishBytesContext(ctx, batch...); err != nil {
			return fmt.Errorf("redq: publish payloads %d..%d: %w", lo, hi-1, err)
		}
		return nil
	})
}

// acker returns a consumer that acks each delivery, then records it in tl
// and passes its publish time to onAck (if not nil). A failed ack fails
// the run.
func (r *redqRun) acker(tl *tally, onAck func(published time.Time)) redq.ConsumerFunc {
	return func(d redq.Delivery) {
		if err := d.Ack(); err != nil {
			r.fail(fmt.Errorf("redq: ack: %w", err))
			return
		}
		at := tl.see([]byte(d.Payload()))
		if onAck != nil {
			onAck(at)
		}
	}
}

// batchAcker returns a batch consumer that acks each batch in one call,
// then records it in tl. A failed ack fails the run.
func (r *redqRun) batchAcker(tl *tally) redq.BatchConsumerFunc {
	return func(b redq.Deliveries) {
		if errs := b.Ack(); len(errs) > 0 {
			for i, err := range errs {
				r.fail(fmt.Errorf("redq: batch ack: %d of %d failed, delivery %d: %w", len(errs), len(b), i, err))
				break
			}
			return
		}
		for _, d := range b {
			tl.see([]byte(d.Payload()))
		}
	}
}

// consume starts consuming q with prefetch and poll and adds consumers
// consumers running f.
func (r *redqRun) consume(q redq.Queue, prefetch, consumers int, f redq.ConsumerFunc, poll time.Duration) error {
	if err := q.StartConsuming(int64(max(prefetch, 1)), poll); err != nil {
		return fmt.Errorf("redq: start consuming: %w", err)
	}
	for i := range consumers {
		if _, err := q.AddConsumerFunc(fmt.Sprintf("c%d", i), f); err != nil {
			return fmt.Errorf("redq: add consumer: %w", err)
		}
	}
	return nil
}

// redqCounts are the counts a queue is expected to hold at the end of a
// run; everything not named (rejected, unacked, expired) must be 0.
type redqCounts struct {
	ready, delayed int
}

// expectRedqQueues checks, through conn, that each named queue holds ready
// deliveries in ready and nothing else: none delayed, rejected, unacked
// or expired.
func expectRedqQueues(ctx context.Context, conn redq.Connection, ready int, names ...string) error {
	return expectRedqCounts(ctx, conn, redqCounts{ready: ready}, names...)
}

// expectRedqCounts checks, through conn, that each named queue holds want
// and nothing else.
func expectRedqCounts(ctx context.Context, conn redq.Connection, want redqCounts, names ...string) error {
	stats, err := conn.CollectStatsContext(ctx, names)
	if err != nil {
		return fmt.Errorf("redq: collect stats: %w", err)
	}
	for _, name := range names {
		qs := stats.QueueStats[name]
		if qs.ReadyCount != int64(want.ready) || qs.DelayedCount != int64(want.delayed) ||
			qs.RejectedCount != 0 || qs.UnackedCount() != 0 || qs.ExpiredCount != 0 {
			return fmt.Errorf("redq: queue %s holds %d ready, %d delayed, %d rejected, %d unacked, %d expired; want %d ready and %d delayed only",
				name, qs.ReadyCount, qs.DelayedCount, qs.RejectedCount, qs.UnackedCount(), qs.ExpiredCount, want.ready, want.delayed)
		}
	}
	return nil
}

// Publish publishes n payloads from goroutines goroutines, perCall
// payloads per PublishBytes call, and returns the elapsed time. The
// queue is checked to hold exactly n ready deliveries afterwards.
func (s *redqSystem) Publish(ctx context.Context, e *env, n, goroutines, perCall int) (_ time.Duration, err error) {
	goroutines, perCall = max(goroutines, 1), max(perCall, 1)
	r := s.open(e, goroutines)
	defer closeRun(r, &err)
	conn, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	cpuStart(ctx)
	start := time.Now()
	if err := publishRedq(ctx, q, n, goroutines, perCall, e.payloadSize); err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	elapsed := time.Since(start)
	cpuStop(ctx)
	if err := expectRedqQueues(ctx, conn, n, redqQueue); err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	if err := r.close(); err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	return elapsed, nil
}

// publishRedq publishes payloads 0..n-1 of size bytes into q from
// goroutines goroutines, each taking the next perCall sequence numbers
// for one PublishBytes call. The first error stops them all.
func publishRedq(ctx context.Context, q redq.Queue, n, goroutines, perCall, size int) error {
	return fillRedqParallel(ctx, goroutines, 0, n, perCall, size, func(int) redq.Queue { return q })
}

// EndToEnd fills a queue with cfg.N payloads (untimed, redqChunk per
// call), then times StartConsuming(cfg.Prefetch) and adding the consumers
// until every delivery is acked: cfg.Consumers consumers calling Ack, or
// one batch consumer of cfg.Batch calling Deliveries.Ack.
func (s *redqSystem) EndToEnd(ctx context.Context, e *env, cfg e2eConfig) (time.Duration, error) {
	return s.endToEnd(ctx, e, cfg, "e2e", func(ctx context.Context, _ redq.Connection, q redq.Queue) error {
		return fillRedq(ctx, q, 0, cfg.N, cfg.PayloadSize)
	})
}

// endToEnd is EndToEnd with the queue filled by fill (untimed), which must
// publish payloads 0..cfg.N-1 through conn into q (queue redqQueue). what
// names the run in errors.
func (s *redqSystem) endToEnd(ctx context.Context, e *env, cfg e2eConfig, what string,
	fill func(ctx context.Context, conn redq.Connection, q redq.Queue) error) (_ time.Duration, err error) {
	r := s.open(e, cfg.Consumers)
	defer closeRun(r, &err)
	conn, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if err := fill(ctx, conn, q); err != nil {
		return 0, fmt.Errorf("%s fill: %w", what, err)
	}
	tl := newTally(cfg.N)
	cpuStart(ctx)
	start := time.Now()
	if cfg.Batch > 0 {
		err = r.consumeBatches(q, cfg.Prefetch, cfg.Batch, r.batchAcker(tl), s.poll)
	} else {
		err = r.consume(q, cfg.Prefetch, cfg.Consumers, r.acker(tl, nil), s.poll)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if err := r.wait(ctx, tl, redqLimit(cfg.N)); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	elapsed := time.Since(start)
	cpuStop(ctx)
	if err := r.settled(ctx, conn, 0, redqQueue); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return elapsed, nil
}

// consumeBatches starts consuming q with prefetch and adds one batch
// consumer f of batch deliveries.
func (r *redqRun) consumeBatches(q redq.Queue, prefetch, batch int, f redq.BatchConsumerFunc, poll time.Duration) error {
	if err := q.StartConsuming(int64(max(prefetch, 1)), poll); err != nil {
		return fmt.Errorf("redq: start consuming: %w", err)
	}
	if _, err := q.AddBatchConsumerFunc("batch", int64(batch), redqBatchTimeout, f); err != nil {
		return fmt.Errorf("redq: add batch consumer: %w", err)
	}
	return nil
}

// settled stops every connection, checks through conn that the named
// queues hold ready deliveries each and nothing else, and closes the run.
func (r *redqRun) settled(ctx context.Context, conn redq.Connection, ready int, names ...string) error {
	return r.settledWith(ctx, conn, redqCounts{ready: ready}, names...)
}

// settledWith is settled for queues that must hold want.
func (r *redqRun) settledWith(ctx context.Context, conn redq.Connection, want redqCounts, names ...string) error {
	if err := r.stopAll(); err != nil {
		return err
	}
	if err := expectRedqCounts(ctx, conn, want, names...); err != nil {
		return err
	}
	return r.close()
}

// Steady runs cfg.Consumers consumers (prefetch cfg.Prefetch) while pace
// publishes one payload per PublishBytes call at cfg.Rate, then waits up
// to cfg.DrainLimit for the rest. A delivery's latency is taken right
// after its Ack returned, from the publish time in its payload.
func (s *redqSystem) Steady(ctx context.Context, e *env, cfg steadyConfig) (_ steadyResult, err error) {
	r := s.open(e, cfg.Producers+cfg.Consumers)
	defer closeRun(r, &err)
	conn, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		return steadyResult{}, fmt.Errorf("steady: %w", err)
	}
	// pace makes at most rate×d calls plus about two per producer.
	capacity := int(float64(cfg.Rate)*cfg.Duration.Seconds()*1.1) + 2*cfg.Producers + 16
	tl := newTally(capacity)
	rec := &latencyRecorder{}
	if err := r.consume(q, cfg.Prefetch, cfg.Consumers, r.acker(tl, rec.record), s.poll); err != nil {
		return steadyResult{}, fmt.Errorf("steady: %w", err)
	}
	cpuStart(ctx)
	start := time.Now()
	published, err := pace(ctx, cfg.Rate, cfg.Producers, cfg.Duration, func(seq int) error {
		if seq >= capacity {
			return fmt.Errorf("redq: steady run publishing more than the %d expected", capacity)
		}
		if err := q.PublishBytesContext(ctx, newPayload(seq, cfg.Payload)); err != nil {
			return fmt.Errorf("redq: publish payload %d: %w", seq, err)
		}
		return nil
	})
	if err != nil {
		return steadyResult{}, fmt.Errorf("steady publish: %w", err)
	}
	tl.expect(published)
	if err := r.wait(ctx, tl, cfg.DrainLimit); err != nil {
		return steadyResult{}, fmt.Errorf("steady: %w", err)
	}
	cpuStop(ctx)
	if err := r.settled(ctx, conn, 0, redqQueue); err != nil {
		return steadyResult{}, fmt.Errorf("steady: %w", err)
	}
	return rec.result(published, start), nil
}

// redqPickup is one idle delivery as the consumer saw it.
type redqPickup struct {
	seq int
	at  time.Time // when the consumer received it
}

// Idle consumes an empty queue with StartConsuming(1, poll) and one
// consumer and, samples times, sleeps gap, publishes one payload and
// waits for the consumer to receive it. The latency is from just before
// the publish call to the consumer's receipt (the consumer acks after
// noting the time). Two warm-up deliveries come first and are not counted.
func (s *redqSystem) Idle(ctx context.Context, e *env, samples int, gap time.Duration) (_ []time.Duration, err error) {
	r := s.open(e, 1)
	defer closeRun(r, &err)
	conn, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	total := redqIdleWarmups + samples
	tl := newTally(total)
	got := make(chan redqPickup, total)
	consumer := func(d redq.Delivery) {
		at := time.Now()
		seq, _, _ := parsePayload([]byte(d.Payload()))
		if err := d.Ack(); err != nil {
			r.fail(fmt.Errorf("redq: ack: %w", err))
			return
		}
		tl.see([]byte(d.Payload()))
		select {
		case got <- redqPickup{seq: seq, at: at}:
		default: // a duplicate beyond the buffer; tally reports it
		}
	}
	if err := r.consume(q, 1, 1, consumer, s.poll); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	lat := make([]time.Duration, 0, samples)
	for seq := range total {
		d, err := s.idleOne(ctx, r, q, seq, e.payloadSize, gap, got)
		if err != nil {
			return nil, fmt.Errorf("idle: %w", err)
		}
		if seq >= redqIdleWarmups {
			lat = append(lat, d)
		}
	}
	if err := tl.check(); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	if err := r.settled(ctx, conn, 0, redqQueue); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	return lat, nil
}

// idleOne sleeps gap, publishes payload seq into q and waits for its
// pickup on got, returning the time from the publish call to the pickup.
func (s *redqSystem) idleOne(ctx context.Context, r *redqRun, q redq.Queue, seq, size int, gap time.Duration, got <-chan redqPickup) (time.Duration, error) {
	if err := sleep(ctx, gap); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := q.PublishBytesContext(ctx, newPayload(seq, size)); err != nil {
		return 0, fmt.Errorf("redq: publish payload %d: %w", seq, err)
	}
	limit := s.poll + redqIdleWait
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case p := <-got:
		if p.seq != seq {
			return 0, fmt.Errorf("redq: consumer got payload %d, want %d", p.seq, seq)
		}
		return p.at.Sub(t0), nil
	case <-r.failed:
		return 0, r.err()
	case <-timer.C:
		return 0, fmt.Errorf("redq: payload %d not picked up within %s", seq, limit)
	case <-ctx.Done():
		return 0, fmt.Errorf("redq: waiting for payload %d: %w", seq, ctx.Err())
	}
}

// redqSeqs records the sequence numbers acked in a run that acks an
// unknown number beyond those it waits for. It is safe for concurrent use.
type redqSeqs struct {
	mu      sync.Mutex
	seen    []bool
	count   int
	dups    int
	unknown int
}

// newRedqSeqs returns a record for sequence numbers 0..n-1.
func newRedqSeqs(n int) *redqSeqs { return &redqSeqs{seen: make([]bool, n)} }

// see records payload p and returns its sequence number (-1 if p has none).
func (rs *redqSeqs) see(p []byte) int {
	seq, _, ok := parsePayload(p)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	switch {
	case !ok || seq < 0 || seq >= len(rs.seen):
		rs.unknown++
		return -1
	case rs.seen[seq]:
		rs.dups++
	default:
		rs.seen[seq] = true
		rs.count++
	}
	return seq
}

// check returns how many distinct payloads were seen, and an error when
// one was seen twice or an unknown one turned up.
func (rs *redqSeqs) check() (int, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.dups > 0 || rs.unknown > 0 {
		return rs.count, fmt.Errorf("acked %d payloads, %d duplicates, %d unknown", rs.count, rs.dups, rs.unknown)
	}
	return rs.count, nil
}

// Queued fills a queue with depth payloads (untimed), then times 10
// consumers (prefetch 1000) acking until the first k payloads are all
// acked, and stops consuming. A few more than k may be acked meanwhile;
// afterwards the queue must hold exactly depth minus those acked, and no
// payload may have been acked twice.
func (s *redqSystem) Queued(ctx context.Context, e *env, depth, k int) (_ time.Duration, err error) {
	if k > depth {
		return 0, fmt.Errorf("queued: k %d exceeds depth %d", k, depth)
	}
	r := s.open(e, redqWorkers)
	defer closeRun(r, &err)
	conn, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		return 0, fmt.Errorf("queued: %w", err)
	}
	if err := fillRedq(ctx, q, 0, depth, e.payloadSize); err != nil {
		return 0, fmt.Errorf("queued fill: %w", err)
	}
	first, all := newTally(k), newRedqSeqs(depth)
	consumer := func(d redq.Delivery) {
		if err := d.Ack(); err != nil {
			r.fail(fmt.Errorf("redq: ack: %w", err))
			return
		}
		if seq := all.see([]byte(d.Payload())); seq >= 0 && seq < k {
			first.see([]byte(d.Payload()))
		}
	}
	start := time.Now()
	if err := r.consume(q, redqWorkPrefetch, redqWorkers, consumer, s.poll); err != nil {
		return 0, fmt.Errorf("queued: %w", err)
	}
	if err := r.wait(ctx, first, redqLimit(k)); err != nil {
		return 0, fmt.Errorf("queued: first %d: %w", k, err)
	}
	elapsed := time.Since(start)
	if err := r.stopAll(); err != nil {
		return 0, fmt.Errorf("queued: %w", err)
	}
	acked, err := all.check()
	if err != nil {
		return 0, fmt.Errorf("queued: %w", err)
	}
	if err := r.settled(ctx, conn, depth-acked, redqQueue); err != nil {
		return 0, fmt.Errorf("queued: after %d acked: %w", acked, err)
	}
	return elapsed, nil
}

// redqHold is the state of an Unacked run: the held deliveries kept by the
// consumers and the ack times of the others.
type redqHold struct {
	mu         sync.Mutex
	held, k    int
	kept       []redq.Message
	allHeld    time.Time // when the last held delivery was taken
	acks       []time.Time
	heldDone   chan struct{}
	othersDone chan struct{}
}

// newRedqHold returns the state for held held and k other deliveries.
func newRedqHold(held, k int) *redqHold {
	h := &redqHold{held: held, k: k, heldDone: make(chan struct{}), othersDone: make(chan struct{})}
	if held == 0 {
		h.allHeld = time.Now()
		close(h.heldDone)
	}
	if k == 0 {
		close(h.othersDone)
	}
	return h
}

// keep stores a held delivery.
func (h *redqHold) keep(d redq.Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kept = append(h.kept, d)
	if len(h.kept) == h.held {
		h.allHeld = time.Now()
		close(h.heldDone)
	}
}

// heldDeliveries returns the held deliveries taken so far.
func (h *redqHold) heldDeliveries() []redq.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]redq.Message(nil), h.kept...)
}

// acked notes one other delivery acked now.
func (h *redqHold) acked() {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acks = append(h.acks, now)
	if len(h.acks) == h.k {
		close(h.othersDone)
	}
}

// perAck returns the time from the last held delivery taken to the last
// other ack, divided by the others acked in that time.
func (h *redqHold) perAck() (time.Duration, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var last time.Time
	in := 0
	for _, t := range h.acks {
		if !t.Before(h.allHeld) {
			in++
		}
		if t.After(last) {
			last = t
		}
	}
	if in == 0 {
		return 0, fmt.Errorf("all %d others were acked before the %d held ones were taken", len(h.acks), h.held)
	}
	return last.Sub(h.allHeld) / time.Duration(in), nil
}

// Unacked fills a queue with held+k payloads, the held ones (sequence
// numbers below held) first, and starts 10 consumers (prefetch 1000 more
// than held) that
// keep held deliveries unacked and ack the others. It returns the time
// from the last held delivery taken to the last other acked, divided by
// the others acked in that time. The held ones are then acked (untimed,
// redqChunk per Deliveries.Ack call) and everything is checked.
func (s *redqSystem) Unacked(ctx context.Context, e *env, held, k int) (_ time.Duration, err error) {
	r := s.open(e, redqWorkers)
	defer closeRun(r, &err)
	conn, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	if err := fillRedq(ctx, q, 0, held+k, e.payloadSize); err != nil {
		return 0, fmt.Errorf("unacked fill: %w", err)
	}
	tl, h := newTally(held+k), newRedqHold(held, k)
	consumer := func(d redq.Delivery) {
		if seq, _, ok := parsePayload([]byte(d.Payload())); ok && seq < held {
			h.keep(d.(redq.Message))
			return
		}
		if err := d.Ack(); err != nil {
			r.fail(fmt.Errorf("redq: ack: %w", err))
			return
		}
		tl.see([]byte(d.Payload()))
		h.acked()
	}
	// The prefetch limit bounds what the connection holds (as in rmq):
	// room for the held ones and a working buffer.
	if err := r.consume(q, redqWorkPrefetch+held, redqWorkers, consumer, s.poll); err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	if err := r.waitHold(ctx, h, redqLimit(held+k)); err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	per, err := h.perAck()
	if err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	if err := ackHeld(h.heldDeliveries(), tl); err != nil {
		return 0, fmt.Errorf("unacked: held: %w", err)
	}
	if err := r.wait(ctx, tl, time.Second); err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	if err := r.settled(ctx, conn, 0, redqQueue); err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	return per, nil
}

// waitHold waits until every held delivery was taken and every other one
// acked, the run fails, ctx ends or limit passes.
func (r *redqRun) waitHold(ctx context.Context, h *redqHold, limit time.Duration) error {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for _, done := range []<-chan struct{}{h.heldDone, h.othersDone} {
		select {
		case <-done:
		case <-r.failed:
			return r.err()
		case <-ctx.Done():
			return fmt.Errorf("waiting for held and acked deliveries: %w", ctx.Err())
		case <-timer.C:
			h.mu.Lock()
			defer h.mu.Unlock()
			return fmt.Errorf("after %s: %d of %d held taken, %d of %d others acked", limit, len(h.kept), h.held, len(h.acks), h.k)
		}
	}
	return r.err()
}

// ackHeld acks the held deliveries, redqChunk per Deliveries.Ack call, and
// records them in tl.
func ackHeld(kept []redq.Message, tl *tally) error {
	for len(kept) > 0 {
		chunk := redq.Deliveries(kept[:min(len(kept), redqChunk)])
		kept = kept[len(chunk):]
		if errs := chunk.Ack(); len(errs) > 0 {
			for i, err := range errs {
				return fmt.Errorf("redq: ack of %d held failed for %d, e.g. delivery %d: %w", len(chunk), len(errs), i, err)
			}
		}
		for _, d := range chunk {
			tl.see([]byte(d.Payload()))
		}
	}
	return nil
}

// ManyQueues fills queues queues with perQueue payloads each (untimed),
// then times one connection consuming all of them, each queue with
// StartConsuming(100, poll) and one acking consumer, until every delivery
// is acked.
func (s *redqSystem) ManyQueues(ctx context.Context, e *env, queues, perQueue int) (_ time.Duration, err error) {
	// The idle queues of a connection beyond its first few share one
	// waiting connection, so the pool needs no connection per queue.
	r := s.open(e, 0)
	defer closeRun(r, &err)
	conn, first, err := r.connect(ctx, redqManyName(0))
	if err != nil {
		return 0, fmt.Errorf("many queues: %w", err)
	}
	qs, names := []redq.Queue{first}, []string{redqManyName(0)}
	for i := 1; i < queues; i++ {
		q, err := conn.OpenQueue(redqManyName(i))
		if err != nil {
			return 0, fmt.Errorf("many queues: open queue %d: %w", i, err)
		}
		qs, names = append(qs, q), append(names, redqManyName(i))
	}
	for i, q := range qs {
		if err := fillRedq(ctx, q, i*perQueue, perQueue, e.payloadSize); err != nil {
			return 0, fmt.Errorf("many queues fill: %w", err)
		}
	}
	tl := newTally(queues * perQueue)
	start := time.Now()
	for _, q := range qs {
		if err := r.consume(q, redqManyPrefetch, 1, r.acker(tl, nil), s.poll); err != nil {
			return 0, fmt.Errorf("many queues: %w", err)
		}
	}
	if err := r.wait(ctx, tl, redqLimit(queues*perQueue)); err != nil {
		return 0, fmt.Errorf("many queues: %w", err)
	}
	elapsed := time.Since(start)
	if err := r.settled(ctx, conn, 0, names...); err != nil {
		return 0, fmt.Errorf("many queues: %w", err)
	}
	return elapsed, nil
}

// redqManyName names queue i of ManyQueues.
func redqManyName(i int) string { return fmt.Sprintf("%s-%d", redqQueue, i) }

// Recover has connection A take n deliveries with a consumer that never
// acks, waits until the consumer received all n, and stops A (its unacked
// deliveries stay behind, its heartbeat is deleted). It then times one
// Cleaner.CleanContext from a second connection B and checks that it
// returned n and that the queue holds n ready deliveries again.
func (s *redqSystem) Recover(ctx context.Context, e *env, n int) (_ time.Duration, err error) {
	r := s.open(e, 1)
	defer closeRun(r, &err)
	connA, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	connB, _, err := r.connect(ctx, redqQueue)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	if err := fillRedq(ctx, q, 0, n, e.payloadSize); err != nil {
		return 0, fmt.Errorf("recover fill: %w", err)
	}
	tl := newTally(n)
	neverAck := func(d redq.Delivery) { tl.see([]byte(d.Payload())) }
	// A never-acking consumer holds everything: the prefetch limit, which
	// bounds what the connection holds, must let it.
	if err := r.consume(q, max(redqWorkPrefetch, n), 1, neverAck, s.poll); err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	if err := r.wait(ctx, tl, redqLimit(n)); err != nil {
		return 0, fmt.Errorf("recover: taking: %w", err)
	}
	if err := r.stopConn(connA); err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	start := time.Now()
	returned, err := redq.NewCleaner(connB).CleanContext(ctx)
	elapsed := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("recover: clean: %w", err)
	}
	if returned != int64(n) {
		return 0, fmt.Errorf("recover: cleaner returned %d deliveries, want %d", returned, n)
	}
	if err := r.settled(ctx, connB, n, redqQueue); err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	return elapsed, nil
}

// Memory publishes n payloads of e.payloadSize bytes, redqChunk per call,
// with nobody consuming, and returns Redis's used_memory growth per
// delivery. One payload is published first, uncounted, so that the list
// and the publish path exist, and the client's connections are opened
// before the first reading.
func (s *redqSystem) Memory(ctx context.Context, e *env, n int) (_ float64, err error) {
	if n <= 0 {
		return 0, fmt.Errorf("memory: n %d must be positive", n)
	}
	r := s.open(e, 1)
	defer closeRun(r, &err)
	conn, q, err := r.connect(ctx, redqQueue)
	if err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	if err := openConns(ctx, r.rdb, 4); err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	if err := q.PublishBytesContext(ctx, newPayload(n, e.payloadSize)); err != nil {
		return 0, fmt.Errorf("memory warm-up: %w", err)
	}
	before, err := usedMemory(ctx, e.admin)
	if err != nil {
		return 0, fmt.Errorf("memory before: %w", err)
	}
	if err := fillRedq(ctx, q, 0, n, e.payloadSize); err != nil {
		return 0, fmt.Errorf("memory fill: %w", err)
	}
	after, err := usedMemory(ctx, e.admin)
	if err != nil {
		return 0, fmt.Errorf("memory after: %w", err)
	}
	if err := r.settled(ctx, conn, n+1, redqQueue); err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	return float64(after-before) / float64(n), nil
}
