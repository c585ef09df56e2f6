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

const (
	// listBlock is the BRPOPLPUSH timeout of a consumer waiting on an
	// empty ready list (1 s is the smallest go-redis sends).
	listBlock = time.Second
	// listMoveChunk is how many RPOPLPUSH commands go in one pipeline when
	// moving deliveries between lists in Recover.
	listMoveChunk = 1000
	// listRangeCount is how many elements one LRANGE reads when checking contents.
	listRangeCount = 10_000
	// listIdleRetry is how long a rotating consumer sleeps after finding
	// every ready list empty.
	listIdleRetry = 10 * time.Millisecond
	// listDead is the consumer that dies in Recover.
	listDead = "dead"
)

// listSystem is the classic reliable list queue: LPUSH onto a ready list;
// a consumer moves one delivery at a time into its own processing list
// with RPOPLPUSH (BRPOPLPUSH when waiting on an empty queue), processes
// it and acks with LREM; a dead consumer's processing list is moved back
// to ready with RPOPLPUSH.
type listSystem struct{}

// newList returns the list system.
func newList() system { return listSystem{} }

// Name returns "list".
func (listSystem) Name() string { return "list" }

// listRun is what one measurement opened: a client and the names of its
// ready lists.
type listRun struct {
	rdb    *redis.Client
	prefix string
	ready  []string
}

// openList returns a run with a client whose pool holds at least pool
// connections and queues ready lists (empty, so not yet existing).
func openList(e *env, pool, queues int) *listRun {
	r := &listRun{rdb: e.newClient(pool), prefix: baseKeyPrefix("list")}
	for i := range max(queues, 1) {
		r.ready = append(r.ready, r.prefix+":ready:"+strconv.Itoa(i))
	}
	return r
}

// close closes the run's client.
func (r *listRun) close() { _ = r.rdb.Close() }

// processing returns the processing list of consumer.
func (r *listRun) processing(consumer string) string {
	return r.prefix + ":processing:" + consumer
}

// push LPUSHes payloads onto key in one command.
func (r *listRun) push(ctx context.Context, key string, payloads [][]byte) error {
	vals := make([]any, len(payloads))
	for i, p := range payloads {
		vals[i] = p
	}
	if err := r.rdb.LPush(ctx, key, vals...).Err(); err != nil {
		return fmt.Errorf("list: LPUSH %s: %w", key, err)
	}
	return nil
}

// fill LPUSHes payloads 0..n-1 of size bytes, in that order, payload seq
// going to keyOf(seq), many values per LPUSH and several LPUSHes per
// pipeline (untimed). Consumers take them oldest first.
func (r *listRun) fill(ctx context.Context, n, size int, keyOf func(seq int) string) error {
	chunk := baseChunk(size)
	for lo := 0; lo < n; lo += chunk {
		pipe := r.rdb.Pipeline()
		key, vals := "", []any(nil)
		for seq := lo; seq < min(lo+chunk, n); seq++ {
			if k := keyOf(seq); k != key {
				if len(vals) > 0 {
					pipe.LPush(ctx, key, vals...)
				}
				key, vals = k, nil
			}
			vals = append(vals, newPayload(seq, size))
		}
		pipe.LPush(ctx, key, vals...)
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("list: fill: %w", err)
		}
	}
	return nil
}

// one returns a keyOf function for fill that sends everything to the
// first ready list.
func (r *listRun) one() func(int) string {
	return func(int) string { return r.ready[0] }
}

// take moves the oldest delivery of ready into proc with LMOVE RIGHT LEFT
// (RPOPLPUSH's successor, the same command in Redis); ok is false when
// ready is empty.
func (r *listRun) take(ctx context.Context, ready, proc string) (p string, ok bool, err error) {
	p, err = r.rdb.LMove(ctx, ready, proc, "RIGHT", "LEFT").Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("list: LMOVE %s %s: %w", ready, proc, err)
	}
	return p, true, nil
}

