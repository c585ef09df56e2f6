package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// payloadHeader is the length of the sequence number and timestamp at the
// start of every payload: 16 hex digits each.
const payloadHeader = 32

// newPayload returns a payload of size bytes (at least payloadHeader) that
// carries seq and the current time, padded with 'x'.
func newPayload(seq, size int) []byte { return newPayloadAt(seq, size, time.Now()) }

// newPayloadAt is newPayload carrying time at instead of the current time
// (a scheduled delivery carries its due time).
func newPayloadAt(seq, size int, at time.Time) []byte {
	size = max(size, payloadHeader)
	b := make([]byte, 0, size)
	b = fmt.Appendf(b, "%016x%016x", uint64(seq), uint64(at.UnixNano()))
	for len(b) < size {
		b = append(b, 'x')
	}
	return b
}

// parsePayload returns the sequence number and publish time in p.
func parsePayload(p []byte) (seq int, at time.Time, ok bool) {
	if len(p) < payloadHeader {
		return 0, time.Time{}, false
	}
	s, err1 := strconv.ParseUint(string(p[:16]), 16, 64)
	ns, err2 := strconv.ParseUint(string(p[16:32]), 16, 64)
	if err1 != nil || err2 != nil {
		return 0, time.Time{}, false
	}
	return int(s), time.Unix(0, int64(ns)), true
}

// tally checks that every one of n payloads (sequence numbers 0..n-1) is
// consumed exactly once. It is safe for concurrent use.
type tally struct {
	mu      sync.Mutex
	seen    []bool
	want    int // payloads expected: sequence numbers 0..want-1
	count   int // distinct payloads seen
	dups    int
	unknown int
	closed  bool
	done    chan struct{}
}

// newTally returns a tally expecting sequence numbers 0..n-1.
func newTally(n int) *tally {
	t := &tally{seen: make([]bool, n), want: n, done: make(chan struct{})}
	t.closeIfDone()
	return t
}

// expect lowers the number of payloads expected to n, for runs that know
// how many they published only at the end (n must not exceed the size the
// tally was made with).
func (t *tally) expect(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.want = min(n, len(t.seen))
	t.closeIfDone()
}

func (t *tally) closeIfDone() {
	if !t.closed && t.count >= t.want {
		t.closed = true
		close(t.done)
	}
}

// see records one consumed payload and returns its publish time.
func (t *tally) see(p []byte) time.Time {
	seq, at, ok := parsePayload(p)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case !ok || seq < 0 || seq >= len(t.seen):
		t.unknown++
	case t.seen[seq]:
		t.dups++
	default:
		t.seen[seq] = true
		t.count++
		t.closeIfDone()
	}
	return at
}

// Done is closed once every payload has been seen.
func (t *tally) Done() <-chan struct{} { return t.done }

// wait waits until every payload has been seen, ctx ends or limit passes,
// and returns check's verdict.
func (t *tally) wait(ctx context.Context, limit time.Duration) error {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-t.done:
	case <-ctx.Done():
	case <-timer.C:
	}
	return t.check()
}

// check returns nil when every payload was seen exactly once and nothing
// else was consumed, else an error saying what is wrong.
func (t *tally) check() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	first, beyond := -1, 0
	for i, s := range t.seen {
		if !s && i < t.want && first < 0 {
			first = i
		}
		if s && i >= t.want {
			beyond++
		}
	}
	if first < 0 && beyond == 0 && t.dups == 0 && t.unknown == 0 {
		return nil
	}
	return fmt.Errorf("consumed %d of %d payloads (first missing: %d), %d duplicates, %d unknown, %d never published",
		t.count-beyond, t.want, first, t.dups, t.unknown, beyond)
}

// usedMemory returns Redis's used_memory in bytes.
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.InfoMap(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	v, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("INFO memory: used_memory: %w", err)
	}
	return v, nil
}

// connectionsReceived returns Redis's total_connections_received: the
// connections it accepted since it started. The difference over a run is
// how many connections the run opened (its clients' pools, dedicated
// connections and any dialled again), counted outside the timed part.
func connectionsReceived(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.InfoMap(ctx, "stats").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO stats: %w", err)
	}
	v, err := strconv.ParseInt(info["Stats"]["total_connections_received"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("INFO stats: total_connections_received: %w", err)
	}
	return v, nil
}

// pace calls publish(seq) for seq 0, 1, … at rate calls per second in
// total, spread over producers goroutines, until d has passed or ctx
// ends, and returns how many calls were made. Each producer keeps to its
// own schedule (it does not try to catch up a burst it missed by more
// than a second). The first error stops all producers and is returned.
func pace(ctx context.Context, rate, producers int, d time.Duration, publish func(seq int) error) (int, error) {
	if rate <= 0 || producers <= 0 {
		return 0, fmt.Errorf("pace: rate %d and producers %d must be positive", rate, producers)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	interval := time.Duration(float64(time.Second) * float64(producers) / float64(rate))
	start := time.Now()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		next     atomic.Int64
	)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			due := start.Add(time.Duration(p) * interval / time.Duration(producers))
			for ctx.Err() == nil && time.Since(start) < d {
				if wait := time.Until(due); wait > 0 {
					select {
					case <-time.After(wait):
					case <-ctx.Done():
						return
					}
				} else if wait < -time.Second {
					due = time.Now()
				}
				if err := publish(int(next.Add(1) - 1)); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				due = due.Add(interval)
			}
		}(p)
	}
	wg.Wait()
	return int(next.Load()), firstErr
}

// parallel calls f(ctx, i) for i 0..n-1 from workers goroutines, each
// taking the next i, and returns the first error, which stops the others
// (a call already running finishes). It returns ctx's error if ctx ended
// before every call was made.
func parallel(ctx context.Context, workers, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(ctx, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
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
	if int(next.Load()) < n {
		return fmt.Errorf("stopped after %d of %d calls: %w", min(int(next.Load()), n), n, context.Cause(ctx))
	}
	return nil
}

// latencyRecorder collects the publish→ack latencies and the last ack time
// of a steady run. It is safe for concurrent use.
type latencyRecorder struct {
	mu        sync.Mutex
	latencies []time.Duration
	last      time.Time
}

// record notes one delivery acked now that was published at.
func (r *latencyRecorder) record(at time.Time) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latencies = append(r.latencies, now.Sub(at))
	if now.After(r.last) {
		r.last = now
	}
}

// openConns makes rdb's pool hold k open connections, so that connections
// opened while filling do not count as data in a memory reading.
func openConns(ctx context.Context, rdb *redis.Client, k int) error {
	conns := make([]*redis.Conn, 0, k)
	defer func() {
		for _, c := range conns {
			_ = c.Close() // returns the connection to the pool
		}
	}()
	for range k {
		c := rdb.Conn()
		conns = append(conns, c)
		if err := c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("open connection: %w", err)
		}
	}
	return nil
}

// sleep waits d or until ctx ends, and returns ctx's error in that case.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// result is the steady run's outcome: published deliveries, and the
// latencies and elapsed time (start to the last ack) recorded so far.
func (r *latencyRecorder) result(published int, start time.Time) steadyResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return steadyResult{
		Published: published,
		Consumed:  len(r.latencies),
		Elapsed:   r.last.Sub(start),
		Latencies: r.latencies,
	}
}
