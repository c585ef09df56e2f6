package redq

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limits of the publish options.
const (
	// MaxPriority is the highest priority level; levels run from 0 (the
	// default, taken last) to MaxPriority (taken first).
	MaxPriority = 9
	// MaxDelay is the horizon of Delay and At: a delivery may be scheduled
	// at most this far ahead.
	MaxDelay = 366 * 24 * time.Hour
)

// PublishOption sets a property of published deliveries (see Queue.Put and
// WithPublishDefaults). An option given a bad value makes the publish fail
// with an *ArgumentError before anything is sent.
type PublishOption func(*publishOptions) error

type publishOptions struct {
	header   http.Header
	delay    time.Duration
	at       time.Time // zero: not scheduled at a time
	priority int
	ttl, ttr time.Duration
	// Upsert's options (see keyed.go); keyedSet records that one was
	// given, so that Put can refuse them.
	onExisting UpsertMode
	maxWait    time.Duration
	keyedSet   bool
	group      string // see Group; "" for none
}

// Header attaches headers to a published delivery; the consumer reads them
// with Delivery.Header.
func Header(h http.Header) PublishOption {
	return func(o *publishOptions) error {
		o.header = h
		return nil
	}
}

// Delay makes the delivery ready d after it was published (0: at once),
// judged by Redis's clock, with millisecond precision. It replaces an
// earlier Delay or At. d must be between 0 and MaxDelay.
func Delay(d time.Duration) PublishOption {
	return func(o *publishOptions) error {
		if d < 0 || d > MaxDelay {
			return argError("delay", d, "must be between 0 and "+MaxDelay.String())
		}
		o.delay, o.at = d, time.Time{}
		return nil
	}
}

// At makes the delivery ready at t, by Redis's clock (so publishers whose
// clocks disagree still agree on when it is due). A time in the past means
// at once; a time more than MaxDelay ahead of this process's clock is
// refused. It replaces an earlier Delay or At.
func At(t time.Time) PublishOption {
	return func(o *publishOptions) error {
		if time.Until(t) > MaxDelay {
			return argError("at", t, "must be at most "+MaxDelay.String()+" ahead")
		}
		o.at, o.delay = t, 0
		if t.IsZero() {
			o.at = time.UnixMilli(1) // the far past: at once
		}
		return nil
	}
}

// Priority sets the delivery's priority, from 0 (the default) to
// MaxPriority. Higher priorities are taken first; within a priority,
// deliveries are taken in the order they became ready.
func Priority(p int) PublishOption {
	return func(o *publishOptions) error {
		if p < 0 || p > MaxPriority {
			return argError("priority", p, fmt.Sprintf("must be between 0 and %d", MaxPriority))
		}
		o.priority = p
		return nil
	}
}

// TTL sets the delivery's time to live: if nobody takes it within d of its
// becoming ready (by Redis's clock), it is never delivered. It is counted as
// expired in the stats, and kept in rejected when the queue is opened with
// WithKeepExpired. A delivery that goes back to ready (Release, a lost
// lease, a dead connection, a stopping consumer handing back its buffer, a
// Push to another queue) gets d again. 0 means no limit (the default);
// otherwise d must be at least 1ms. Expired deliveries are dropped when a
// consumer reaches them, or by the cleaner while they are at the front of
// their line; until then the stats count them as ready.
func TTL(d time.Duration) PublishOption {
	return func(o *publishOptions) error {
		if d < 0 || (d > 0 && d < time.Millisecond) {
			return argError("TTL", d, "must be 0 (no limit) or at least 1ms")
		}
		o.ttl = d
		return nil
	}
}

// TTR sets the delivery's time to run: a lease that starts when a
// connection takes it. If the delivery is not acked, rejected or released
// within d (Touch extends the lease), it goes back to ready even though its
// connection is alive, with its attempt counted, and a late Ack returns
// ErrorLeaseLost. 0 means no lease (the default: the delivery stays with its
// connection while that lives); otherwise d must be at least 1ms.
func TTR(d time.Duration) PublishOption {
	return func(o *publishOptions) error {
		if d < 0 || (d > 0 && d < time.Millisecond) {
			return argError("TTR", d, "must be 0 (no lease) or at least 1ms")
		}
		o.ttr = d
		return nil
	}
}

// scheduled reports whether the publish needs the publish script (Redis's
// clock, or a key other than ready).
func (o *publishOptions) scheduled() bool {
	return o.delay > 0 || !o.at.IsZero() || o.priority > 0 || o.ttl > 0 || o.group != ""
}