// wait waits up to listBlock for a delivery on ready and moves it into
// proc with BLMOVE RIGHT LEFT (BRPOPLPUSH's successor); ok is false when
// none came.
func (r *listRun) wait(ctx context.Context, ready, proc string) (p string, ok bool, err error) {
	p, err = r.rdb.BLMove(ctx, ready, proc, "RIGHT", "LEFT", listBlock).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("list: BLMOVE %s %s: %w", ready, proc, err)
	}
	return p, true, nil
}

// ack removes one copy of p from proc with LREM and checks it was there.
func (r *listRun) ack(ctx context.Context, proc, p string) error {
	n, err := r.rdb.LRem(ctx, proc, 1, p).Result()
	if err != nil {
		return fmt.Errorf("list: LREM %s: %w", proc, err)
	}
	if n != 1 {
		return fmt.Errorf("list: LREM %s removed %d elements, want 1", proc, n)
	}
	return nil
}

// listHandler processes one delivery p that a consumer moved into proc.
type listHandler func(ctx context.Context, proc, p string) error

// work is a single-delivery consumer on the first ready list: RPOPLPUSH
// while there is work, BRPOPLPUSH when the list is empty, handle each
// delivery, until ctx ends or handle fails.
func (r *listRun) work(ctx context.Context, consumer string, handle listHandler) error {
	ready, proc := r.ready[0], r.processing(consumer)
	for ctx.Err() == nil {
		p, ok, err := r.take(ctx, ready, proc)
		if err == nil && !ok {
			p, ok, err = r.wait(ctx, ready, proc)
		}
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := handle(ctx, proc, p); err != nil {
			return err
		}
	}
	return nil
}

// ackEach returns the handler of a plain consumer: LREM the delivery,
// then pass its payload to then.
func (r *listRun) ackEach(then func(p []byte)) listHandler {
	return func(ctx context.Context, proc, p string) error {
		if err := r.ack(ctx, proc, p); err != nil {
			return err
		}
		then([]byte(p))
		return nil
	}
}

// workBatches is a batch consumer: it pipelines size RPOPLPUSHes (or
// waits with BRPOPLPUSH when the list is empty), then pipelines the LREMs
// of what it got and passes each payload to then.
func (r *listRun) workBatches(ctx context.Context, consumer string, size int, then func(p []byte)) error {
	ready, proc := r.ready[0], r.processing(consumer)
	for ctx.Err() == nil {
		batch, err := r.takeBatch(ctx, ready, proc, size)
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			p, ok, err := r.wait(ctx, ready, proc)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			batch = append(batch, p)
		}
		if err := r.ackBatch(ctx, proc, batch); err != nil {
			return err
		}
		for _, p := range batch {
			then([]byte(p))
		}
	}
	return nil
}

// takeBatch pipelines size RPOPLPUSHes from ready into proc and returns
// the deliveries moved (fewer when ready ran empty).
func (r *listRun) takeBatch(ctx context.Context, ready, proc string, size int) ([]string, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, size)
	for i := range cmds {
		cmds[i] = pipe.RPopLPush(ctx, ready, proc)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("list: pipelined RPOPLPUSH %s %s: %w", ready, proc, err)
	}
	batch := make([]string, 0, size)
	for _, c := range cmds {
		p, err := c.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list: pipelined RPOPLPUSH %s %s: %w", ready, proc, err)
		}
		batch = append(batch, p)
	}
	return batch, nil
}

// ackBatch pipelines one LREM per delivery of batch and checks that each
// removed one element.
func (r *listRun) ackBatch(ctx context.Context, proc string, batch []string) error {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(batch))
	for i, p := range batch {
		cmds[i] = pipe.LRem(ctx, proc, 1, p)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("list: pipelined LREM %s: %w", proc, err)
	}
	for _, c := range cmds {
		if c.Val() != 1 {
			return fmt.Errorf("list: pipelined LREM %s removed %d elements, want 1", proc, c.Val())
		}
	}
	return nil
}

