package redq

import (
	"errors"
	"fmt"
)

// Errors returned by the API. Compare with errors.Is: most are wrapped with
// context about where they happened.
var (
	// ErrorNotFound is returned when a delivery is no longer in this
	// connection's unacked storage: it was acked, rejected or pushed already,
	// or a cleaner returned it to ready after the connection was declared
	// dead (then the error also matches ErrorConnectionLost).
	ErrorNotFound = errors.New("redq: entity not found")
	// ErrorAlreadyConsuming is returned by StartConsuming on a queue that is
	// consuming already.
	ErrorAlreadyConsuming = errors.New("redq: queue is already consuming")
	// ErrorNotConsuming is returned by AddConsumer and friends before
	// StartConsuming was called.
	ErrorNotConsuming = errors.New("redq: queue is not consuming; call StartConsuming first")
	// ErrorConsumingStopped is returned when a queue or connection is used
	// after StopConsuming or StopAllConsuming.
	ErrorConsumingStopped = errors.New("redq: consuming was stopped")
	// ErrorConnectionLost means Redis no longer knows the registration
	// under which the connection took a delivery: a cleaner declared it
	// dead (its heartbeat lapsed, for example because the process was
	// paused or cut off from Redis) and handed its unacked deliveries back
	// to ready, or Redis lost its data (a restart without persistence).
	// Deliveries taken under that registration belong to somebody else
	// now: their verbs fail with an error matching ErrorNotFound and
	// ErrorConnectionLost, and those still buffered are dropped. The
	// connection does not stop: it goes on under a fresh registration and
	// says so on the error channel with a *ConnectionLostError, which
	// matches ErrorConnectionLost.
	ErrorConnectionLost = errors.New("redq: connection was declared dead by a cleaner")
	// ErrorLeaseLost is returned (together with ErrorNotFound) by Ack,
	// Reject, Push, Release and Touch when the delivery's lease (its TTR)
	// ran out and it went back to ready, although the connection is alive.
	// Another consumer may be working on it now.
	ErrorLeaseLost = errors.New("redq: the delivery's lease ran out and it went back to ready")
	// ErrorTimeout is returned by Take and TakeBatch when nothing became
	// ready within the timeout.
	ErrorTimeout = errors.New("redq: nothing became ready within the timeout")
	// ErrorInvalidArgument is matched by every *ArgumentError.
	ErrorInvalidArgument = errors.New("redq: invalid argument")
	// ErrorPayloadTooLarge is returned by Publish, Put, Upsert and
	// Round.Add when a payload exceeds the connection's maximum payload
	// size (see WithMaxPayloadSize); the error is also an *ArgumentError.
	ErrorPayloadTooLarge = errors.New("redq: payload too large")
	// ErrorOutcomeUnknown is returned by a verb that changes Redis (Ack,
	// Reject, Push, Release, a batch's settle, Publish, Put) when Redis may
	// have carried it out but redq could not learn whether it did: no
	// answer came before the connection's retry timeout (WithRetryTimeout)
	// or the caller's context ended. redq resends such a call under the
	// same token until then, so it never happens twice, and it never
	// answers ErrorNotFound for a call that went through. A delivery whose
	// Ack has this outcome is either gone or still this connection's (a
	// cleaner or its lease brings it back): never settle it by other means.
	ErrorOutcomeUnknown = errors.New("redq: the outcome is unknown: Redis did not answer")
	// ErrorUnavailable is returned by a verb that could not reach Redis at
	// all (no connection could be made) until its retry timeout or context
	// ran out. Nothing was done.
	ErrorUnavailable = errors.New("redq: Redis is unavailable; nothing was done")
	// ErrorWritesRefused is returned by a verb that Redis refused because it
	// accepts no writes: it is out of memory (maxmemory with noeviction), or
	// a replica (READONLY), or still loading its data, until the retry
	// timeout or context ran out (out of memory is not waited on). Nothing
	// was done. It wraps Redis's error.
	ErrorWritesRefused = errors.New("redq: Redis refuses writes; nothing was done")
	// ErrorNotRedis is returned by operations that need a Redis-backed
	// connection (for example a Cleaner) when given a test double.
	ErrorNotRedis = errors.New("redq: not a Redis-backed connection")
)

