package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file holds the hand-written Redis Streams loop and, at its end, the
// helpers it shares with the list queue in list.go (names starting with
// "base"): both are what a user would write with go-redis instead of using
// a queue library.

const (
	// streamsField is the field of every stream entry that holds the payload.
	streamsField = "p"
	// streamsGroup is the consumer group every reader belongs to.
	streamsGroup = "g"
	// streamsBlock is how long a reader's XREADGROUP waits for new entries.
	streamsBlock = 100 * time.Millisecond
	// streamsIdleBlock is the XREADGROUP wait of the Idle reader.
	streamsIdleBlock = time.Second
	// streamsClaimCount is the COUNT of one XAUTOCLAIM call in Recover.
	streamsClaimCount = 1000
	// streamsRangeCount is the COUNT of one XRANGE call when checking contents.
	streamsRangeCount = 10_000
)

// streamsSystem is the hand-written Streams loop: XADD to publish, readers
// in one consumer group with XREADGROUP, XACK to ack, XAUTOCLAIM to take
// over the entries of a dead consumer.
type streamsSystem struct{}

// newStreams returns the Streams system.
func newStreams() system { return streamsSystem{} }

// Name returns "streams".
func (streamsSystem) Name() string { return "streams" }

// streamsRun is what one measurement opened: a client and its own streams,
// each with the consumer group created.
type streamsRun struct {
	rdb      *redis.Client
	keys     []string
	readArgs []string // keys then one ">" per key, for XREADGROUP
}

// openStreams returns a run with a client whose pool holds at least pool
// connections and nkeys new streams, each with the group created at 0.
func openStreams(ctx context.Context, e *env, pool, nkeys int) (*streamsRun, error) {
	if nkeys < 1 {
		return nil, fmt.Errorf("streams: %d streams: need at least one", nkeys)
	}
	prefix := baseKeyPrefix("streams")
	r := &streamsRun{rdb: e.newClient(pool)}
	for i := range nkeys {
		r.keys = append(r.keys, prefix+":"+strconv.Itoa(i))
	}
	r.readArgs = append(r.readArgs, r.keys...)
	for range r.keys {
		r.readArgs = append(r.readArgs, ">")
	}
	pipe := r.rdb.Pipeline()
	for _, k := range r.keys {
		pipe.XGroupCreateMkStream(ctx, k, streamsGroup, "0")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		_ = r.rdb.Close()
		return nil, fmt.Errorf("streams: XGROUP CREATE: %w", err)
	}
	return r, nil
}

// close closes the run's client.
func (r *streamsRun) close() { _ = r.rdb.Close() }

// add XADDs one payload to key.
func (r *streamsRun) add(ctx context.Context, key string, p []byte) error {
	if err := r.rdb.XAdd(ctx, streamsAddArgs(key, p)).Err(); err != nil {
		return fmt.Errorf("streams: XADD %s: %w", key, err)
	}
	return nil
}

// addPipelined XADDs payloads to key in one pipeline.
func (r *streamsRun) addPipelined(ctx context.Context, key string, payloads [][]byte) error {
	pipe := r.rdb.Pipeline()
	for _, p := range payloads {
		pipe.XAdd(ctx, streamsAddArgs(key, p))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("streams: pipelined XADD %s: %w", key, err)
	}
	return nil
}

// streamsAddArgs returns the XADD arguments for payload p (ID *, no MAXLEN).
func streamsAddArgs(key string, p []byte) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: key, Values: []any{streamsField, p}}
}

// fill XADDs payloads with sequence numbers from..to-1 of size bytes, in
// that order, payload seq going to keyOf(seq), in pipelines (untimed).
func (r *streamsRun) fill(ctx context.Context, from, to, size int, keyOf func(seq int) string) error {
	chunk := baseChunk(size)
	for lo := from; lo < to; lo += chunk {
		pipe := r.rdb.Pipeline()
		for seq := lo; seq < min(lo+chunk, to); seq++ {
			pipe.XAdd(ctx, streamsAddArgs(keyOf(seq), newPayload(seq, size)))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("streams: fill: %w", err)
		}
	}
	return nil
}