// rotate is a single-delivery consumer over every ready list: it tries
// RPOPLPUSH on one list after the other, starting at first, and handles
// each delivery it gets; after a whole round of empty lists it sleeps
// listIdleRetry.
func (r *listRun) rotate(ctx context.Context, consumer string, first int, handle listHandler) error {
	proc := r.processing(consumer)
	empty := 0
	for i := first % len(r.ready); ctx.Err() == nil; i = (i + 1) % len(r.ready) {
		p, ok, err := r.take(ctx, r.ready[i], proc)
		if err != nil {
			return err
		}
		if !ok {
			if empty++; empty >= len(r.ready) {
				empty = 0
				if err := sleep(ctx, listIdleRetry); err != nil {
					return nil
				}
			}
			continue
		}
		empty = 0
		if err := handle(ctx, proc, p); err != nil {
			return err
		}
	}
	return nil
}

// verify reads key from the oldest element to the newest with LRANGE and
// passes every payload to t, then returns t's verdict.
func (r *listRun) verify(ctx context.Context, key string, t *tally) error {
	for end := int64(-1); ; end -= listRangeCount {
		vals, err := r.rdb.LRange(ctx, key, end-listRangeCount+1, end).Result()
		if err != nil {
			return fmt.Errorf("list: LRANGE %s: %w", key, err)
		}
		for _, v := range vals {
			t.see([]byte(v))
		}
		if len(vals) < listRangeCount {
			return t.check()
		}
	}
}

