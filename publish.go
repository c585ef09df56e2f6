package redq

import (
	"context"
	"fmt"
	"net/http"
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
	return o.delay > 0 || !o.at.IsZero() || o.priority > 0 || o.ttl > 0
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
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return err
		}
	}
	return q.publish(ctx, o, [][]byte{payload})
}

func (q *redisQueue) publish(ctx context.Context, o publishOptions, payloads [][]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	if q.conn.isStopped() {
		return ErrorConsumingStopped
	}
	m := meta{priority: o.priority, ttr: o.ttr, ttl: o.ttl, header: o.header}
	now := time.Now()
	args := make([]any, len(payloads))
	size := 0
	for i, p := range payloads {
		size += len(p)
		if len(p) > q.conn.opts.maxPayloadSize {
			return fmt.Errorf("%w: payload %d is %d bytes, the maximum is %d", ErrorPayloadTooLarge, i, len(p), q.conn.opts.maxPayloadSize)
		}
		env, err := encodeEnvelope(q.conn.ids, now, m, p)
		if err != nil {
			return argError("header", o.header, err.Error())
		}
		args[i] = env
	}
	var err error
	switch {
	case o.scheduled():
		var at int64
		if !o.at.IsZero() {
			at = max(1, o.at.UnixMilli())
		}
		head := []any{q.keys.prefix, o.priority, ceilMs(o.ttl), ceilMs(o.delay), at}
		err = scripts.publish.Run(ctx, q.conn.client, []string{q.keys.ready}, append(head, args...)...).Err()
	case len(args) <= coalesceMaxPayloads && size <= coalesceMaxBytes:
		err = q.conn.publisher.publish(ctx, q, args)
	default:
		err = q.conn.client.LPush(ctx, q.keys.ready, args...).Err()
	}
	if err != nil {
		return fmt.Errorf("redq: publish to %q: %w", q.name, err)
	}
	return nil
}

// Small publishes from many goroutines (request handlers, typically) are
// coalesced: concurrent calls share one LPUSH per queue (see groupCommit),
// in the order they arrived, and each returns after Redis answered for its
// payloads. Large ones go to Redis on their own.
const (
	coalesceMaxPayloads = 100
	coalesceMaxBytes    = 64 << 10
)

type publishRequest struct {
	q    *redisQueue
	envs []any
	done chan error
}

type publisher struct {
	conn  *redisConnection
	group *groupCommit[*publishRequest]
}

func newPublisher(c *redisConnection) *publisher {
	p := &publisher{conn: c}
	p.group = newGroupCommit(p.flush)
	return p
}

// publish pushes envelopes to q's ready list together with whatever other
// goroutines publish at the same time. When ctx ends first the publish may
// still happen.
func (p *publisher) publish(ctx context.Context, q *redisQueue, envs []any) error {
	r := &publishRequest{q: q, envs: envs, done: make(chan error, 1)}
	p.group.submit(r)
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush sends one LPUSH per queue, in one pipeline when there are several.
func (p *publisher) flush(_ int, batch []*publishRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	var queues []*redisQueue
	byQueue := map[*redisQueue][]*publishRequest{}
	for _, r := range batch {
		if byQueue[r.q] == nil {
			queues = append(queues, r.q)
		}
		byQueue[r.q] = append(byQueue[r.q], r)
	}
	lpush := func(c redis.Cmdable, q *redisQueue) *redis.IntCmd {
		var args []any
		for _, r := range byQueue[q] {
			args = append(args, r.envs...)
		}
		return c.LPush(ctx, q.keys.ready, args...)
	}
	if len(queues) == 1 {
		err := lpush(p.conn.client, queues[0]).Err()
		for _, r := range batch {
			r.done <- err
		}
		return
	}
	pipe := p.conn.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(queues))
	for i, q := range queues {
		cmds[i] = lpush(pipe, q)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	for i, q := range queues {
		for _, r := range byQueue[q] {
			r.done <- cmds[i].Err()
		}
	}
}