// one returns a keyOf function for fill that sends everything to the first stream.
func (r *streamsRun) one() func(int) string {
	return func(int) string { return r.keys[0] }
}

// read reads up to count new entries per stream for consumer from every
// stream of the run, waiting up to block (no wait when block < 0). It
// returns nil when nothing arrived.
func (r *streamsRun) read(ctx context.Context, consumer string, count int, block time.Duration) ([]redis.XStream, error) {
	res, err := r.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: streamsGroup, Consumer: consumer, Streams: r.readArgs, Count: int64(count), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("streams: XREADGROUP as %s: %w", consumer, err)
	}
	return res, nil
}

// ack XACKs ids of key and checks that each of them was pending.
func (r *streamsRun) ack(ctx context.Context, key string, ids ...string) error {
	n, err := r.rdb.XAck(ctx, key, streamsGroup, ids...).Result()
	if err != nil {
		return fmt.Errorf("streams: XACK %s: %w", key, err)
	}
	if n != int64(len(ids)) {
		return fmt.Errorf("streams: XACK %s acked %d of %d entries", key, n, len(ids))
	}
	return nil
}

// streamsPayload returns the payload of entry m.
func streamsPayload(m redis.XMessage) ([]byte, error) {
	v, ok := m.Values[streamsField].(string)
	if !ok {
		return nil, fmt.Errorf("streams: entry %s has no field %q", m.ID, streamsField)
	}
	return []byte(v), nil
}

// streamsHandler processes one entry of stream key read by a consumer.
type streamsHandler func(ctx context.Context, key string, m redis.XMessage) error