// expectEmpty checks that every ready list and the processing lists of
// consumers are empty.
func (r *listRun) expectEmpty(ctx context.Context, consumers int) error {
	keys := append([]string(nil), r.ready...)
	for i := range consumers {
		keys = append(keys, r.processing(baseConsumer(i)))
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.LLen(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("list: LLEN: %w", err)
	}
	for i, c := range cmds {
		if c.Val() != 0 {
			return fmt.Errorf("list: %s still holds %d deliveries", keys[i], c.Val())
		}
	}
	return nil
}

// Publish LPUSHes n payloads from goroutines goroutines, perCall values
// per LPUSH, and reads the list back to check that it holds each payload
// once.
func (listSystem) Publish(ctx context.Context, e *env, n, goroutines, perCall int) (time.Duration, error) {
	r := openList(e, goroutines+2, 1)
	defer r.close()
	key := r.ready[0]
	d, err := basePublish(ctx, n, goroutines, perCall, e.payloadSize, func(ctx context.Context, payloads [][]byte) error {
		return r.push(ctx, key, payloads)
	})
	if err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	if err := r.verify(ctx, key, newTally(n)); err != nil {
		return 0, fmt.Errorf("publish: list contents: %w", err)
	}
	return d, nil
}

// EndToEnd fills the ready list with cfg.N deliveries (untimed), then
// times consuming and acking all of them: with cfg.Batch one consumer
// that pipelines cfg.Batch RPOPLPUSHes and then the LREMs, else
// cfg.Consumers consumers taking and acking one delivery at a time.
// cfg.Prefetch does not apply: a list consumer takes one at a time.
func (listSystem) EndToEnd(ctx context.Context, e *env, cfg e2eConfig) (time.Duration, error) {
	workers, err := baseE2EWorkers(cfg)
	if err != nil {
		return 0, fmt.Errorf("e2e: %w", err)
	}
	r := openList(e, workers+2, 1)
	defer r.close()
	if err := r.fill(ctx, cfg.N, cfg.PayloadSize, r.one()); err != nil {
		return 0, fmt.Errorf("e2e: %w", err)
	}
	t := newTally(cfg.N)
	see := func(p []byte) { t.see(p) }
	loop := func(ctx context.Context, i int) error {
		if cfg.Batch > 0 {
			return r.workBatches(ctx, baseConsumer(i), cfg.Batch, see)
		}
		return r.work(ctx, baseConsumer(i), r.ackEach(see))
	}
	d, err := baseConsume(ctx, workers, t, baseDrainLimit(cfg.N), loop)
	if err != nil {
		return 0, fmt.Errorf("e2e: %w", err)
	}
	if err := r.expectEmpty(ctx, workers); err != nil {
		return 0, fmt.Errorf("e2e: %w", err)
	}
	return d, nil
}

// Steady runs cfg.Consumers consumers (as in EndToEnd) while pace LPUSHes
// one delivery per publish; a delivery's latency is taken once its LREM
// returned.
func (listSystem) Steady(ctx context.Context, e *env, cfg steadyConfig) (steadyResult, error) {
	r := openList(e, cfg.Consumers+cfg.Producers+2, 1)
	defer r.close()
	key := r.ready[0]
	consume := func(ctx context.Context, i int, seen func(p []byte)) error {
		return r.work(ctx, baseConsumer(i), r.ackEach(seen))
	}
	publish := func(ctx context.Context, p []byte) error { return r.push(ctx, key, [][]byte{p}) }
	res, err := baseSteady(ctx, cfg, consume, publish)
	if err != nil {
		return steadyResult{}, fmt.Errorf("steady: %w", err)
	}
	if err := r.expectEmpty(ctx, cfg.Consumers); err != nil {
		return steadyResult{}, fmt.Errorf("steady: %w", err)
	}
	return res, nil
}

// Idle runs one consumer looping on BRPOPLPUSH (timeout 1 s) over an
// empty ready list and, samples times, sleeps gap, LPUSHes one delivery
// and waits for the consumer to receive it. The latency is from just
// before LPUSH to BRPOPLPUSH returning it. Two warm-ups come first.
func (listSystem) Idle(ctx context.Context, e *env, samples int, gap time.Duration) ([]time.Duration, error) {
	r := openList(e, 3, 1)
	defer r.close()
	ready := r.ready[0]
	t := newTally(baseIdleWarmups + samples)
	got := make(chan basePickup, baseIdleWarmups+samples)
	consumer := func(ctx context.Context, i int) error {
		proc := r.processing(baseConsumer(i))
		for ctx.Err() == nil {
			p, ok, err := r.wait(ctx, ready, proc)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			at := time.Now()
			if err := r.ack(ctx, proc, p); err != nil {
				return err
			}
			basePicked(t, got, []byte(p), at)
		}
		return nil
	}
	publish := func(ctx context.Context, seq int) error {
		return r.push(ctx, ready, [][]byte{newPayload(seq, e.payloadSize)})
	}
	lat, err := baseIdle(ctx, samples, gap, t, consumer, publish, got)
	if err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	if err := r.expectEmpty(ctx, 1); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	return lat, nil
}

// Queued fills the ready list with depth deliveries (untimed), then times
// 10 consumers (as in EndToEnd) taking and acking the first k. A
// delivery beyond the first k that a consumer happens to take is left in
// its processing list; the harness flushes it.
func (listSystem) Queued(ctx context.Context, e *env, depth, k int) (time.Duration, error) {
	if k <= 0 || k > depth {
		return 0, fmt.Errorf("queued: k %d must be in 1..depth (%d)", k, depth)
	}
	r := openList(e, baseWorkers+2, 1)
	defer r.close()
	if err := r.fill(ctx, depth, e.payloadSize, r.one()); err != nil {
		return 0, fmt.Errorf("queued: %w", err)
	}
	t := newTally(k)
	plain := r.ackEach(func(p []byte) { t.see(p) })
	handle := func(ctx context.Context, proc, p string) error {
		if seq, _, ok := parsePayload([]byte(p)); ok && seq >= k {
			return nil // not one of the first k: left unacked
		}
		return plain(ctx, proc, p)
	}
	loop := func(ctx context.Context, i int) error { return r.work(ctx, baseConsumer(i), handle) }
	d, err := baseConsume(ctx, baseWorkers, t, baseDrainLimit(k), loop)
	if err != nil {
		return 0, fmt.Errorf("queued: %w", err)
	}
	return d, nil
}

// listHeld is a delivery kept unacked in Unacked.
type listHeld struct {
	proc, p string
}

// Unacked fills the ready list with held+k deliveries (the held ones
// first), then runs 10 consumers (as in Queued): a delivery with a
// sequence number below held stays in the consumer's processing list,
// the others are acked with LREM. It returns the per-ack cost measured by
// baseHeldClock; the held deliveries are acked afterwards (pipelined
// LREMs) and everything checked.
func (listSystem) Unacked(ctx context.Context, e *env, held, k int) (time.Duration, error) {
	if held < 0 || k <= 0 {
		return 0, fmt.Errorf("unacked: held %d must not be negative and k %d must be positive", held, k)
	}
	r := openList(e, baseWorkers+2, 1)
	defer r.close()
	if err := r.fill(ctx, held+k, e.payloadSize, r.one()); err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	t := newTally(held + k)
	clock := newBaseHeldClock(held, k)
	var (
		mu   sync.Mutex
		kept []listHeld
	)
	plain := r.ackEach(func(p []byte) { t.see(p); clock.acked() })
	handle := func(ctx context.Context, proc, p string) error {
		if seq, _, ok := parsePayload([]byte(p)); ok && seq < held {
			mu.Lock()
			kept = append(kept, listHeld{proc: proc, p: p})
			mu.Unlock()
			clock.taken()
			return nil
		}
		return plain(ctx, proc, p)
	}
	loop := func(ctx context.Context, i int) error { return r.work(ctx, baseConsumer(i), handle) }
	perAck, err := baseRunHeld(ctx, clock, loop)
	if err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	if err := r.ackHeld(ctx, kept, t); err != nil {
		return 0, fmt.Errorf("unacked: acking the held deliveries: %w", err)
	}
	if err := t.check(); err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	if err := r.expectEmpty(ctx, baseWorkers); err != nil {
		return 0, fmt.Errorf("unacked: %w", err)
	}
	return perAck, nil
}

// ackHeld acks the kept deliveries with pipelined LREMs and passes each to t.
func (r *listRun) ackHeld(ctx context.Context, kept []listHeld, t *tally) error {
	for lo := 0; lo < len(kept); lo += listMoveChunk {
		part := kept[lo:min(lo+listMoveChunk, len(kept))]
		pipe := r.rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(part))
		for i, h := range part {
			cmds[i] = pipe.LRem(ctx, h.proc, 1, h.p)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("list: pipelined LREM: %w", err)
		}
		for i, c := range cmds {
			if c.Val() != 1 {
				return fmt.Errorf("list: LREM %s removed %d elements, want 1", part[i].proc, c.Val())
			}
			t.see([]byte(part[i].p))
		}
	}
	return nil
}

