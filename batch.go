package redq

import (
	"context"
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
// every delivery succeeded. The errors are rmq's (ErrorNotFound compares
// with ==); the context forms give the detail as Message.AckContext does.
type Deliveries []Message

// Payloads returns the payloads in order.
func (ds Deliveries) Payloads() []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Payload()
	}
	return out
}

// Ack acks every delivery. Like Delivery.Ack, it sends its calls again
// while Redis is unreachable, up to the connection's retry timeout.
func (ds Deliveries) Ack() map[int]error { return rmqErrors(ds.AckContext(context.Background())) }

// Reject rejects every delivery.
func (ds Deliveries) Reject() map[int]error { return rmqErrors(ds.RejectContext(context.Background())) }

// Push pushes every delivery.
func (ds Deliveries) Push() map[int]error { return rmqErrors(ds.PushContext(context.Background())) }

func rmqErrors(errs map[int]error) map[int]error {
	for i, err := range errs {
		errs[i] = rmqError(err)
	}
	return errs
}

// AckContext is Ack with a context.
func (ds Deliveries) AckContext(ctx context.Context) map[int]error {
	return ds.each(ctx, "ack", Message.AckContext)
}

// RejectContext is Reject with a context.
func (ds Deliveries) RejectContext(ctx context.Context) map[int]error {
	return ds.each(ctx, "reject", Message.RejectContext)
}

// PushContext is Push with a context.
func (ds Deliveries) PushContext(ctx context.Context) map[int]error {
	return ds.each(ctx, "push", Message.PushContext)
}

// each groups the Redis deliveries by queue handle and settles each group
// in one request to the committer (which chunks it); each delivery gets the
// answer for itself, as its own verb would give. Other Delivery
// implementations (test doubles) get the single verb.
func (ds Deliveries) each(ctx context.Context, verb string, single func(Message, context.Context) error) map[int]error {
	errs := map[int]error{}
	type group struct {
		q   *redisQueue
		reg *registration
	}
	byQueue := map[group][]int{}
	var queues []group
	for i, d := range ds {
		rd, ok := d.(*redisDelivery)
		if !ok {
			if err := single(d, ctx); err != nil {
				errs[i] = err
			}
			continue
		}
		g := group{rd.q, rd.reg}
		if _, seen := byQueue[g]; !seen {
			queues = append(queues, g)
		}
		byQueue[g] = append(byQueue[g], i)
	}
	for _, g := range queues {
		q, idx := g.q, byQueue[g]
		first := ds[idx[0]].(*redisDelivery)
		if err := q.conn.settleable(g.reg); err != nil {
			for _, i := range idx {
				errs[i] = errorf("redq: %s %v: %w", verb, ds[i], err)
			}
			continue
		}
		ids := make([]string, len(idx))
		for j, i := range idx {
			ids[j] = ds[i].(*redisDelivery).ref()
		}
		res, err := q.settle(ctx, verb, g.reg, ids, first)
		q.signalRoom()
		for j, i := range idx {
			e := err
			if e == nil {
				e = res.err(j)
			}
			if e != nil {
				e = errorf("redq: %s %v: %w", verb, ds[i], e)
			} else if e = q.conn.outcome(verb, g.reg, res.codes[j], res.registered); e == nil && res.waited != nil {
				e = errorf("redq: %s %v: %w", verb, ds[i], res.waited)
			}
			if e != nil {
				errs[i] = e
			}
		}
	}
	return errs
}
