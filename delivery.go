package redq

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Delivery is one message taken from a queue, as rmq v5 has it: its
// payload and the three verbs that settle it. Implement it in a mock and
// it still is a redq Delivery. Every Delivery that redq hands to a
// Consumer is also a Message (assert it to get the rest: d.(redq.Message))
// and a WithHeader; AddHandler, Take, TakeBatch and batch consumers hand
// out Messages directly.
//
// A delivery lives in the consuming connection's unacked storage in Redis
// until it is acked, rejected, pushed or released; each verb acts on
// exactly this delivery, even when other deliveries carry byte-identical
// payloads.
type Delivery interface {
	// Payload returns the published payload.
	Payload() string
	// Ack removes the delivery from Redis. nil means it is gone. An error
	// that is ErrorNotFound (compare with ==, as in rmq) means it was not
	// this connection's any more: settled already, or returned to ready by
	// a cleaner (AckContext says which).
	Ack() error
	// Reject moves the delivery to the queue's rejected list.
	Reject() error
	// Push moves the delivery to the push queue's ready list (see
	// SetPushQueue), or rejects it when there is no push queue.
	Push() error
}

// WithHeader is a Delivery with headers (see Header, PayloadWithHeader);
// every Delivery that redq hands out is one.
type WithHeader interface {
	// Header returns the headers the publisher attached, or nil.
	Header() http.Header
}

// Message is a Delivery with redq's verbs and metadata. Every Delivery
// redq hands out is a Message.
type Message interface {
	Delivery
	WithHeader
	// ID returns the delivery's id (32 hex digits), unique per publish.
	ID() string
	// Attempts returns how many times the delivery has been taken, this
	// time included: 1 the first time, one more after each Release, lost
	// lease or dead connection that sent it back to ready.
	Attempts() int
	// PublishedAt returns when it was published, by the publisher's clock
	// (zero for items that another program pushed without an envelope).
	PublishedAt() time.Time
	// Key returns the key of a keyed delivery (see Queue.Upsert), or "".
	Key() string
	// AckContext is Ack with a context, and with the detail of a failure:
	// an error matching ErrorNotFound also matches ErrorConnectionLost or
	// ErrorLeaseLost when that is why.
	AckContext(ctx context.Context) error
	// RejectContext is Reject with a context, and with the detail of a
	// failure (see AckContext).
	RejectContext(ctx context.Context) error
	// PushContext is Push with a context, and with the detail of a failure
	// (see AckContext).
	PushContext(ctx context.Context) error
	// Release hands the delivery back: it becomes ready again after delay
	// (0: at once, at the back of its priority's line), with its attempt
	// counted. delay must be between 0 and MaxDelay.
	Release(ctx context.Context, delay time.Duration) error
	// Touch extends the delivery's lease to its TTR from now (see TTR). On
	// a delivery without a TTR it only checks that the delivery is still
	// this connection's.
	Touch(ctx context.Context) error
}

// Every verb on a delivery that is no longer this connection's fails with
// ErrorNotFound; with the context forms and Release and Touch, the error
// also matches ErrorLeaseLost when a lease ran out, and
// ErrorConnectionLost when a cleaner declared the connection dead.

type redisDelivery struct {
	q       *redisQueue
	reg     *registration // of the connection, under which it was taken
	id      string
	fence   string // of the fetch call that took it (see fetch.lua)
	payload string
	meta
	// leaseEnd is when the lease runs out by this process's clock (unix
	// ns; 0: no lease), measured from before the fetch or Touch was sent,
	// so it never ends later than Redis's lease.
	leaseEnd atomic.Int64
	// onTouch, if set, learns the new lease end after a Touch (a handler's
	// context timer).
	onTouch atomic.Pointer[func(time.Time)]
	// faulty is why the payload cannot be read: it carries the rmq header
	// signature without a readable header. Such deliveries are rejected
	// when fetched instead of handed out, as rmq does.
	faulty error
}