// ManyQueues fills queues ready lists with perQueue deliveries each
// (untimed), then times 10 consumers that rotate over the lists with
// RPOPLPUSH, one delivery per list in turn, acking each with LREM.
func (listSystem) ManyQueues(ctx context.Context, e *env, queues, perQueue int) (time.Duration, error) {
	if queues <= 0 || perQueue <= 0 {
		return 0, fmt.Errorf("many queues: %d queues of %d: both must be positive", queues, perQueue)
	}
	r := openList(e, baseWorkers+2, queues)
	defer r.close()
	n := queues * perQueue
	if err := r.fill(ctx, n, e.payloadSize, func(seq int) string { return r.ready[seq/perQueue] }); err != nil {
		return 0, fmt.Errorf("many queues: %w", err)
	}
	t := newTally(n)
	handle := r.ackEach(func(p []byte) { t.see(p) })
	loop := func(ctx context.Context, i int) error {
		return r.rotate(ctx, baseConsumer(i), i*queues/baseWorkers, handle)
	}
	d, err := baseConsume(ctx, baseWorkers, t, baseDrainLimit(n), loop)
	if err != nil {
		return 0, fmt.Errorf("many queues: %w", err)
	}
	if err := r.expectEmpty(ctx, baseWorkers); err != nil {
		return 0, fmt.Errorf("many queues: %w", err)
	}
	return d, nil
}

