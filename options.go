package redq

import (
	"log/slog"
	"time"
)

// Defaults, chosen as rmq's so that a program moving over behaves the same.
const (
	DefaultNamespace           = "redq"
	DefaultHeartbeatInterval   = time.Second
	DefaultHeartbeatTTL        = time.Minute
	DefaultHeartbeatErrorLimit = 45
	// DefaultMaxPayloadSize is Redis's own limit for a string: 512 MiB.
	DefaultMaxPayloadSize = 512 << 20
)

// Option configures a connection; pass options to Open or to any of the
// OpenConnection forms.
type Option func(*options) error

type options struct {
	namespace           string
	heartbeatInterval   time.Duration
	heartbeatTTL        time.Duration
	heartbeatErrorLimit int
	maxPayloadSize      int
	retryTimeout        time.Duration
	waitReplicas        int // 0: do not wait (see WithWaitReplicas)
	waitTimeout         time.Duration

	// stop all consuming at the heartbeat error limit instead of pausing
	// (see WithStopOnHeartbeatErrorLimit)
	stopOnHeartbeatErrorLimit bool

	logger   *slog.Logger // see WithLogger; nil: no logging
	observer Observer     // see WithObserver; nil: none
}

func defaultOptions() options {
	return options{
		namespace:           DefaultNamespace,
		heartbeatInterval:   DefaultHeartbeatInterval,
		heartbeatTTL:        DefaultHeartbeatTTL,
		heartbeatErrorLimit: DefaultHeartbeatErrorLimit,
		maxPayloadSize:      DefaultMaxPayloadSize,
		retryTimeout:        DefaultRetryTimeout,
	}
}

// WithNamespace sets the prefix of every Redis key, so that several
// applications can share one Redis. The default is "redq". Connections see
// each other's queues only within one namespace.
func WithNamespace(ns string) Option {
	return func(o *options) error {
		if why := validName(ns); why != "" {
			return argError("namespace", ns, why)
		}
		o.namespace = ns
		return nil
	}
}

// WithHeartbeat sets how often the connection refreshes its heartbeat and
// after how long without a refresh it counts as dead, so that a cleaner may
// return its unacked deliveries. The TTL must be longer than the interval.
// Defaults: every second, dead after a minute.
func WithHeartbeat(interval, ttl time.Duration) Option {
	return func(o *options) error {
		if interval < time.Millisecond {
			return argError("heartbeat interval", interval, "must be at least 1ms")
		}
		if ttl <= interval {
			return argError("heartbeat TTL", ttl, "must be longer than the interval "+interval.String())
		}
		o.heartbeatInterval, o.heartbeatTTL = interval, ttl
		return nil
	}
}

// WithHeartbeatErrorLimit sets after how many consecutive failed heartbeats
// the connection pauses (default 45, which with the default interval is
// before the default TTL runs out, so before a cleaner may return what it
// holds): it fetches nothing and hands out none of its buffered deliveries
// until a heartbeat succeeds again, and then resumes by itself (see
// HeartbeatError). With WithStopOnHeartbeatErrorLimit it stops instead.
func WithHeartbeatErrorLimit(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return argError("heartbeat error limit", n, "must be at least 1")
		}
		o.heartbeatErrorLimit = n
		return nil
	}
}

// WithStopOnHeartbeatErrorLimit makes the connection call StopAllConsuming
// when its heartbeat fails HeartbeatErrorLimit times in a row, and stay
// stopped, as rmq does, instead of pausing and resuming once Redis answers
// (the default). A program that restarts its workers itself on a
// HeartbeatError asks for this.
func WithStopOnHeartbeatErrorLimit() Option {
	return func(o *options) error {
		o.stopOnHeartbeatErrorLimit = true
		return nil
	}
}

// WithMaxPayloadSize sets the largest payload Publish accepts, in bytes
// (default 512 MiB, Redis's own limit). Larger payloads get
// ErrorPayloadTooLarge and nothing is published.
func WithMaxPayloadSize(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return argError("max payload size", n, "must be at least 1")
		}
		o.maxPayloadSize = n
		return nil
	}
}

// WithRetryTimeout sets how long the verbs that change Redis keep sending a
// call again while Redis is unreachable or refuses writes for a moment (a
// restart, a failover): Ack, Reject, Push, Release, a batch's settle,
// Publish and Put without a context, and the forms with a context up to
// its deadline when that is sooner. Calls are resent under the same token,
// so that Redis carries each out at most once and answers a repeat with
// the first outcome. When the timeout passes, the verb returns
// ErrorOutcomeUnknown, ErrorUnavailable or ErrorWritesRefused. The default
// is DefaultRetryTimeout (a minute); d must be between 1ms and
// MaxRetryTimeout (30 minutes; Redis keeps what answers a repeated call
// for an hour).
func WithRetryTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Millisecond || d > MaxRetryTimeout {
			return argError("retry timeout", d, "must be between 1ms and "+MaxRetryTimeout.String())
		}
		o.retryTimeout = d
		return nil
	}
}

// WithWaitReplicas makes every publish and every settle wait, after its
// write, until n replicas confirmed it or timeout passed (Redis's WAIT, on
// the connection and node that carried the write). When fewer confirmed,
// the verb returns a *ReplicationError (matching ErrorNotReplicated): the
// write WAS done on the primary and stays; only a failover in the next
// moments could lose it. Do not publish again on that error, or the
// delivery exists twice.
//
// It covers Publish, PublishBytes and Put in all forms; Ack, Reject and
// Push of deliveries and batches; Release, Touch and the handlers'
// rejections; and the keyed and round calls (Upsert, Cancel, Add, ...),
// which then return the *ReplicationError in place of their result. A
// stopping consumer's hand-backs wait too, without telling anyone. Not
// covered: the cleaner's returns and the connection's own bookkeeping.
//
// WAIT makes a write reach replicas' memory, not their disks, and does
// not make Redis strongly consistent (see docs/durability.md). It needs a
// *redis.Client (a failover client is one) or a *redis.ClusterClient on a
// Redis that replicates; other clients, and miniredis, are refused at open
// with ErrorUnsupportedClient. n must be at least 1 and timeout between
// 1ms and MaxRetryTimeout. A WAIT costs a round trip to the replicas per
// call (see the package benchmarks).
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(o *options) error {
		if n < 1 {
			return argError("replicas to wait for", n, "must be at least 1")
		}
		if timeout < time.Millisecond || timeout > MaxRetryTimeout {
			return argError("replica wait timeout", timeout, "must be between 1ms and "+MaxRetryTimeout.String())
		}
		o.waitReplicas, o.waitTimeout = n, timeout
		return nil
	}
}
