package redq

import (
	"context"
	"fmt"
	"net/http"

	"github.com/redis/go-redis/v9"
)

// PublishOption sets a property of a published delivery (see Put).
type PublishOption func(*publishOptions)

type publishOptions struct {
	header http.Header
}

// Header attaches headers to a published delivery; the consumer reads them
// with Delivery.Header.
func Header(h http.Header) PublishOption {
	return func(o *publishOptions) { o.header = h }
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
	return q.publish(ctx, nil, bs)
}

func (q *redisQueue) PublishBytesContext(ctx context.Context, payload ...[]byte) error {
	return q.publish(ctx, nil, payload)
}

func (q *redisQueue) Put(ctx context.Context, payload []byte, opts ...PublishOption) error {
	var o publishOptions
	for _, opt := range opts {
		opt(&o)
	}
	return q.publish(ctx, o.header, [][]byte{payload})
}

func (q *redisQueue) publish(ctx context.Context, header http.Header, payloads [][]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	if q.conn.isStopped() {
		return ErrorConsumingStopped
	}
	args := make([]any, len(payloads))
	size := 0
	for i, p := range payloads {
		size += len(p)
		if len(p) > q.conn.opts.maxPayloadSize {
			return fmt.Errorf("%w: payload %d is %d bytes, the maximum is %d", ErrorPayloadTooLarge, i, len(p), q.conn.opts.maxPayloadSize)
		}
		env, err := encodeEnvelope(q.conn.ids, header, p)
		if err != nil {
			return argError("header", header, err.Error())
		}
		args[i] = env
	}
	var err error
	if len(args) <= coalesceMaxPayloads && size <= coalesceMaxBytes {
		err = q.conn.publisher.publish(ctx, q, args)
	} else {
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
