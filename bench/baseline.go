package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Helpers shared by the hand-written baselines (streams.go, list.go).

const (
	// baseFillChunk is the number of payloads per round trip when filling.
	baseFillChunk = 1000
	// baseFillBytes bounds the payload bytes of one fill round trip.
	baseFillBytes = 4 << 20
	// baseMaxRead is how many deliveries a single-delivery reader fetches
	// at most per call.
	baseMaxRead = 100
	// baseWorkers is the number of consumers in Queued, Unacked and ManyQueues.
	baseWorkers = 10
	// baseIdleWarmups are idle deliveries made before measuring.
	baseIdleWarmups = 2
	// baseIdleWait bounds the wait for one idle pickup.
	baseIdleWait = 10 * time.Second
)

// baseKeyPrefix returns a key prefix no earlier run used, so that runs on
// an unflushed database (as in tests) never see each other's keys.
func baseKeyPrefix(system string) string {
	return "redq-bench:" + system + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// baseConsumer returns the name of consumer i.
func baseConsumer(i int) string { return "c" + strconv.Itoa(i) }

// baseChunk returns how many payloads of size bytes go in one fill round trip.
func baseChunk(size int) int {
	return max(1, min(baseFillChunk, baseFillBytes/max(size, 1)))
}

// baseReadCount returns how many deliveries a single-delivery reader
// fetches per call: 100, or prefetch when that is smaller and positive.
func baseReadCount(prefetch int) int {
	if prefetch > 0 {
		return min(baseMaxRead, prefetch)
	}
	return baseMaxRead
}

// baseDrainLimit bounds the wait for n deliveries to be consumed.
func baseDrainLimit(n int) time.Duration {
	return time.Minute + time.Duration(n)*time.Millisecond
}

// baseE2EWorkers returns how many consumers an end-to-end run starts:
// one batch consumer when cfg.Batch is set, else cfg.Consumers.
func baseE2EWorkers(cfg e2eConfig) (int, error) {
	switch {
	case cfg.N <= 0:
		return 0, fmt.Errorf("the delivery count %d must be positive", cfg.N)
	case cfg.Batch > 0:
		return 1, nil
	case cfg.Consumers > 0:
		return cfg.Consumers, nil
	}
	return 0, fmt.Errorf("neither Batch (%d) nor Consumers (%d) is positive", cfg.Batch, cfg.Consumers)
}

// baseCrew runs consumer goroutines until stopped and keeps the first
// error any of them returns while not stopped.
type baseCrew struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
	failed chan struct{} // closed once err is set
}

// newBaseCrew returns a crew whose goroutines stop when ctx ends.
func newBaseCrew(ctx context.Context) *baseCrew {
	ctx, cancel := context.WithCancel(ctx)
	return &baseCrew{ctx: ctx, cancel: cancel, failed: make(chan struct{})}
}

// run starts n goroutines running loop(ctx, i). An error loop returns
// before the crew is stopped stops the whole crew.
func (c *baseCrew) run(n int, loop func(ctx context.Context, i int) error) {
	for i := range n {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			if err := loop(c.ctx, i); err != nil && c.ctx.Err() == nil {
				c.fail(err)
			}
		}()
	}
}

// fail records err (if it is the first), stops the crew and closes failed.
func (c *baseCrew) fail(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.failed)
		c.cancel()
	})
}

// wait waits for every goroutine to return by itself and returns the
// first error.
func (c *baseCrew) wait() error {
	c.wg.Wait()
	c.cancel()
	return c.firstErr()
}

// stop stops every goroutine, waits for them and returns the first error.
func (c *baseCrew) stop() error {
	c.cancel()
	return c.wait()
}

// firstErr returns the first error recorded, if any.
func (c *baseCrew) firstErr() error {
	select {
	case <-c.failed:
		return c.err
	default:
		return nil
	}
}

// baseAwait waits until done is closed (nil), a goroutine of c fails (its
// error), ctx ends or limit passes (an error saying what check reports
// missing).
func baseAwait(ctx context.Context, done <-chan struct{}, c *baseCrew, limit time.Duration, check func() error) error {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-c.failed:
		return c.err
	case <-ctx.Done():
		if err := check(); err != nil {
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		}
	case <-timer.C:
		if err := check(); err != nil {
			return fmt.Errorf("not done within %s: %w", limit, err)
		}
	}
	return nil
}

// baseConsume starts workers consumers running loop and returns the time
// from starting them until t has seen every payload; then it stops them.
func baseConsume(ctx context.Context, workers int, t *tally, limit time.Duration, loop func(ctx context.Context, i int) error) (time.Duration, error) {
	c := newBaseCrew(ctx)
	cpuStart(ctx)
	start := time.Now()
	c.run(workers, loop)
	err := baseAwait(ctx, t.Done(), c, limit, t.check)
	d := time.Since(start)
	cpuStop(ctx)
	if serr := c.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return 0, fmt.Errorf("consume: %w", err)
	}
	return d, nil
}