// ceilMs is d in whole milliseconds, rounded up.
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func (q *redisQueue) Publish(payload ...string) error {
	return q.PublishContext(context.Background(), payload...)
}

func (q *redisQueue) PublishBytes(payload ...[]byte) error {
	return q.PublishBytesContext(context.Background(), payload...)
}

func (q *redisQueue) PublishContext(ctx context.Context, payload ...string) error {
	bs := make([][]byte, len(payload))
	for i, p := range payload {
		bs[i] = []byte(p)
	}
	return q.publish(ctx, q.defaults, bs)
}

func (q *redisQueue) PublishBytesContext(ctx context.Context, payload ...[]byte) error {
	return q.publish(ctx, q.defaults, payload)
}

func (q *redisQueue) Put(ctx context.Context, payload []byte, opts ...PublishOption) error {
	o := q.defaults
	o.keyedSet = false
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return err
		}
	}
	if o.keyedSet {
		return argError("publish option", "OnExisting/MaxWait", "applies to keyed deliveries only: use Upsert")
	}
	return q.publish(ctx, o, [][]byte{payload})
}

func (q *redisQueue) publish(ctx context.Context, o publishOptions, payloads [][]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	if o.group != "" && o.priority > 0 {
		return argError("priority", o.priority, "does not combine with Group: a group's line is first in, first out")
	}
	m := meta{priority: o.priority, ttr: o.ttr, ttl: o.ttl, header: o.header, group: o.group}
	now := time.Now()
	size := 0
	for i, p := range payloads {
		size += len(p)
		if len(p) > q.conn.opts.maxPayloadSize {
			// the name is built only for the error: a publish must not
			// pay for it
			return checkPayloadSize(fmt.Sprintf("payload %d", i), len(p), q.conn.opts.maxPayloadSize)
		}
	}
	args, err := encodeEnvelopes(q.conn.ids, now, m, payloads)
	if err != nil {
		return argError("header", o.header, err.Error())
	}
	switch {
	case o.scheduled():
		var at int64
		if !o.at.IsZero() {
			at = max(1, o.at.UnixMilli())
		}
		head := []any{o.priority, ceilMs(o.ttl), ceilMs(o.delay), at}
		err = q.conn.publisher.direct(ctx, q, scripts.put, head, args)
	case len(args) <= coalesceMaxPayloads && size <= coalesceMaxBytes:
		err = q.conn.publisher.publish(ctx, q, args)
	default:
		err = q.conn.publisher.pushDirect(ctx, q, args)
	}
	if q.conn.opts.observer != nil {
		q.conn.observe(EventPublish, q.name, "", len(payloads), now, err)
	}
	if err != nil {
		return errorf("redq: publish to %q: %w", q.name, err)
	}
	return nil
}

// Small publishes from many goroutines (request handlers, typically) are
// coalesced: concurrent calls share one script call per queue (see
// groupCommit), in the order they arrived, and each returns after Redis
// answered for its payloads. Large ones go to Redis on their own.
//
// Every publish call runs once in Redis, however often it is sent: it
// carries a field of the connection's publish records for the queue and a
// token (see publish.lua), and a call that got no answer is sent again
// under them until Redis answers or the retry deadline passes (see sends).
const (
	coalesceMaxPayloads = 100
	coalesceMaxBytes    = 64 << 10
)

type publishRequest struct {
	q        *redisQueue
	envs     []any
	deadline time.Time
	state    atomic.Int32 // requestPending, requestTaken or requestWithdrawn
	done     chan error
}

type publisher struct {
	conn   *redisConnection
	group  *groupCommit[*publishRequest]
	fields fieldPool
	fast   *fastPath // first sends without Lua (see fence.go)
}

func newPublisher(c *redisConnection) *publisher {
	p := &publisher{conn: c, fields: fieldPool{prefix: "p"}, fast: newFastPath(c.client, c.opts)}
	p.group = newGroupCommit(p.flush)
	return p
}

// publish pushes envelopes to q's ready list together with whatever other
// goroutines publish at the same time.
func (p *publisher) publish(ctx context.Context, q *redisQueue, envs []any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &publishRequest{q: q, envs: envs, deadline: p.conn.retryDeadline(ctx), done: make(chan error, 1)}
	p.group.submit(r)
	err, waitErr := await(ctx, &r.state, r.done)
	if waitErr != nil {
		return waitErr
	}
	return err
}