func newDelivery(q *redisQueue, reg *registration, s, fence string, sent time.Time) *redisDelivery {
	env, _ := decodeEnvelope(s)
	d := &redisDelivery{q: q, reg: reg, id: env.id, fence: fence, payload: env.payload, meta: env.meta}
	if d.ttr > 0 {
		d.leaseEnd.Store(sent.Add(d.ttr).UnixNano())
	}
	if strings.HasPrefix(d.payload, rmqHeaderSignature) {
		// headers carried the rmq way (PayloadWithHeader)
		h, p, err := ExtractHeaderAndPayload(d.payload)
		if err != nil {
			d.faulty = err
		} else {
			d.payload = p
			if d.header == nil {
				d.header = h
			} else {
				for k, v := range h {
					if _, ok := d.header[k]; !ok {
						d.header[k] = v
					}
				}
			}
		}
	}
	return d
}

func (d *redisDelivery) Payload() string        { return d.payload }
func (d *redisDelivery) Header() http.Header    { return d.header }
func (d *redisDelivery) ID() string             { return hex.EncodeToString([]byte(d.id)) }
func (d *redisDelivery) Attempts() int          { return d.attempts + 1 }
func (d *redisDelivery) PublishedAt() time.Time { return publishedAt(d.id) }
func (d *redisDelivery) Key() string            { return d.key }
func (d *redisDelivery) String() string         { return fmt.Sprintf("[%s %x]", d.q.name, d.id) }

// ref names this take of the delivery to the scripts: its field in the
// connection's unacked hash, the id followed by the take's fence, and 'k'
// for a keyed item or 'g' for a grouped delivery (see fetch.lua). A later
// take of the same delivery has another fence, so a verb on this handle
// can never act on it.
func (d *redisDelivery) ref() string {
	if d.key != "" {
		return d.id + d.fence + "k"
	}
	if d.group != "" {
		return d.id + d.fence + "g"
	}
	return d.id + d.fence
}

// leaseOver reports whether the delivery's lease has run out by this
// process's clock (never, without a lease; the clock is read only then).
func (d *redisDelivery) leaseOver() bool {
	end := d.leaseEnd.Load()
	return end != 0 && time.Now().UnixNano() >= end
}

// The verbs that change Redis send their call again while Redis is
// unreachable or refuses writes for a moment, under the same token, until
// the connection's retry timeout (WithRetryTimeout) or the context's
// deadline, whichever is sooner (see sends). They return nil when the
// delivery was settled by this call (by any send of it), an error matching
// ErrorNotFound only when it was not, and ErrorOutcomeUnknown,
// ErrorUnavailable or ErrorWritesRefused when Redis gave no answer.

func (d *redisDelivery) Ack() error { return rmqError(d.settle(context.Background(), "ack")) }

func (d *redisDelivery) Reject() error { return rmqError(d.settle(context.Background(), "reject")) }

func (d *redisDelivery) Push() error { return rmqError(d.settle(context.Background(), "push")) }

func (d *redisDelivery) AckContext(ctx context.Context) error { return d.settle(ctx, "ack") }

func (d *redisDelivery) RejectContext(ctx context.Context) error { return d.settle(ctx, "reject") }

func (d *redisDelivery) PushContext(ctx context.Context) error { return d.settle(ctx, "push") }

func (d *redisDelivery) Release(ctx context.Context, delay time.Duration) error {
	if delay < 0 || delay > MaxDelay {
		return argError("release delay", delay, "must be between 0 and "+MaxDelay.String())
	}
	return d.single(ctx, "release", scripts.release, ceilMs(delay))
}

func (d *redisDelivery) Touch(ctx context.Context) error {
	sent := time.Now()
	if err := d.single(ctx, "touch", scripts.touch, d.ttr.Milliseconds()); err != nil {
		return err
	}
	if d.ttr > 0 {
		end := sent.Add(d.ttr)
		d.leaseEnd.Store(end.UnixNano())
		if f := d.onTouch.Load(); f != nil {
			(*f)(end)
		}
	}
	return nil
}

// rejectWith rejects the delivery, keeping env (the delivery rewritten with
// a reason) in rejected.
func (d *redisDelivery) rejectWith(ctx context.Context, env []byte) error {
	return d.single(ctx, "reject", scripts.rejectWith, env)
}