// Recover fills the ready list with n deliveries and lets a consumer move
// them all into its processing list without acking (untimed), then times
// moving them back to ready with RPOPLPUSH processing ready, one command
// per delivery, 1000 per pipeline. Ready must then hold each delivery
// exactly once and the processing list nothing.
func (listSystem) Recover(ctx context.Context, e *env, n int) (time.Duration, error) {
	if n <= 0 {
		return 0, fmt.Errorf("recover: n %d must be positive", n)
	}
	r := openList(e, 2, 1)
	defer r.close()
	ready, proc := r.ready[0], r.processing(listDead)
	if err := r.fill(ctx, n, e.payloadSize, r.one()); err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	if _, err := r.move(ctx, ready, proc, n); err != nil {
		return 0, fmt.Errorf("recover: dead consumer: %w", err)
	}
	start := time.Now()
	moved, err := r.move(ctx, proc, ready, n)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	d := time.Since(start)
	t := newTally(n)
	for _, p := range moved {
		t.see([]byte(p))
	}
	if err := t.check(); err != nil {
		return 0, fmt.Errorf("recover: moved deliveries: %w", err)
	}
	if err := r.verify(ctx, ready, newTally(n)); err != nil {
		return 0, fmt.Errorf("recover: ready list: %w", err)
	}
	if l, err := r.rdb.LLen(ctx, proc).Result(); err != nil || l != 0 {
		return 0, fmt.Errorf("recover: %s holds %d deliveries after recovery (LLEN error: %v)", proc, l, err)
	}
	return d, nil
}

// move moves n deliveries from src to dst with RPOPLPUSH, listMoveChunk
// commands per pipeline, and returns them; src running empty early is an
// error.
func (r *listRun) move(ctx context.Context, src, dst string, n int) ([]string, error) {
	moved := make([]string, 0, n)
	for len(moved) < n {
		pipe := r.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, min(listMoveChunk, n-len(moved)))
		for i := range cmds {
			cmds[i] = pipe.RPopLPush(ctx, src, dst)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			if errors.Is(err, redis.Nil) {
				return nil, fmt.Errorf("list: %s ran empty after %d of %d deliveries", src, len(moved), n)
			}
			return nil, fmt.Errorf("list: pipelined RPOPLPUSH %s %s: %w", src, dst, err)
		}
		for _, c := range cmds {
			moved = append(moved, c.Val())
		}
	}
	return moved, nil
}

// Memory LPUSHes one uncounted delivery (so the list exists), then n
// deliveries of e.payloadSize bytes, and returns Redis's used_memory
// growth per delivery.
func (listSystem) Memory(ctx context.Context, e *env, n int) (float64, error) {
	if n <= 0 {
		return 0, fmt.Errorf("memory: n %d must be positive", n)
	}
	r := openList(e, 2, 1)
	defer r.close()
	key := r.ready[0]
	if err := r.push(ctx, key, [][]byte{newPayload(n, e.payloadSize)}); err != nil {
		return 0, fmt.Errorf("memory warm-up: %w", err)
	}
	perDelivery, err := baseMemory(ctx, e, n, func() error { return r.fill(ctx, n, e.payloadSize, r.one()) })
	if err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	t := newTally(n + 1)
	if err := r.verify(ctx, key, t); err != nil {
		return 0, fmt.Errorf("memory: list contents: %w", err)
	}
	return perDelivery, nil
}