// direct runs one publish call of its own: script with head, a token and
// the envelopes as arguments, and the record of the field it holds as its
// second key (see put.lua).
func (p *publisher) direct(ctx context.Context, q *redisQueue, script *redis.Script, head []any, envs []any) error {
	field, token := p.fields.take(p.conn)
	defer p.fields.put(field)
	args := append(append(head, token), envs...)
	keys := q.keys.scriptKeys(q.keys.published(p.conn.Name(), field), nil)
	return p.conn.resend(ctx, func(ctx context.Context) error {
		_, err := p.conn.runScript(ctx, scriptCall{script, keys, args})
		return err
	}, nil)
}

// pushDirect runs one plain publish of its own (see pushCall).
func (p *publisher) pushDirect(ctx context.Context, q *redisQueue, envs []any) error {
	field, token := p.fields.take(p.conn)
	defer p.fields.put(field)
	call := []*pushCall{p.pushCall(q, field, token, envs)}
	return p.conn.resend(ctx, func(ctx context.Context) error {
		return p.conn.replicated(ctx, call[0].ready, func(s sender) error {
			return pushBatch(ctx, s, call)[0].Err()
		})
	}, nil)
}

// pushCall is a plain publish to one queue, which runs once however often
// it is sent (see publish.lua).
type pushCall struct {
	ready, record string // the record of the field the call holds
	meta          string // the queue's meta hash (its counters)
	pub           string // the queue's counts of publishes sent without Lua
	token         string
	envs          []any
	// fold makes the guarded form fold pub into meta (see fastPath.usable)
	fold bool
}

func (p *publisher) pushCall(q *redisQueue, field, token string, envs []any) *pushCall {
	return &pushCall{ready: q.keys.ready, record: q.keys.published(p.conn.Name(), field), meta: q.keys.meta(),
		pub: q.keys.pub(), token: token, envs: envs}
}

// keys is the KEYS of the call's guard (see publish.lua).
func (pc *pushCall) keys() []string {
	if pc.fold {
		return []string{pc.ready, pc.record, pc.meta, pc.pub}
	}
	return []string{pc.ready, pc.record, pc.meta}
}

// pushScriptMax is the most envelopes a plain publish hands to publish.lua
// itself. A script call costs less than a transaction of an LPUSH and the
// guard script for few payloads, but every payload it carries passes
// through Lua (measured on a 2-CPU machine with 100-byte payloads, one
// call at a time: 15% faster for one payload, 5% for ten, even at thirty).
const pushScriptMax = 10

// pushBatch sends calls in one round trip (a cluster client makes one per
// slot) and returns each call's command: its value is how many envelopes
// the call added (0: a send of it ran already), its error the call's.
// When every call is small, each is one call of publish.lua with its
// envelopes; otherwise all go in one transaction (on a cluster, one per
// slot: a transaction cannot span slots), each as an LPUSH and the guard
// (see publish.lua). When Redis refused the transaction (EXECABORT,
// for example out of memory) nothing ran, and the error is the reason
// Redis gave for the command it refused.
func pushBatch(ctx context.Context, c sender, calls []*pushCall) []*redis.Cmd {
	if sc := pushScripts(calls); sc != nil {
		return evalBatch(ctx, c, sc)
	}
	if _, ok := c.(*redis.ClusterClient); ok {
		return pushPerSlot(ctx, c, calls)
	}
	return pushTx(ctx, c, calls)
}

// pushPerSlot is pushTx on a cluster, where a transaction cannot span
// slots: one transaction per slot, at the same time.
func pushPerSlot(ctx context.Context, c sender, calls []*pushCall) []*redis.Cmd {
	bySlot := map[uint16][]int{}
	for i, pc := range calls {
		s := keySlot(pc.ready)
		bySlot[s] = append(bySlot[s], i)
	}
	out := make([]*redis.Cmd, len(calls))
	var wg sync.WaitGroup
	for _, idx := range bySlot {
		wg.Add(1)
		go func(idx []int) {
			defer wg.Done()
			group := make([]*pushCall, len(idx))
			for j, i := range idx {
				group[j] = calls[i]
			}
			for j, cmd := range pushTx(ctx, c, group) {
				out[idx[j]] = cmd
			}
		}(idx)
	}
	wg.Wait()
	return out
}

