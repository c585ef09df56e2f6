package redq

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// QueueOption configures a queue handle; pass options to OpenQueue.
type QueueOption func(*queueOptions) error

type queueOptions struct {
	defaults    publishOptions
	retry       RetryPolicy
	keepExpired *bool      // nil: leave the queue's setting as it is
	rate        *RateLimit // nil: leave the queue's setting as it is; zero: remove it
	groupK      *int       // nil: leave the queue's setting as it is
	groupRate   *RateLimit // nil: leave the queue's setting as it is; zero: remove it
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

// RateLimit is a queue's rate limit: at most N deliveries handed out in
// any window of length Per, across every connection and process, by
// Redis's clock (see WithRateLimit). The zero RateLimit means none.
type RateLimit struct {
	// N is how many deliveries may be handed out in any window of
	// length Per.
	N int64 `json:"n"`
	// Per is the window's length, a whole number of milliseconds.
	Per time.Duration `json:"per"`
}

// IsZero reports whether l is no limit.
func (l RateLimit) IsZero() bool { return l.N == 0 && l.Per == 0 }

// String formats l as "100/1s", or "none".
func (l RateLimit) String() string {
	if l.IsZero() {
		return "none"
	}
	return strconv.FormatInt(l.N, 10) + "/" + l.Per.String()
}

// MaxRateLimitN bounds the N of a rate limit. The queue keeps one entry
// per hand-out of the last window (see WithRateLimit), so N bounds that
// memory: about 130 bytes an entry on Redis 7, at most 13 MB a queue.
const MaxRateLimitN = 100_000

// MinRateLimitPer and MaxRateLimitPer bound the window of a rate limit:
// Redis's clock is read in milliseconds, and a window longer than a day
// is better served by a counter the application keeps.
const (
	MinRateLimitPer = time.Millisecond
	MaxRateLimitPer = 24 * time.Hour
)

// WithRateLimit limits how fast the queue hands out deliveries: at most
// n deliveries are taken from the queue (moved from ready into a
// connection's unacked storage by a consumer, a handler, Take or
// TakeBatch) in any window of length per, across every connection and
// process. Redis's clock judges the windows, in the fetch script, so
// clocks of the processes do not matter.
//
// The limit is exact for every window, not only for windows that start
// at a multiple of per: the queue keeps a log of the hand-outs of the
// last window (a sorted set of at most n entries, which expires when the
// queue is idle for per). While the limit holds, consumers and Take wait
// until the oldest hand-out leaves the window, without polling Redis.
//
// The setting is stored in Redis and applies to every connection; a
// handle opened without this option leaves it as it is, and
// WithoutRateLimit removes it. n must be between 1 and MaxRateLimitN, per
// a whole number of milliseconds between MinRateLimitPer and
// MaxRateLimitPer; bad values are an *ArgumentError and change nothing.
// Drain, which removes deliveries instead of handing them out, is not
// limited.
func WithRateLimit(n int64, per time.Duration) QueueOption {
	return func(o *queueOptions) error {
		l := RateLimit{N: n, Per: per}
		if err := l.validate(); err != nil {
			return err
		}
		o.rate = &l
		return nil
	}
}

// WithoutRateLimit removes the queue's rate limit (see WithRateLimit),
// for every connection.
func WithoutRateLimit() QueueOption {
	return func(o *queueOptions) error {
		o.rate = &RateLimit{}
		return nil
	}
}

func (l RateLimit) validate() error {
	switch {
	case l.N < 1 || l.N > MaxRateLimitN:
		return argError("rate limit n", l.N, fmt.Sprintf("must be between 1 and %d", MaxRateLimitN))
	case l.Per < MinRateLimitPer || l.Per > MaxRateLimitPer:
		return argError("rate limit per", l.Per, fmt.Sprintf("must be between %v and %v", MinRateLimitPer, MaxRateLimitPer))
	case l.Per%time.Millisecond != 0:
		return argError("rate limit per", l.Per, "must be a whole number of milliseconds")
	}
	return nil
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
