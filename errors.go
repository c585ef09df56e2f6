package redq

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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
	// ErrorHeld is returned by an Inspector's action on a delivery that a
	// connection holds (unacked): a live consumer may be working on it, so
	// the Inspector leaves it alone. Nothing was changed.
	ErrorHeld = errors.New("redq: the delivery is held by a connection (unacked); the Inspector leaves it to its consumer")
	// ErrorNotRedis is returned by operations that need a Redis-backed
	// connection (for example a Cleaner) when given a test double.
	ErrorNotRedis = errors.New("redq: not a Redis-backed connection")

	// ErrorCrossSlot is returned by SetPushQueueSameSlot when the push
	// queue's keys are in another Redis Cluster slot than the queue's; give
	// both names one slot group ({group}name) to put them in one slot.
	ErrorCrossSlot = errors.New("redq: the queues are in different Redis Cluster slots")
	// ErrorConfiguration is returned when opening a connection fails
	// because of how the client or redq is set up, not because Redis is
	// away: a wrong password or user (WRONGPASS, NOAUTH), a user whose ACL
	// does not allow what redq runs (NOPERM), a database index the server
	// does not have, TLS settings the server does not speak, or a client
	// kind a chosen option cannot use (then the error also matches
	// ErrorUnsupportedClient). Retrying does not help: fix the settings.
	ErrorConfiguration = errors.New("redq: Redis refused the connection's settings; fix the configuration")
	// ErrorUnsupportedClient is returned at open when an option needs a
	// kind of go-redis client that was not given (for example
	// WithWaitReplicas on a ring client, a bare Cmdable or miniredis). It
	// also matches ErrorConfiguration.
	ErrorUnsupportedClient = errors.New("redq: this kind of Redis client cannot serve the option")
	// ErrorNotReplicated is matched by every *ReplicationError: a write was
	// done on the primary, but fewer replicas than WithWaitReplicas asks
	// for confirmed it in time.
	ErrorNotReplicated = errors.New("redq: the write was done, but not confirmed by enough replicas")
)

// ReplicationError is returned by a publish or a settle on a connection
// opened WithWaitReplicas when the write was done on the primary but only
// Got of the Want replicas confirmed it before the timeout. The write is
// not undone and stays in Redis: a publish that returns it was published
// (do not publish again, or the delivery exists twice), an Ack that
// returns it removed the delivery. What is at risk is only that a
// failover in the next moments promotes a replica that did not get the
// write. It matches ErrorNotReplicated.
type ReplicationError struct {
	Want int   // replicas asked for (WithWaitReplicas)
	Got  int   // replicas that confirmed the write in time
	Err  error // why WAIT got no answer, when it got none (then Got is 0)
}

func (e *ReplicationError) Error() string {
	if e.Err != nil {
		return onePrefix(fmt.Sprintf("redq: the write was done on the primary, but waiting for %d replicas to confirm it failed: %v", e.Want, e.Err))
	}
	return fmt.Sprintf("redq: the write was done on the primary, but only %d of %d replicas confirmed it in time", e.Got, e.Want)
}

// Unwrap returns why WAIT got no answer, if it got none.
func (e *ReplicationError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrorNotReplicated) true.
func (e *ReplicationError) Is(target error) bool { return target == ErrorNotReplicated }

// unsupportedClient is the error for an option that cannot use client.
func unsupportedClient(option string, client any, why string) error {
	return errorf("%w: %w: %s cannot use a %T: %s", ErrorConfiguration, ErrorUnsupportedClient, option, client, why)
}

// ArgumentError describes bad input: which argument and why. Nothing was
// changed in Redis when it is returned. It matches ErrorInvalidArgument.
type ArgumentError struct {
	Arg    string // the argument's name, e.g. "queue name" or "prefetchLimit"
	Value  any    // the value that was given
	Reason string // what is wrong with it
}

func (e *ArgumentError) Error() string {
	return onePrefix(fmt.Sprintf("redq: invalid %s %s: %s", e.Arg, formatValue(e.Value), e.Reason))
}

// maxValueText bounds how much of a bad value an error text quotes.
const maxValueText = 64