// basePublish publishes payloads 0..n-1 of size bytes from goroutines
// goroutines, perCall payloads per call of publish, and returns the
// elapsed time.
func basePublish(ctx context.Context, n, goroutines, perCall, size int, publish func(ctx context.Context, payloads [][]byte) error) (time.Duration, error) {
	if n <= 0 || goroutines <= 0 || perCall <= 0 {
		return 0, fmt.Errorf("n %d, goroutines %d and perCall %d must be positive", n, goroutines, perCall)
	}
	calls := (n + perCall - 1) / perCall
	var next atomic.Int64
	c := newBaseCrew(ctx)
	cpuStart(ctx)
	start := time.Now()
	c.run(goroutines, func(ctx context.Context, _ int) error {
		for ctx.Err() == nil {
			call := int(next.Add(1) - 1)
			if call >= calls {
				return nil
			}
			from, to := call*perCall, min((call+1)*perCall, n)
			payloads := make([][]byte, 0, to-from)
			for seq := from; seq < to; seq++ {
				payloads = append(payloads, newPayload(seq, size))
			}
			if err := publish(ctx, payloads); err != nil {
				return err
			}
		}
		return nil
	})
	err := c.wait()
	d := time.Since(start)
	cpuStop(ctx)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("publishing stopped: %w", err)
	}
	return d, nil
}

// baseSteady starts cfg.Consumers goroutines running consume, each
// calling seen with every payload once it is acked, while pace publishes
// at cfg.Rate through publish; then it waits up to cfg.DrainLimit for the
// rest and stops the consumers.
func baseSteady(ctx context.Context, cfg steadyConfig,
	consume func(ctx context.Context, i int, seen func(p []byte)) error,
	publish func(ctx context.Context, p []byte) error,
) (steadyResult, error) {
	if cfg.Consumers <= 0 {
		return steadyResult{}, fmt.Errorf("consumers %d must be positive", cfg.Consumers)
	}
	// pace makes at most rate×d calls plus about two per producer.
	capacity := int(float64(cfg.Rate)*cfg.Duration.Seconds()*1.1) + 2*cfg.Producers + 16
	t := newTally(capacity)
	rec := &latencyRecorder{}
	seen := func(p []byte) { rec.record(t.see(p)) }
	c := newBaseCrew(ctx)
	c.run(cfg.Consumers, func(ctx context.Context, i int) error { return consume(ctx, i, seen) })
	cpuStart(ctx)
	start := time.Now()
	published, err := pace(c.ctx, cfg.Rate, cfg.Producers, cfg.Duration, func(seq int) error {
		if seq >= capacity {
			return fmt.Errorf("publishing more than the %d expected", capacity)
		}
		return publish(c.ctx, newPayload(seq, cfg.Payload))
	})
	if err == nil {
		t.expect(published)
		err = baseAwait(ctx, t.Done(), c, cfg.DrainLimit, t.check)
		cpuStop(ctx)
	}
	if cerr := c.stop(); cerr != nil {
		err = cerr // a consumer's failure explains a stopped publisher
	}
	if err != nil {
		return steadyResult{}, err
	}
	return rec.result(published, start), nil
}

// basePickup is one idle delivery as the consumer received it.
type basePickup struct {
	seq int
	at  time.Time // when the consumer's read returned it
}

// basePicked records an idle delivery p received at: it is tallied and
// handed to the waiting publisher on got.
func basePicked(t *tally, got chan<- basePickup, p []byte, at time.Time) {
	seq, _, _ := parsePayload(p)
	t.see(p)
	select {
	case got <- basePickup{seq: seq, at: at}:
	default: // a duplicate beyond the buffer; t reports it
	}
}

// baseIdle starts one consumer running reader (which reports each
// delivery with basePicked on got) and, for two warm-ups and then
// samples deliveries, sleeps gap, publishes one and waits for its pickup.
// It returns the samples' publish→pickup latencies and t's verdict.
func baseIdle(ctx context.Context, samples int, gap time.Duration, t *tally,
	reader func(ctx context.Context, i int) error,
	publish func(ctx context.Context, seq int) error, got <-chan basePickup,
) ([]time.Duration, error) {
	c := newBaseCrew(ctx)
	c.run(1, reader)
	lat, err := baseIdleSamples(c, samples, gap, publish, got)
	if serr := c.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return lat, nil
}

