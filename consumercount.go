package redq

import (
	"context"
	"sync"
	"time"
)

// countWriter records the consumer counts of a connection's queues (the
// connection's field of each queue's consumers hash, which the stats show)
// in the background, so that AddConsumer does not wait a round trip for
// it: a program that starts many queues one after the other waited two
// round trips per queue (StartConsuming's registration and the count),
// now one. The count is what the stats show and nothing else reads: the
// registration that the fetch script and the cleaner go by is written by
// StartConsuming, which waits for it, and a count write never registers a
// connection (set_consumers.lua writes only a registered connection's
// field), so a count that lands late cannot bring back a connection a
// cleaner removed.
//
// Writes are ordered per connection: one round at a time, each writing
// the queues marked since the last round with their counts as they are
// when the round starts, in one pipeline. A write that fails is made again
// in a later round (after a backoff) while its queue consumes.
// StopConsuming waits for the rounds under way before it writes 0, and
// CollectStats of the connection waits for them too, so that what the
// connection itself reads after AddConsumer returned includes the new
// consumer, as when AddConsumer waited for its write.
type countWriter struct {
	conn *redisConnection

	mu      sync.Mutex
	pending map[*redisQueue]bool // marked since the round under way began
	running bool                 // a round is under way or about to be
	marks   uint64               // numbers the marks
	written uint64               // every mark up to this one was tried
	round   chan struct{}        // closed when the round under way ends

	// beforeSend, when set, runs in each round after it read the counts
	// and before it sends them. Tests set it; a program cannot.
	beforeSend func()
}

// countWriteTimeout bounds one round of count writes.
const countWriteTimeout = 5 * time.Second

func newCountWriter(c *redisConnection) *countWriter {
	return &countWriter{conn: c, pending: map[*redisQueue]bool{}}
}

// mark has q's count written soon. The caller may hold q.mu.
func (w *countWriter) mark(q *redisQueue) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.marks++
	w.pending[q] = true
	if !w.running {
		w.running = true
		w.round = make(chan struct{})
		go w.loop()
	}
}

// await waits until every count marked before it was called has been
// tried once (written, or failed and left to a later round), or ctx ends.
func (w *countWriter) await(ctx context.Context) error {
	w.mu.Lock()
	target := w.marks
	w.mu.Unlock()
	for {
		w.mu.Lock()
		busy := w.running && w.written < target
		round := w.round
		w.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-round:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// loop writes rounds until nothing is marked.
func (w *countWriter) loop() {
	for fails := 0; ; {
		w.mu.Lock()
		if len(w.pending) == 0 {
			w.running = false
			close(w.round)
			w.mu.Unlock()
			return
		}
		batch, upTo := w.pending, w.marks
		w.pending = map[*redisQueue]bool{}
		w.mu.Unlock()

		var again []*redisQueue
		for _, q := range w.write(batch) {
			if q.isConsuming() { // else StopConsuming writes 0
				again = append(again, q)
			}
		}

		w.mu.Lock() // (never held while taking a queue's mu: see mark)
		for _, q := range again {
			w.pending[q] = true
		}
		w.written = upTo
		close(w.round)
		w.round = make(chan struct{})
		w.mu.Unlock()
		if len(again) == 0 {
			fails = 0
			continue
		}
		fails++
		time.Sleep(backoff(fails, time.Second))
	}
}

// write writes the counts of the queues of batch that still consume, in
// one pipeline, and returns those whose write failed.
func (w *countWriter) write(batch map[*redisQueue]bool) []*redisQueue {
	var qs []*redisQueue
	var calls []scriptCall
	name := w.conn.Name()
	for q := range batch {
		q.mu.Lock()
		n, consuming := q.consumers, q.state == stateConsuming
		q.mu.Unlock()
		if !consuming {
			continue // StopConsuming writes 0
		}
		qs = append(qs, q)
		calls = append(calls, scriptCall{script: scripts.setConsumers, keys: []string{q.keys.consumers}, args: []any{name, n, "0"}})
	}
	if len(calls) == 0 {
		return nil
	}
	if w.beforeSend != nil {
		w.beforeSend()
	}
	ctx, cancel := context.WithTimeout(context.Background(), countWriteTimeout)
	defer cancel()
	var failed []*redisQueue
	for i, cmd := range evalBatch(ctx, w.conn.client, calls) {
		if cmd.Err() != nil {
			failed = append(failed, qs[i])
		}
	}
	return failed
}

// isConsuming reports whether q consumes (StartConsuming ran, and
// StopConsuming did not).
func (q *redisQueue) isConsuming() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state == stateConsuming
}