// formatValue renders a bad argument for an error text: durations as
// time.Duration strings (1h0m0s, never nanoseconds), times in RFC 3339,
// strings quoted and cut at maxValueText bytes, functions and other
// values without a readable form by their type.
func formatValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil"
	case time.Duration:
		return v.String()
	case time.Time:
		return v.Format(time.RFC3339Nano)
	case string:
		if len(v) > maxValueText {
			return fmt.Sprintf("%q… (%d bytes)", v[:maxValueText], len(v))
		}
		return fmt.Sprintf("%q", v)
	case []byte:
		return formatValue(string(v))
	case fmt.Stringer:
		return v.String()
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64, bool:
		return fmt.Sprint(v)
	}
	s := fmt.Sprintf("%#v", v)
	if len(s) > maxValueText {
		return fmt.Sprintf("(%T)", v)
	}
	return s
}

// prefix starts the text of every error redq makes.
const prefix = "redq: "

// onePrefix returns msg with exactly one "redq: " prefix, at its start:
// it drops the prefixes that wrapped redq errors bring along where they
// follow a separator (": ", "(", "; ", a line break), and adds one in
// front when msg has none. Text inside quotes is left as it is.
func onePrefix(msg string) string {
	var b strings.Builder
	b.Grow(len(msg) + len(prefix))
	b.WriteString(prefix)
	rest := strings.TrimPrefix(msg, prefix)
	inQuote := false
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(rest):
			b.WriteByte(c)
			i++
			b.WriteByte(rest[i])
			continue
		case c == '"':
			inQuote = !inQuote
		}
		b.WriteByte(c)
		if !inQuote && (c == ' ' && i > 0 && (rest[i-1] == ':' || rest[i-1] == ';') || c == '(' || c == '\n') {
			for strings.HasPrefix(rest[i+1:], prefix) {
				i += len(prefix)
			}
		}
	}
	return b.String()
}

// errorf is fmt.Errorf (%w wraps as there) for errors redq returns: the
// text starts with exactly one "redq: ", however many redq errors it
// wraps.
func errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &wrapError{msg: onePrefix(err.Error()), err: err}
}

// wrapError is an error made by errorf: its text with one prefix, and the
// error fmt.Errorf made, through which errors.Is and errors.As see every
// wrapped error.
type wrapError struct {
	msg string
	err error
}

func (e *wrapError) Error() string { return e.msg }

// Unwrap returns the error fmt.Errorf made, which unwraps to the %w
// operands.
func (e *wrapError) Unwrap() error { return e.err }

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
	return errorf("%w: %w", ErrorPayloadTooLarge,
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
	return onePrefix(fmt.Sprintf("redq: connection %s was declared dead or forgotten by Redis; it goes on as %s", e.OldName, e.NewName))
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
	return onePrefix(fmt.Sprintf("redq: heartbeat error (consecutive count %d): %v", e.Count, e.RedisErr))
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
	return onePrefix(fmt.Sprintf("redq: consume error on queue %q (consecutive count %d): %v", e.Queue, e.Count, e.RedisErr))
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
	return onePrefix(fmt.Sprintf("redq: delivery error (consecutive count %d): %v", e.Count, e.RedisErr))
}

// Unwrap returns the underlying Redis error.
func (e *DeliveryError) Unwrap() error { return e.RedisErr }

// openError types the error of the first call a new connection makes, so
// that a program can tell what to do: ErrorUnavailable (no answer from
// Redis: retry later), ErrorWritesRefused (a replica, out of memory or
// loading: retry later, or point at the primary), ErrorConfiguration (fix
// the settings). Other answers of Redis are returned as they are.
func openError(err error) error {
	var redisErr redis.Error
	var certErr *tls.CertificateVerificationError
	var recordErr tls.RecordHeaderError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case redis.IsAuthError(err), redis.IsPermissionError(err),
		errors.As(err, &certErr), errors.As(err, &recordErr), errors.As(err, &unknownCA), errors.As(err, &hostErr):
		return errorf("%w: %w", ErrorConfiguration, err)
	case errors.As(err, &redisErr):
		msg := redisErr.Error()
		switch {
		case strings.Contains(msg, "DB index"), strings.Contains(msg, "invalid DB"),
			strings.Contains(msg, "SELECT is not allowed in cluster mode"),
			strings.HasPrefix(msg, "ERR AUTH"), strings.Contains(msg, "no password is set"),
			strings.HasPrefix(msg, "ERR unknown command"):
			return errorf("%w: %w", ErrorConfiguration, err)
		}
		if k := classify(err); k == failRefused || k == failOOM {
			return errorf("%w: %w", ErrorWritesRefused, err)
		}
		return err
	}
	// Not an answer of Redis: no connection, a dial or read timeout, a
	// connection closed, or the caller's context ended.
	return errorf("%w: %w", ErrorUnavailable, err)
}