// baseIdleSamples publishes the idle deliveries one by one while c's
// consumer runs and returns the latencies after the warm-ups.
func baseIdleSamples(c *baseCrew, samples int, gap time.Duration, publish func(ctx context.Context, seq int) error, got <-chan basePickup) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, samples)
	for seq := range baseIdleWarmups + samples {
		if err := sleep(c.ctx, gap); err != nil {
			return nil, baseCrewErr(c, err)
		}
		t0 := time.Now()
		if err := publish(c.ctx, seq); err != nil {
			return nil, baseCrewErr(c, err)
		}
		p, err := baseNextPickup(c, got)
		if err != nil {
			return nil, fmt.Errorf("waiting for delivery %d: %w", seq, err)
		}
		if p.seq != seq {
			return nil, fmt.Errorf("consumer received delivery %d, want %d", p.seq, seq)
		}
		if seq >= baseIdleWarmups {
			lat = append(lat, p.at.Sub(t0))
		}
	}
	return lat, nil
}

// baseNextPickup waits for the next pickup on got, at most baseIdleWait.
func baseNextPickup(c *baseCrew, got <-chan basePickup) (basePickup, error) {
	timer := time.NewTimer(baseIdleWait)
	defer timer.Stop()
	select {
	case p := <-got:
		return p, nil
	case <-timer.C:
		return basePickup{}, fmt.Errorf("not received within %s", baseIdleWait)
	case <-c.ctx.Done():
		return basePickup{}, baseCrewErr(c, c.ctx.Err())
	}
}

// baseCrewErr returns c's first error if one of its goroutines failed,
// else err.
func baseCrewErr(c *baseCrew, err error) error {
	if cerr := c.firstErr(); cerr != nil {
		return cerr
	}
	return err
}

// baseHeldClock times the acks of an Unacked run: the clock starts when
// the last of held deliveries has been taken and stops at the last of k
// acks of the others; acks before the start do not count.
type baseHeldClock struct {
	held, k int
	mu      sync.Mutex
	nTaken  int
	nAcked  int
	before  int // others acked before the clock started
	start   time.Time
	last    time.Time
	done    chan struct{} // closed at the k-th ack
}

// newBaseHeldClock returns a clock for held held deliveries and k others.
func newBaseHeldClock(held, k int) *baseHeldClock {
	return &baseHeldClock{held: held, k: k, done: make(chan struct{})}
}

// begin is called as the consumers start: with nothing to hold, the
// clock starts now.
func (h *baseHeldClock) begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == 0 {
		h.start = time.Now()
	}
}

// taken notes one held delivery taken (and kept unacked).
func (h *baseHeldClock) taken() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nTaken++
	if h.nTaken == h.held {
		h.start = time.Now()
		h.before = h.nAcked
	}
}

// acked notes one of the others acked.
func (h *baseHeldClock) acked() {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nAcked++
	h.last = now
	if h.nAcked == h.k {
		close(h.done)
	}
}

// check says how far the run got when it is not done.
func (h *baseHeldClock) check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nAcked >= h.k && h.nTaken >= h.held {
		return nil
	}
	return fmt.Errorf("took %d of %d held deliveries, acked %d of %d others", h.nTaken, h.held, h.nAcked, h.k)
}

// perAck returns the time from the start to the last ack divided by the
// acks in it.
func (h *baseHeldClock) perAck() (time.Duration, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nTaken != h.held {
		return 0, fmt.Errorf("took %d held deliveries, want %d", h.nTaken, h.held)
	}
	n := h.nAcked - h.before
	if n <= 0 || !h.last.After(h.start) {
		return 0, fmt.Errorf("all %d others were acked before the last held delivery was taken", h.nAcked)
	}
	return h.last.Sub(h.start) / time.Duration(n), nil
}

// baseRunHeld runs baseWorkers consumers running loop (which calls
// clock.taken and clock.acked) until clock has seen all k acks, stops
// them and returns the per-ack cost.
func baseRunHeld(ctx context.Context, clock *baseHeldClock, loop func(ctx context.Context, i int) error) (time.Duration, error) {
	c := newBaseCrew(ctx)
	clock.begin()
	c.run(baseWorkers, loop)
	err := baseAwait(ctx, clock.done, c, baseDrainLimit(clock.k), clock.check)
	if serr := c.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return 0, err
	}
	return clock.perAck()
}

// baseMemory returns Redis's used_memory growth over fill divided by n.
func baseMemory(ctx context.Context, e *env, n int, fill func() error) (float64, error) {
	before, err := usedMemory(ctx, e.admin)
	if err != nil {
		return 0, fmt.Errorf("before: %w", err)
	}
	if err := fill(); err != nil {
		return 0, err
	}
	after, err := usedMemory(ctx, e.admin)
	if err != nil {
		return 0, fmt.Errorf("after: %w", err)
	}
	return float64(after-before) / float64(n), nil
}
