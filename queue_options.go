package redq

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// QueueOption configures a queue handle; pass options to OpenQueue.
type QueueOption func(*queueOptions) error

type queueOptions struct {
	defaults    publishOptions
	retry       RetryPolicy
	keepExpired *bool // nil: leave the queue's setting as it is
}

// WithPublishDefaults sets publish options that apply to everything this
// handle publishes, Publish and PublishBytes included; the options given to
// Put override them. For example WithPublishDefaults(TTR(time.Minute))
// gives every delivery a lease of a minute.
func WithPublishDefaults(opts ...PublishOption) QueueOption {
	return func(o *queueOptions) error {
		for _, opt := range opts {
			if err := opt(&o.defaults); err != nil {
				return err
			}
		}
		return nil
	}
}

// WithRetryPolicy sets the policy by which handlers (AddHandler) retry a
// delivery whose handler returned an error. The default is
// DefaultRetryPolicy.
func WithRetryPolicy(p RetryPolicy) QueueOption {
	return func(o *queueOptions) error {
		if err := p.validate(); err != nil {
			return err
		}
		o.retry = p
		return nil
	}
}

// WithKeepExpired sets whether deliveries whose time to live ran out are
// kept in the queue's rejected list (true) or only counted (false, the
// default). The setting is stored in Redis and applies to every connection;
// a handle opened without this option leaves it as it is.
func WithKeepExpired(keep bool) QueueOption {
	return func(o *queueOptions) error {
		o.keepExpired = &keep
		return nil
	}
}

// RetryPolicy says how a handler's failed deliveries are retried: a
// delivery whose handler returned an error goes back to the queue after a
// backoff, until it has been attempted MaxAttempts times; then it is
// rejected with the last error kept in its "Redq-Error" header.
//
// The backoff after attempt n is InitialBackoff·2^(n-1), at most
// MaxBackoff, shortened by a random fraction of at most Jitter (0 to 1) so
// that failures that happened together do not retry together.
type RetryPolicy struct {
	MaxAttempts    int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	Jitter         float64
}

// DefaultRetryPolicy is the retry policy of a queue opened without
// WithRetryPolicy: 10 attempts, backoff from 1s doubling up to 10 minutes,
// with up to a fifth taken off at random.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 10, InitialBackoff: time.Second, MaxBackoff: 10 * time.Minute, Jitter: 0.2}

func (p RetryPolicy) validate() error {
	switch {
	case p.MaxAttempts < 1:
		return argError("retry MaxAttempts", p.MaxAttempts, "must be at least 1")
	case p.InitialBackoff < 0:
		return argError("retry InitialBackoff", p.InitialBackoff, "must not be negative")
	case p.MaxBackoff < p.InitialBackoff || p.MaxBackoff > MaxDelay:
		return argError("retry MaxBackoff", p.MaxBackoff, fmt.Sprintf("must be between InitialBackoff (%v) and %v", p.InitialBackoff, MaxDelay))
	case !(p.Jitter >= 0 && p.Jitter <= 1):
		return argError("retry Jitter", p.Jitter, "must be between 0 and 1")
	}
	return nil
}

// Backoff returns how long to wait before the attempt after attempt n
// (n >= 1).
func (p RetryPolicy) Backoff(n int) time.Duration {
	d := p.InitialBackoff
	for i := 1; i < n && d < p.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, p.MaxBackoff)
	if p.Jitter > 0 && d > 0 {
		d -= time.Duration(rand.Float64() * p.Jitter * float64(d))
	}
	return d
}