// consume is a single-delivery consumer: it reads up to count entries at a
// time and hands them to handle one by one, until ctx ends or handle fails.
func (r *streamsRun) consume(ctx context.Context, consumer string, count int, block time.Duration, handle streamsHandler) error {
	for ctx.Err() == nil {
		res, err := r.read(ctx, consumer, count, block)
		if err != nil {
			return err
		}
		for _, s := range res {
			for _, m := range s.Messages {
				if err := handle(ctx, s.Stream, m); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ackEach returns the handler of a plain single-delivery consumer: XACK the
// entry, then pass its payload to then.
func (r *streamsRun) ackEach(then func(p []byte)) streamsHandler {
	return func(ctx context.Context, key string, m redis.XMessage) error {
		p, err := streamsPayload(m)
		if err != nil {
			return err
		}
		if err := r.ack(ctx, key, m.ID); err != nil {
			return err
		}
		then(p)
		return nil
	}
}

// consumeBatches is a batch consumer: it reads up to size entries, XACKs
// them with one call per stream, then passes each payload to then.
func (r *streamsRun) consumeBatches(ctx context.Context, consumer string, size int, then func(p []byte)) error {
	for ctx.Err() == nil {
		res, err := r.read(ctx, consumer, size, streamsBlock)
		if err != nil {
			return err
		}
		for _, s := range res {
			if len(s.Messages) == 0 {
				continue
			}
			ids := make([]string, len(s.Messages))
			payloads := make([][]byte, len(s.Messages))
			for i, m := range s.Messages {
				if payloads[i], err = streamsPayload(m); err != nil {
					return err
				}
				ids[i] = m.ID
			}
			if err := r.ack(ctx, s.Stream, ids...); err != nil {
				return err
			}
			for _, p := range payloads {
				then(p)
			}
		}
	}
	return nil
}

// pending returns the number of entries read but not acked over all
// streams of the run, and the count per consumer.
func (r *streamsRun) pending(ctx context.Context) (int64, map[string]int64, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.XPendingCmd, len(r.keys))
	for i, k := range r.keys {
		cmds[i] = pipe.XPending(ctx, k, streamsGroup)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, nil, fmt.Errorf("streams: XPENDING: %w", err)
	}
	var total int64
	per := map[string]int64{}
	for _, c := range cmds {
		total += c.Val().Count
		for name, n := range c.Val().Consumers {
			per[name] += n
		}
	}
	return total, per, nil
}

// expectAllAcked checks that no entry of the run is pending.
func (r *streamsRun) expectAllAcked(ctx context.Context) error {
	n, _, err := r.pending(ctx)
	if err != nil {
		return err
	}
	if n != 0 {
		return fmt.Errorf("streams: %d entries still pending (read, not acked)", n)
	}
	return nil
}

// verify reads key from start to end with XRANGE and passes every payload
// to t, then returns t's verdict.
func (r *streamsRun) verify(ctx context.Context, key string, t *tally) error {
	start := "-"
	for {
		msgs, err := r.rdb.XRangeN(ctx, key, start, "+", streamsRangeCount).Result()
		if err != nil {
			return fmt.Errorf("streams: XRANGE %s: %w", key, err)
		}
		for _, m := range msgs {
			p, err := streamsPayload(m)
			if err != nil {
				return err
			}
			t.see(p)
		}
		if len(msgs) < streamsRangeCount {
			return t.check()
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// Publish XADDs n payloads from goroutines goroutines: one XADD per call
// when perCall is 1, else perCall XADDs in one pipeline per call. The
// stream is then read back to check that it holds each payload once.
func (streamsSystem) Publish(ctx context.Context, e *env, n, goroutines, perCall int) (time.Duration, error) {
	r, err := openStreams(ctx, e, goroutines+2, 1)
	if err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	defer r.close()
	key := r.keys[0]
	d, err := basePublish(ctx, n, goroutines, perCall, e.payloadSize, func(ctx context.Context, payloads [][]byte) error {
		if len(payloads) == 1 {
			return r.add(ctx, key, payloads[0])
		}
		return r.addPipelined(ctx, key, payloads)
	})
	if err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	if err := r.verify(ctx, key, newTally(n)); err != nil {
		return 0, fmt.Errorf("publish: stream contents: %w", err)
	}
	return d, nil
}

// EndToEnd fills a stream with cfg.N entries (pipelined, untimed), then
// times consuming and acking all of them: with cfg.Batch one reader that
// reads cfg.Batch entries and XACKs them in one call, else cfg.Consumers
// readers that read min(100, cfg.Prefetch) entries at a time and XACK
// each one after processing it.
func (streamsSystem) EndToEnd(ctx context.Context, e *env, cfg e2eConfig) (time.Duration, error) {
	workers, err := baseE2EWorkers(cfg)
	if err != nil {
		return 0, fmt.Errorf("e2e: %w", err)
	}
	r, err := openStreams(ctx, e, workers+2, 1)
	if err != nil {
		return 0, fmt.Errorf("e2e: %w", err)
	}
	defer r.close()
	if err := r.fill(ctx, 0, cfg.N, cfg.PayloadSize, r.one()); err != nil {
		return 0, fmt.Errorf("e2e: %w", err)
	}
	t := newTally(cfg.N)
	see := func(p []byte) { t.see(p) }
	loop := func(ctx context.Context, i int) error {
		if cfg.Batch > 0 {
			return r.consumeBatches(ctx, baseConsumer(i), cfg.Batch, see)
		}
		return r.consume(ctx, baseConsumer(i), baseReadCount(cfg.Prefetch), streamsBlock, r.ackEach(see))
	}
	d, err := baseConsume(ctx, workers, t, baseDrainLimit(cfg.N), loop)
	if err != nil {
		return 0, fmt.Errorf("e2e: %w", err)
	}
	if err := r.expectAllAcked(ctx); err != nil {
		return 0, fmt.Errorf("e2e: %w", err)
	}
	return d, nil
}

// Steady runs cfg.Consumers readers (as in EndToEnd) while pace XADDs one
// entry per publish; a delivery's latency is taken once its XACK returned.
func (streamsSystem) Steady(ctx context.Context, e *env, cfg steadyConfig) (steadyResult, error) {
	r, err := openStreams(ctx, e, cfg.Consumers+cfg.Producers+2, 1)
	if err != nil {
		return steadyResult{}, fmt.Errorf("steady: %w", err)
	}
	defer r.close()
	key := r.keys[0]
	consume := func(ctx context.Context, i int, seen func(p []byte)) error {
		return r.consume(ctx, baseConsumer(i), baseReadCount(cfg.Prefetch), streamsBlock, r.ackEach(seen))
	}
	publish := func(ctx context.Context, p []byte) error { return r.add(ctx, key, p) }
	res, err := baseSteady(ctx, cfg, consume, publish)
	if err != nil {
		return steadyResult{}, fmt.Errorf("steady: %w", err)
	}
	if err := r.expectAllAcked(ctx); err != nil {
		return steadyResult{}, fmt.Errorf("steady: %w", err)
	}
	return res, nil
}

// Idle runs one reader looping on XREADGROUP COUNT 1 BLOCK 1s over an
// empty stream and, samples times, sleeps gap, XADDs one entry and waits
// for the reader to receive it. The latency is from just before XADD to
// the reader's XREADGROUP returning it. Two warm-ups come first.
func (streamsSystem) Idle(ctx context.Context, e *env, samples int, gap time.Duration) ([]time.Duration, error) {
	r, err := openStreams(ctx, e, 3, 1)
	if err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	defer r.close()
	key := r.keys[0]
	t := newTally(baseIdleWarmups + samples)
	got := make(chan basePickup, baseIdleWarmups+samples)
	reader := func(ctx context.Context, i int) error {
		return r.consume(ctx, baseConsumer(i), 1, streamsIdleBlock, func(ctx context.Context, key string, m redis.XMessage) error {
			at := time.Now()
			p, err := streamsPayload(m)
			if err != nil {
				return err
			}
			if err := r.ack(ctx, key, m.ID); err != nil {
				return err
			}
			basePicked(t, got, p, at)
			return nil
		})
	}
	publish := func(ctx context.Context, seq int) error { return r.add(ctx, key, newPayload(seq, e.payloadSize)) }
	lat, err := baseIdle(ctx, samples, gap, t, reader, publish, got)
	if err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	if err := r.expectAllAcked(ctx); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	return lat, nil
}

// Queued fills a stream with depth entries (in sequence order, untimed),
// then times 10 readers (as in EndToEnd, 100 per read) consuming and
// acking the first k. Entries beyond the first k that a reader happens to
// read are left pending; the harness flushes them.
func (streamsSystem) Queued(ctx context.Context, e *env, depth, k int) (time.Duration, error) {
	if k <= 0 || k > depth {
		return 0, fmt.Errorf("queued: k %d must be in 1..depth (%d)", k, depth)
	}
	r, err := openStreams(ctx, e, baseWorkers+2, 1)
	if err != nil {
		return 0, fmt.Errorf("queued: %w", err)
	}
	defer r.close()
	if err := r.fill(ctx, 0, depth, e.payloadSize, r.one()); err != nil {
		return 0, fmt.Errorf("queued: %w", err)
	}
	t := newTally(k)
	plain := r.ackEach(func(p []byte) { t.see(p) })
	handle := func(ctx context.Context, key string, m redis.XMessage) error {
		p, err := streamsPayload(m)
		if err != nil {
			return err
		}
		if seq, _, ok := parsePayload(p); ok && seq >= k {
			return nil // not one of the first k: left pending
		}
		return plain(ctx, key, m)
	}
	loop := func(ctx context.Context, i int) error {
		return r.consume(ctx, baseConsumer(i), baseReadCount(0), streamsBlock, handle)
	}
	d, err := baseConsume(ctx, baseWorkers, t, baseDrainLimit(k), loop)
	if err != nil {
		return 0, fmt.Errorf("queued: %w", err)
	}
	return d, nil
}

// Unacked fills a stream with held+k entries (the held ones first), then
// runs 10 readers (as in Queued): an entry with a sequence number below
// held is kept pending, the others are XACKed. It returns the per-ack
// cost measured by baseHeldClock; the held entries are XACKed afterwards
// and the whole stream checked.
func (streamsSystem) Unacked(ctx context.Context, e *env, held, k int) (time.Duration, error) {
	if held < 0 || k <= 0 {
		return 0, fmt.Errorf("unacked: held %d must not be negative and k %d must be positive", held, k)
	}
	r, err := openStreams(ctx, e, baseWorkers+2, 1)
	if err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	defer r.close()
	key := r.keys[0]
	if err := r.fill(ctx, 0, held+k, e.payloadSize, r.one()); err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	t := newTally(held + k)
	clock := newBaseHeldClock(held, k)
	var (
		mu      sync.Mutex
		heldIDs []string
		heldPs  [][]byte
	)
	plain := r.ackEach(func(p []byte) { t.see(p); clock.acked() })
	handle := func(ctx context.Context, key string, m redis.XMessage) error {
		p, err := streamsPayload(m)
		if err != nil {
			return err
		}
		if seq, _, ok := parsePayload(p); ok && seq < held {
			mu.Lock()
			heldIDs, heldPs = append(heldIDs, m.ID), append(heldPs, p)
			mu.Unlock()
			clock.taken()
			return nil
		}
		return plain(ctx, key, m)
	}
	loop := func(ctx context.Context, i int) error {
		return r.consume(ctx, baseConsumer(i), baseReadCount(0), streamsBlock, handle)
	}
	perAck, err := baseRunHeld(ctx, clock, loop)
	if err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	for lo := 0; lo < len(heldIDs); lo += baseFillChunk {
		if err := r.ack(ctx, key, heldIDs[lo:min(lo+baseFillChunk, len(heldIDs))]...); err != nil {
			return 0, fmt.Errorf("unacked: acking the held entries: %w", err)
		}
	}
	for _, p := range heldPs {
		t.see(p)
	}
	if err := t.check(); err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	if err := r.expectAllAcked(ctx); err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	return perAck, nil
}

// ManyQueues fills queues streams with perQueue entries each (untimed),
// then times 10 readers that each read all streams in one XREADGROUP call
// (COUNT 100 per stream) and XACK every entry after processing it.
func (streamsSystem) ManyQueues(ctx context.Context, e *env, queues, perQueue int) (time.Duration, error) {
	if queues <= 0 || perQueue <= 0 {
		return 0, fmt.Errorf("many queues: %d queues of %d: both must be positive", queues, perQueue)
	}
	r, err := openStreams(ctx, e, baseWorkers+2, queues)
	if err != nil {
		return 0, fmt.Errorf("many queues: %w", err)
	}
	defer r.close()
	n := queues * perQueue
	if err := r.fill(ctx, 0, n, e.payloadSize, func(seq int) string { return r.keys[seq/perQueue] }); err != nil {
		return 0, fmt.Errorf("many queues: %w", err)
	}
	t := newTally(n)
	handle := r.ackEach(func(p []byte) { t.see(p) })
	loop := func(ctx context.Context, i int) error {
		return r.consume(ctx, baseConsumer(i), baseReadCount(0), streamsBlock, handle)
	}
	d, err := baseConsume(ctx, baseWorkers, t, baseDrainLimit(n), loop)
	if err != nil {
		return 0, fmt.Errorf("many queues: %w", err)
	}
	if err := r.expectAllAcked(ctx); err != nil {
		return 0, fmt.Errorf("many queues: %w", err)
	}
	return d, nil
}

// streamsDead and streamsLive are the consumers of Recover.
const (
	streamsDead = "dead"
	streamsLive = "live"
)

// Recover fills a stream with n entries and lets consumer "dead" read them
// all without acking (untimed), then times XAUTOCLAIM (min-idle 0, COUNT
// 1000) calls until the cursor returns to 0-0, moving every entry to the
// live consumer. Every entry must be claimed exactly once and be pending
// for the live consumer afterwards.
func (streamsSystem) Recover(ctx context.Context, e *env, n int) (time.Duration, error) {
	if n <= 0 {
		return 0, fmt.Errorf("recover: n %d must be positive", n)
	}
	r, err := openStreams(ctx, e, 2, 1)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	defer r.close()
	key := r.keys[0]
	if err := r.fill(ctx, 0, n, e.payloadSize, r.one()); err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	for taken := 0; taken < n; {
		res, err := r.read(ctx, streamsDead, streamsClaimCount, -1)
		if err != nil {
			return 0, fmt.Errorf("recover: dead consumer: %w", err)
		}
		if len(res) == 0 {
			return 0, fmt.Errorf("recover: dead consumer read %d of %d entries, then nothing", taken, n)
		}
		for _, s := range res {
			taken += len(s.Messages)
		}
	}
	start := time.Now()
	claimed, err := r.claimAll(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	d := time.Since(start)
	t := newTally(n)
	for _, m := range claimed {
		p, err := streamsPayload(m)
		if err != nil {
			return 0, fmt.Errorf("recover: %w", err)
		}
		t.see(p)
	}
	if err := t.check(); err != nil {
		return 0, fmt.Errorf("recover: claimed entries: %w", err)
	}
	total, per, err := r.pending(ctx)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	if total != int64(n) || per[streamsLive] != int64(n) {
		return 0, fmt.Errorf("recover: after claiming, %d entries pending (%d for %s, %d for %s), want all %d for %s",
			total, per[streamsLive], streamsLive, per[streamsDead], streamsDead, n, streamsLive)
	}
	return d, nil
}

// claimAll moves every pending entry of key to the live consumer with
// XAUTOCLAIM calls and returns the claimed entries.
func (r *streamsRun) claimAll(ctx context.Context, key string) ([]redis.XMessage, error) {
	var claimed []redis.XMessage
	cursor := "0-0"
	for {
		msgs, next, err := r.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: key, Group: streamsGroup, Consumer: streamsLive, MinIdle: 0, Start: cursor, Count: streamsClaimCount,
		}).Result()
		if err != nil {
			return nil, fmt.Errorf("streams: XAUTOCLAIM %s from %s: %w", key, cursor, err)
		}
		claimed = append(claimed, msgs...)
		if next == "0-0" {
			return claimed, nil
		}
		cursor = next
	}
}

// Memory creates a stream with its group and one uncounted entry, then
// XADDs n entries of e.payloadSize bytes (no MAXLEN) and returns Redis's
// used_memory growth per entry.
func (streamsSystem) Memory(ctx context.Context, e *env, n int) (float64, error) {
	if n <= 0 {
		return 0, fmt.Errorf("memory: n %d must be positive", n)
	}
	r, err := openStreams(ctx, e, 2, 1)
	if err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	defer r.close()
	key := r.keys[0]
	if err := r.add(ctx, key, newPayload(n, e.payloadSize)); err != nil {
		return 0, fmt.Errorf("memory warm-up: %w", err)
	}
	perEntry, err := baseMemory(ctx, e, n, func() error { return r.fill(ctx, 0, n, e.payloadSize, r.one()) })
	if err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	if err := r.verify(ctx, key, newTally(n+1)); err != nil {
		return 0, fmt.Errorf("memory: stream contents: %w", err)
	}
	return perEntry, nil
}