// ArgumentError describes bad input: which argument and why. Nothing was
// changed in Redis when it is returned. It matches ErrorInvalidArgument.
type ArgumentError struct {
	Arg    string // the argument's name, e.g. "queue name" or "prefetchLimit"
	Value  any    // the value that was given
	Reason string // what is wrong with it
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("redq: invalid %s %#v: %s", e.Arg, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrorInvalidArgument) true.
func (e *ArgumentError) Is(target error) bool { return target == ErrorInvalidArgument }

func argError(arg string, value any, reason string) error {
	return &ArgumentError{Arg: arg, Value: value, Reason: reason}
}

// checkPayloadSize refuses a payload of size bytes over limit (see
// WithMaxPayloadSize) with an error that matches both ErrorPayloadTooLarge
// and *ArgumentError; what names it ("payload 3", "round item data").
func checkPayloadSize(what string, size, limit int) error {
	if size <= limit {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrorPayloadTooLarge,
		argError(what, fmt.Sprintf("%d bytes", size), fmt.Sprintf("must be at most %d bytes (see WithMaxPayloadSize)", limit)))
}

// ConnectionLostError is sent to the error channel when the connection
// learns that Redis no longer knows its registration OldName (see
// ErrorConnectionLost, which it matches) and has registered again, under
// the fresh name NewName (tag-<random>, as at open). From then on it
// fetches, takes and publishes under NewName, with its queues, consumers,
// handlers and Take callers as before; Name returns NewName. Deliveries
// taken under OldName are no longer its own.
type ConnectionLostError struct {
	OldName string
	NewName string
}

func (e *ConnectionLostError) Error() string {
	return fmt.Sprintf("redq: connection %s was declared dead or forgotten by Redis; it goes on as %s", e.OldName, e.NewName)
}

// Is makes errors.Is(err, ErrorConnectionLost) true.
func (e *ConnectionLostError) Is(target error) bool { return target == ErrorConnectionLost }

// HeartbeatError is sent to the error channel when refreshing the
// connection's heartbeat fails. Count is the number of consecutive
// failures. When it reaches the heartbeat error limit (see
// WithHeartbeatErrorLimit) the connection pauses, so that it does not work
// on deliveries a cleaner may return: it fetches nothing and hands out none
// of its buffered deliveries, consumers finish what they hold, and the
// heartbeat goes on trying. It resumes when a heartbeat succeeds (under a
// fresh registration if it was declared dead meanwhile: see
// ConnectionLostError). WithStopOnHeartbeatErrorLimit makes it stop all
// consuming for good instead, as rmq does.
type HeartbeatError struct {
	RedisErr error
	Count    int
}

func (e *HeartbeatError) Error() string {
	return fmt.Sprintf("redq: heartbeat error (consecutive count %d): %v", e.Count, e.RedisErr)
}

// Unwrap returns the underlying Redis error.
func (e *HeartbeatError) Unwrap() error { return e.RedisErr }

// ConsumeError is sent to the error channel when fetching deliveries for a
// queue fails. Consuming pauses and retries; Count is the number of
// consecutive failures and drops back to zero once Redis answers again.
type ConsumeError struct {
	Queue    string
	RedisErr error
	Count    int
}

func (e *ConsumeError) Error() string {
	return fmt.Sprintf("redq: consume error on queue %q (consecutive count %d): %v", e.Queue, e.Count, e.RedisErr)
}

// Unwrap returns the underlying Redis error.
func (e *ConsumeError) Unwrap() error { return e.RedisErr }

// DeliveryError is sent to the error channel when Ack, Reject or Push of a
// delivery fails with a Redis error and is being retried. Count is the
// number of consecutive failures for that delivery.
type DeliveryError struct {
	Delivery Delivery
	RedisErr error
	Count    int
}

func (e *DeliveryError) Error() string {
	return fmt.Sprintf("redq: delivery error (consecutive count %d): %v", e.Count, e.RedisErr)
}

// Unwrap returns the underlying Redis error.
func (e *DeliveryError) Unwrap() error { return e.RedisErr }
