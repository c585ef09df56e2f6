package redq

import (
	"time"
)

// Observer is told about each call a connection makes to Redis on its
// hot paths: fetches, settles, heartbeats and publishes, with how long
// each took. Metrics exporters implement it (see the redqprom module); set
// one with WithObserver.
//
// Observe is called synchronously on the goroutine that made the call,
// from many goroutines at once: it must be safe for concurrent use, return
// quickly and never block (update a counter or a histogram, no I/O). It
// must not keep ev.Err beyond the call if that matters to it.
type Observer interface {
	Observe(ev Event)
}

// ObserverFunc is a function that is an Observer.
type ObserverFunc func(ev Event)

// Observe calls f(ev).
func (f ObserverFunc) Observe(ev Event) { f(ev) }

// EventKind says which call an Event is about.
type EventKind uint8

// The kinds of Event. New kinds may be added: an Observer ignores the
// kinds it does not know.
const (
	// EventFetch is one fetch of a consuming queue: a script call that
	// moves up to the free room of its prefetch buffer from ready to the
	// connection's unacked storage. Count is how many it moved (0 when
	// the queue was empty); the blocking wait of an idle queue is not in
	// Duration.
	EventFetch EventKind = iota + 1
	// EventSettle is one settle request: an Ack, Reject or Push of a
	// delivery, or of the deliveries of a batch of one queue (Count), or a
	// Release or Touch of a delivery (a handler's retries and final
	// rejections are Releases and Rejects). Op says which. Duration runs
	// from the request to Redis's answer, so it includes the wait for the
	// group commit to pick it up and any resends.
	EventSettle
	// EventHeartbeat is one heartbeat refresh of the connection
	// (Connection names it). Err is set when it failed.
	EventHeartbeat
	// EventPublish is one publish call (Publish, PublishBytes, Put and
	// their forms) of Count payloads, from the call to Redis's answer.
	EventPublish
)

// String returns the kind's lower-case name: "fetch", "settle",
// "heartbeat", "publish".
func (k EventKind) String() string {
	switch k {
	case EventFetch:
		return "fetch"
	case EventSettle:
		return "settle"
	case EventHeartbeat:
		return "heartbeat"
	case EventPublish:
		return "publish"
	}
	return "unknown"
}

// Event describes one call a connection made to Redis (see Observer).
type Event struct {
	Kind EventKind
	// Queue is the queue the call was for; "" for a heartbeat.
	Queue string
	// Op is the verb of an EventSettle: "ack", "reject", "push",
	// "release" or "touch".
	Op string
	// Connection is the connection's full name at the time of the call.
	// It is set on heartbeats only (other kinds leave it empty, to keep
	// the hot paths cheap).
	Connection string
	// Count is how many deliveries the call moved or carried.
	Count int
	// Duration is how long the call took.
	Duration time.Duration
	// Err is the call's error: nil when Redis answered. A settle whose
	// delivery was no longer the connection's (ErrorNotFound) is not an
	// error here: Redis answered.
	Err error
}

// WithObserver makes the connection tell o about its fetches, settles,
// heartbeats and publishes (see Observer). A nil o is refused. Default:
// none, which costs one nil check per call.
func WithObserver(o Observer) Option {
	return func(opts *options) error {
		if o == nil {
			return argError("observer", o, "must not be nil")
		}
		opts.observer = o
		return nil
	}
}

// observe passes ev to the connection's observer, if it has one. Callers
// on hot paths check c.opts.observer first, so that nothing is measured
// when nobody listens.
func (c *redisConnection) observe(kind EventKind, queue, op string, n int, start time.Time, err error) {
	o := c.opts.observer
	if o == nil {
		return
	}
	ev := Event{Kind: kind, Queue: queue, Op: op, Count: n, Duration: time.Since(start), Err: err}
	if kind == EventHeartbeat {
		ev.Connection = c.Name()
	}
	o.Observe(ev)
}