// settle runs a settle verb ("ack", "reject" or "push") through the
// connection's committer.
func (d *redisDelivery) settle(ctx context.Context, verb string) error {
	if err := d.q.conn.settleable(d.reg); err != nil {
		return errorf("redq: %s %v: %w", verb, d, err)
	}
	res, err := d.q.settle(ctx, verb, d.reg, []string{d.ref()}, d)
	d.q.signalRoom() // the connection may hold fewer now (see fetchLoop)
	if err == nil {
		err = res.err(0)
	}
	if err != nil {
		return errorf("redq: %s %v: %w", verb, d, err)
	}
	if err := d.q.conn.outcome(verb, d.reg, res.codes[0], res.registered); err != nil || res.waited == nil {
		return err
	}
	return errorf("redq: %s %v: %w", verb, d, res.waited)
}

// single runs one of the scripts that act on one delivery and reply
// {registered, code}, under a token of its own (see remove_held in
// scripts/lib.lua), sending it again as settle does.
func (d *redisDelivery) single(ctx context.Context, verb string, script *redis.Script, arg any) error {
	if err := d.q.conn.settleable(d.reg); err != nil {
		return errorf("redq: %s %v: %w", verb, d, err)
	}
	token := d.q.conn.nextToken()
	start := time.Now()
	var code int64
	var registered bool
	var waited error // with WithWaitReplicas: replicas missing
	err := d.q.conn.resend(ctx, func(ctx context.Context) error {
		v, err := d.q.conn.runScript(ctx, scriptCall{script, d.q.keys.scriptKeys("", nil, d.q.keys.connKeys(d.reg.name)),
			[]any{d.reg.name, d.ref(), token, arg}})
		if errors.Is(err, ErrorNotReplicated) {
			waited, err = err, nil
		}
		if err != nil {
			return err
		}
		ns, err := int64s(v)
		if err != nil || len(ns) != 2 {
			return errorf("%w %v to %s", errBadReply, v, verb)
		}
		code, registered = ns[1], ns[0] == 1
		return nil
	}, func(err error, count int) {
		d.q.conn.report(&DeliveryError{Delivery: d, RedisErr: err, Count: count})
	})
	if d.q.conn.opts.observer != nil {
		d.q.conn.observe(EventSettle, d.q.name, verb, 1, start, err)
	}
	d.q.signalRoom()
	if err != nil {
		return errorf("redq: %s %v: %w", verb, d, err)
	}
	if err := d.q.conn.outcome(verb, d.reg, code, registered); err != nil || waited == nil {
		return err
	}
	return errorf("redq: %s %v: %w", verb, d, waited)
}

// Codes the scripts give per delivery.
const (
	codeMissing = 0 // not in this connection's storage
	codeDone    = 1
	codeLost    = 2 // not there: its lease ran out and it went back to ready
)

// outcome turns a script's answer about one take made under reg into the
// verb's error.
func (c *redisConnection) outcome(verb string, reg *registration, code int64, registered bool) error {
	switch {
	case code == codeDone:
		return nil
	case !registered:
		c.suspect(reg)
		return errorf("redq: %s: %w (%w)", verb, ErrorNotFound, ErrorConnectionLost)
	case code == codeLost:
		return errorf("redq: %s: %w (%w)", verb, ErrorNotFound, ErrorLeaseLost)
	default:
		return errorf("redq: %s: %w", verb, ErrorNotFound)
	}
}

// rmqError is the error of rmq's verbs (Ack, Reject, Push and a batch's):
// the bare sentinel where rmq returns one, so that err == ErrorNotFound and
// err == ErrorConsumingStopped hold as they do in rmq code. A case rmq does
// not have (a lease that ran out, an outcome Redis did not tell) keeps its
// detail.
func rmqError(err error) error {
	switch {
	case err == nil, errors.Is(err, ErrorLeaseLost):
		return err
	case errors.Is(err, ErrorNotFound):
		return ErrorNotFound
	case errors.Is(err, ErrorConsumingStopped):
		return ErrorConsumingStopped
	}
	return err
}
