package redq

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"
)

// Handler handles one delivery (see Queue.AddHandler). Return nil when the
// work is done; return an error to have the delivery retried by the
// queue's retry policy. The handler must not Ack, Reject, Push or Release
// the delivery itself; it may Touch it to extend its lease.
type Handler func(ctx context.Context, m Message) error

// Headers that a handler's final rejection writes into the rejected
// delivery, so that an operator can read why it failed.
const (
	// HeaderError holds the last error (or panic) of the handler, or why
	// the delivery was rejected without being handled.
	HeaderError = "Redq-Error"
	// HeaderAttempts holds how many times it was attempted.
	HeaderAttempts = "Redq-Attempts"
)

func (q *redisQueue) AddHandler(tag string, handler Handler) (string, error) {
	if handler == nil {
		return "", argError("handler", handler, "must not be nil")
	}
	return q.addConsumer(tag, func() {
		for {
			d, ok := q.next()
			if !ok {
				return
			}
			q.handle1(handler, d)
		}
	})
}

// handle1 runs handler on d and settles d by the result.
func (q *redisQueue) handle1(handler Handler, d *redisDelivery) {
	policy := q.retry
	if d.Attempts() > policy.MaxAttempts {
		// It went back to ready without a verdict (a lost lease, a dead
		// connection) more often than the policy allows: a delivery that
		// hangs or kills its consumer must not come back for ever.
		q.finish(d, d.rejectFailed(fmt.Sprintf("not handled: attempted %d times, more than the %d allowed (its lease ran out or its connection died each time)", d.Attempts()-1, policy.MaxAttempts)))
		return
	}
	ctx, cancel := context.WithCancel(q.stopCtx)
	defer cancel()
	if end := d.leaseEnd.Load(); end != 0 {
		t := time.AfterFunc(time.Until(time.Unix(0, end)), cancel)
		defer t.Stop()
		f := func(end time.Time) { t.Reset(time.Until(end)) }
		d.onTouch.Store(&f)
	}
	err := runHandler(ctx, handler, d)
	switch {
	case err == nil:
		q.finish(d, d.AckContext(context.Background()))
	case q.stopCtx.Err() != nil:
		// Consuming stopped under the handler: hand the delivery back
		// without counting an attempt, as if it had never been taken.
		res, serr := q.conn.acks.settle(context.Background(), q, d.reg, modeHead, q.keys.ready, []string{d.ref()}, d)
		if serr == nil {
			serr = res.err(0)
		}
		q.finish(d, serr)
	case d.Attempts() < policy.MaxAttempts:
		q.finish(d, d.Release(context.Background(), policy.Backoff(d.Attempts())))
	default:
		q.finish(d, d.rejectFailed(err.Error()))
	}
}

// runHandler calls handler, turning a panic into an error.
func runHandler(ctx context.Context, handler Handler, d Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return handler(ctx, d)
}

// finish reports a failed settle on the error channel: the delivery stays
// where Redis has it (unacked until a lease or cleaner returns it), so
// nothing is lost, but the owner should know.
func (q *redisQueue) finish(d *redisDelivery, err error) {
	if err != nil && !errors.Is(err, ErrorConnectionLost) {
		q.conn.report(&DeliveryError{Delivery: d, RedisErr: err, Count: 1})
	}
}

// rejectFailed rejects d with reason in its headers.
func (d *redisDelivery) rejectFailed(reason string) error {
	h := http.Header{}
	for k, v := range d.header {
		h[k] = v
	}
	h.Set(HeaderError, reason)
	h.Set(HeaderAttempts, strconv.Itoa(d.Attempts()))
	m := d.meta
	m.header = h
	env, err := encodeWithID(d.id, m, []byte(d.payload))
	if err != nil {
		return err
	}
	return d.rejectWith(context.Background(), env)
}
