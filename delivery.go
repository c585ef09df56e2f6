package redq

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Delivery is one message taken from a queue. It lives in the consuming
// connection's unacked storage in Redis until it is acked, rejected or
// pushed; each verb acts on exactly this delivery, even when other
// deliveries carry byte-identical payloads.
type Delivery interface {
	// Payload returns the published payload.
	Payload() string
	// Header returns the headers the publisher attached (see Header), or nil.
	Header() http.Header
	// Ack removes the delivery from Redis. nil means it is gone.
	Ack() error
	// Reject moves the delivery to the queue's rejected list.
	Reject() error
	// Push moves the delivery to the push queue's ready list (see
	// SetPushQueue), or rejects it when there is no push queue.
	Push() error
	// AckContext is Ack with a context.
	AckContext(ctx context.Context) error
	// RejectContext is Reject with a context.
	RejectContext(ctx context.Context) error
	// PushContext is Push with a context.
	PushContext(ctx context.Context) error
}

type redisDelivery struct {
	q       *redisQueue
	id      string
	payload string
	header  http.Header
}

func (d *redisDelivery) Payload() string     { return d.payload }
func (d *redisDelivery) Header() http.Header { return d.header }
func (d *redisDelivery) String() string      { return fmt.Sprintf("[%s %x]", d.q.name, d.id) }

// The forms without a context retry Redis errors for as long as the
// heartbeat TTL from the call: past that, a cleaner may have returned the
// delivery anyway. The first attempt needs no deadline of its own (the
// committer bounds every flush), so the deadline is made only when a retry
// needs it: that keeps a timer per ack off the hot path.
func (d *redisDelivery) ttl() time.Time { return time.Now().Add(d.q.conn.opts.heartbeatTTL) }

func (d *redisDelivery) Ack() error { return d.do(context.Background(), "ack", false, d.ttl()) }

func (d *redisDelivery) Reject() error { return d.do(context.Background(), "reject", false, d.ttl()) }

func (d *redisDelivery) Push() error { return d.do(context.Background(), "push", false, d.ttl()) }

func (d *redisDelivery) AckContext(ctx context.Context) error {
	return d.do(ctx, "ack", false, time.Time{})
}

func (d *redisDelivery) RejectContext(ctx context.Context) error {
	return d.do(ctx, "reject", false, time.Time{})
}

func (d *redisDelivery) PushContext(ctx context.Context) error {
	return d.do(ctx, "push", false, time.Time{})
}

// do runs a verb; retried says an earlier attempt may have reached Redis.
// A non-zero limit ends the retries at that time, as a deadline on ctx
// would.
func (d *redisDelivery) do(ctx context.Context, verb string, retried bool, limit time.Time) error {
	return d.retry(ctx, verb, retried, limit, func(ctx context.Context) (bool, bool, error) {
		done, registered, err := d.q.settle(ctx, verb, []string{d.id})
		if err != nil {
			return false, false, err
		}
		return done[0], registered, nil
	})
}

// retry runs one verb until Redis answers, reporting each failure as a
// DeliveryError. When Redis answers that the delivery was not there, the
// result depends on whether the connection is still registered for the
// queue: if not, a cleaner took the delivery back (ErrorConnectionLost);
// if so and an earlier attempt may have reached Redis, that attempt did the
// work (no cleaner touches a registered connection), so the verb succeeded.
func (d *redisDelivery) retry(ctx context.Context, verb string, retried bool, limit time.Time, do func(context.Context) (done, registered bool, err error)) error {
	for attempt := 1; ; attempt++ {
		done, registered, err := do(ctx)
		if err == nil {
			return d.q.conn.outcome(verb, done, registered, retried || attempt > 1)
		}
		if attempt == 1 && !limit.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, limit)
			defer cancel()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("redq: %s %v: %w", verb, d, err)
		}
		d.q.conn.report(&DeliveryError{Delivery: d, RedisErr: err, Count: attempt})
		select {
		case <-ctx.Done():
			return fmt.Errorf("redq: %s %v: %w", verb, d, err)
		case <-time.After(backoff(attempt, time.Second)):
		}
	}
}

// outcome turns a script's answer about one delivery into the verb's error.
func (c *redisConnection) outcome(verb string, done, registered, retried bool) error {
	switch {
	case done:
		return nil
	case !registered:
		go c.connectionLost()
		return fmt.Errorf("redq: %s: %w (%w)", verb, ErrorNotFound, ErrorConnectionLost)
	case retried:
		return nil
	default:
		return fmt.Errorf("redq: %s: %w", verb, ErrorNotFound)
	}
}