// pushTx pushes large publishes in one transaction: each call's LPUSH and
// the script that records its token.
//
// The script is named by its text (EVAL), on every send: were it named by
// its hash and Redis's script cache empty (a restart, a failover, SCRIPT
// FLUSH), it would fail alone after the LPUSH ran, no token would be
// recorded, and a send of the call again after a lost reply would land
// the envelopes a second time.
func pushTx(ctx context.Context, c sender, calls []*pushCall) []*redis.Cmd {
	pipe := c.TxPipeline()
	pushes := make([]*redis.IntCmd, len(calls))
	guards := make([]*redis.Cmd, len(calls))
	for i, pc := range calls {
		pushes[i] = pipe.LPush(ctx, pc.ready, pc.envs...)
		guards[i] = scripts.publish.Eval(ctx, pipe, pc.keys(), pc.token, len(pc.envs))
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	for i := range calls {
		if perr := pushes[i].Err(); perr != nil {
			guards[i].SetErr(txCallErr(perr, guards[i].Err()))
		}
	}
	return guards
}

// txCallErr is the error of a call in a transaction whose LPUSH failed
// with push (not nil) and whose guard with guard (nil: none). When Redis
// refused the LPUSH as the transaction was queued (out of memory, no
// permission), it runs nothing and EXEC answers EXECABORT, which go-redis
// gives to the commands that were queued (a cluster client to every
// command not refused): the LPUSH's error is then the reason. An LPUSH
// that failed while its guard ran fails the call too.
func txCallErr(push, guard error) error {
	if guard == nil || strings.HasPrefix(guard.Error(), "EXECABORT") {
		return push
	}
	return guard
}

// pushScripts returns calls as calls of publish.lua when they are all
// small, or nil.
func pushScripts(calls []*pushCall) []scriptCall {
	for _, pc := range calls {
		if len(pc.envs) > pushScriptMax {
			return nil
		}
	}
	sc := make([]scriptCall, len(calls))
	for i, pc := range calls {
		args := append([]any{pc.token, len(pc.envs)}, pc.envs...)
		sc[i] = scriptCall{script: scripts.publish, keys: pc.keys(), args: args}
	}
	return sc
}

// flush sends one publish call per queue, in one pipeline: the first time
// without Lua on slot's dedicated connection when the fast path allows it
// (see fence.go).
func (p *publisher) flush(slot int, batch []*publishRequest) {
	var calls []*remembered
	if len(batch) == 1 {
		// a call alone (one goroutine publishing) needs no grouping
		if batch[0].state.CompareAndSwap(requestPending, requestTaken) {
			calls = []*remembered{p.call(batch)}
		}
	} else {
		var queues []*redisQueue
		byQueue := map[*redisQueue][]*publishRequest{}
		for _, r := range batch {
			if !r.state.CompareAndSwap(requestPending, requestTaken) {
				continue // withdrawn by its caller
			}
			if byQueue[r.q] == nil {
				queues = append(queues, r.q)
			}
			byQueue[r.q] = append(byQueue[r.q], r)
		}
		calls = make([]*remembered, 0, len(queues))
		for _, q := range queues {
			calls = append(calls, p.call(byQueue[q]))
		}
	}
	if len(calls) == 0 {
		return
	}
	var first func([]*remembered) []*redis.Cmd
	if p.fast.usable(calls, time.Now()) {
		first = func(calls []*remembered) []*redis.Cmd {
			return p.fast.send(context.Background(), slot, calls)
		}
	}
	p.conn.sendAll(calls, first)
}

// call is one publish call of the requests rs, all to one queue: their
// envelopes in order (a lone request's as they are, not copied), sent
// again until the latest of their deadlines, and its answer given to each.
func (p *publisher) call(rs []*publishRequest) *remembered {
	envs := rs[0].envs
	if len(rs) > 1 {
		envs = nil
		for _, r := range rs {
			envs = append(envs, r.envs...)
		}
	}
	field, token := p.fields.take(p.conn)
	rc := &remembered{push: p.pushCall(rs[0].q, field, token, envs)}
	for _, r := range rs {
		if r.deadline.After(rc.deadline) {
			rc.deadline = r.deadline
		}
	}
	rc.done = func(_ any, err error) {
		if rc.fence == nil || rc.fenced {
			p.fields.put(field)
		} // else its first send may still run: the field is retired
		for _, r := range rs {
			r.done <- err
		}
	}
	return rc
}
