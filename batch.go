package redq

import (
	"context"
	"time"
)

// BatchConsumer handles deliveries in batches (see AddBatchConsumer).
type BatchConsumer interface {
	Consume(batch Deliveries)
}

// BatchConsumerFunc is a function that is a BatchConsumer.
type BatchConsumerFunc func(Deliveries)

// Consume calls f(batch).
func (f BatchConsumerFunc) Consume(batch Deliveries) { f(batch) }

// Deliveries is a batch. Ack, Reject and Push act on the whole batch in one
// Redis call per queue and return the errors by index; an empty map means
// every delivery succeeded.
type Deliveries []Delivery

// Payloads returns the payloads in order.
func (ds Deliveries) Payloads() []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Payload()
	}
	return out
}

// Ack acks every delivery. Like Delivery.Ack, it retries Redis errors for
// at most the heartbeat TTL.
func (ds Deliveries) Ack() map[int]error {
	ctx, cancel := ds.untilTTL()
	defer cancel()
	return ds.AckContext(ctx)
}

// Reject rejects every delivery.
func (ds Deliveries) Reject() map[int]error {
	ctx, cancel := ds.untilTTL()
	defer cancel()
	return ds.RejectContext(ctx)
}

// Push pushes every delivery.
func (ds Deliveries) Push() map[int]error {
	ctx, cancel := ds.untilTTL()
	defer cancel()
	return ds.PushContext(ctx)
}

func (ds Deliveries) untilTTL() (context.Context, context.CancelFunc) {
	for _, d := range ds {
		if rd, ok := d.(*redisDelivery); ok {
			return context.WithDeadline(context.Background(), rd.ttl())
		}
	}
	return context.WithCancel(context.Background())
}

// AckContext is Ack with a context.
func (ds Deliveries) AckContext(ctx context.Context) map[int]error {
	return ds.each(ctx, "ack", Delivery.AckContext)
}

// RejectContext is Reject with a context.
func (ds Deliveries) RejectContext(ctx context.Context) map[int]error {
	return ds.each(ctx, "reject", Delivery.RejectContext)
}

// PushContext is Push with a context.
func (ds Deliveries) PushContext(ctx context.Context) map[int]error {
	return ds.each(ctx, "push", Delivery.PushContext)
}

// each groups the Redis deliveries by queue and settles each group in one
// request to the committer (which chunks it). Other Delivery
// implementations (test doubles) get
// the single verb; deliveries whose group call failed with a Redis error
// get the single verb too, which retries and knows the call may have
// reached Redis.
func (ds Deliveries) each(ctx context.Context, verb string, single func(Delivery, context.Context) error) map[int]error {
	errs := map[int]error{}
	byQueue := map[*redisQueue][]int{}
	var queues []*redisQueue
	for i, d := range ds {
		rd, ok := d.(*redisDelivery)
		if !ok {
			if err := single(d, ctx); err != nil {
				errs[i] = err
			}
			continue
		}
		if _, seen := byQueue[rd.q]; !seen {
			queues = append(queues, rd.q)
		}
		byQueue[rd.q] = append(byQueue[rd.q], i)
	}
	for _, q := range queues {
		idx := byQueue[q]
		ids := make([]string, len(idx))
		for j, i := range idx {
			ids[j] = ds[i].(*redisDelivery).ref()
		}
		done, registered, err := q.settle(ctx, verb, ids)
		for j, i := range idx {
			var e error
			if err != nil {
				e = ds[i].(*redisDelivery).do(ctx, verb, true, time.Time{})
			} else {
				e = q.conn.outcome(verb, done[j], registered, false)
			}
			if e != nil {
				errs[i] = e
			}
		}
	}
	return errs
}
