package redq

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// groupCommit coalesces requests from many goroutines into few Redis calls.
// A caller that finds a free flush slot flushes everything pending, its own
// request included; requests that arrive meanwhile wait for the next flush,
// which the flushing caller hands to a new goroutine so that it returns at
// once. A slot is freed, under the lock, only when nothing is pending, so
// no request is ever left waiting. Requests carry their own completion: the
// flush function must complete every request of the batch it is given.
type groupCommit[R any] struct {
	flush func(slot int, batch []R)

	mu      sync.Mutex
	pending []R
	free    []int       // free flush slots
	shared  atomic.Bool // the last batch taken held more than one request
}

// flushSlots is how many flushes may be under way at once, unless the user
// of the group commit says otherwise (see ackFlushSlots). 2 is faster than
// 1 (latency) and than 4 or more (smaller batches) where the round trip,
// not Redis, bounds the rate.
const flushSlots = 2

func newGroupCommit[R any](flush func(slot int, batch []R)) *groupCommit[R] {
	return newGroupCommitSlots(flush, flushSlots)
}

// newGroupCommitSlots is newGroupCommit with slots flush slots.
func newGroupCommitSlots[R any](flush func(slot int, batch []R), slots int) *groupCommit[R] {
	g := &groupCommit[R]{flush: flush}
	for i := 0; i < slots; i++ {
		g.free = append(g.free, i)
	}
	return g
}

// submit queues r and, when a slot is free, flushes before it returns. The
// caller then waits for r's completion.
func (g *groupCommit[R]) submit(r R) {
	g.mu.Lock()
	g.pending = append(g.pending, r)
	lead := len(g.free) > 0
	var slot int
	if lead {
		slot = g.free[len(g.free)-1]
		g.free = g.free[:len(g.free)-1]
	}
	g.mu.Unlock()
	if lead {
		g.flushLoop(slot, true)
	}
}

// flushLoop flushes until nothing is pending, then frees its slot. A caller
// flushes once and hands the rest to a goroutine.
//
// While batches are shared by several goroutines, the loop yields once
// before it takes the pending requests: the goroutines that the last flush
// made runnable usually submit again within microseconds, and letting them
// join makes batches fuller. Measured with ten consumers acking: 3.3 acks
// per flush without the yield, 5 to 6 with it, and a fifth more
// throughput. A lone caller does not yield: there is nobody to wait for,
// and the yield would cost it a trip through the scheduler per flush.
func (g *groupCommit[R]) flushLoop(slot int, caller bool) {
	flushed := false
	for {
		if g.shared.Load() {
			runtime.Gosched()
		}
		g.mu.Lock()
		if len(g.pending) == 0 {
			g.free = append(g.free, slot)
			g.mu.Unlock()
			return
		}
		if caller && flushed {
			g.mu.Unlock()
			go g.flushLoop(slot, false)
			return
		}
		batch := g.pending
		g.pending = nil
		g.shared.Store(len(batch) > 1)
		g.mu.Unlock()
		g.flush(slot, batch)
		flushed = true
	}
}

// await waits for the answer to a request submitted to a group commit.
// When ctx ends first, a request still pending is withdrawn (the flush
// skips it: see requestWithdrawn) and await returns ctx's error, since
// nothing was sent. A request already taken by a flush is given up to
// answerGrace more: when ctx ended at the request's deadline, its call is
// over then and its answer is on the way (Redis's, or the final error of
// its sends: refused, unreachable or unknown). Otherwise it may still run
// in Redis, and await returns ErrorOutcomeUnknown wrapping ctx's error.
func await[T any](ctx context.Context, state *atomic.Int32, done <-chan T) (T, error) {
	select {
	case v := <-done:
		return v, nil
	case <-ctx.Done():
	}
	var zero T
	if state.CompareAndSwap(requestPending, requestWithdrawn) {
		return zero, ctx.Err()
	}
	grace := time.NewTimer(answerGrace)
	defer grace.Stop()
	select {
	case v := <-done:
		return v, nil
	case <-grace.C:
	}
	return zero, errorf("%w: %w", ErrorOutcomeUnknown, ctx.Err())
}

// scriptBatcher sends independent script calls of many goroutines
// together: the calls pending when a flush starts share one pipeline (one
// round trip). Each call holds a record slot of its own (a field of the
// pool) and a token, and is sent again like a settle while Redis gives no
// answer (see remembered), so it runs once however often it is sent.
type scriptBatcher struct {
	conn   *redisConnection
	group  *groupCommit[*batchedCall]
	fields fieldPool
}

type batchedCall struct {
	build    func(field, token string) scriptCall
	deadline time.Time
	state    atomic.Int32 // requestPending, requestTaken or requestWithdrawn
	done     chan batchedResult
}

type batchedResult struct {
	v   any
	err error
}

func newScriptBatcher(c *redisConnection, prefix string) *scriptBatcher {
	b := &scriptBatcher{conn: c, fields: fieldPool{prefix: prefix}}
	b.group = newGroupCommit(b.flush)
	return b
}

// call runs the script call that build makes for the slot and token it is
// given, and returns Redis's answer. The call is sent again until the
// retry deadline for ctx (see retryDeadline); when ctx ends first, the
// error is ctx's if nothing was sent, or ErrorOutcomeUnknown if it may
// still run.
func (b *scriptBatcher) call(ctx context.Context, build func(field, token string) scriptCall) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &batchedCall{build: build, deadline: b.conn.retryDeadline(ctx), done: make(chan batchedResult, 1)}
	b.group.submit(r)
	res, err := await(ctx, &r.state, r.done)
	if err != nil {
		return nil, err
	}
	return res.v, res.err
}

func (b *scriptBatcher) flush(_ int, batch []*batchedCall) {
	var calls []*remembered
	for _, r := range batch {
		if !r.state.CompareAndSwap(requestPending, requestTaken) {
			continue // withdrawn by its caller
		}
		field, token := b.fields.take(b.conn)
		r := r
		calls = append(calls, &remembered{scriptCall: r.build(field, token), deadline: r.deadline,
			done: func(v any, err error) {
				b.fields.put(field)
				r.done <- batchedResult{v, err}
			}})
	}
	if len(calls) > 0 {
		b.conn.sendAll(calls, nil)
	}
}
