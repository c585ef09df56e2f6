package redq

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Groups: a delivery published with Group(key) belongs to that group. A
// queue hands out at most K deliveries of one group at a time (in flight:
// taken and not yet acked, rejected, pushed on or returned), across every
// connection and process, and hands out the groups in turn, so that a
// group with many pending deliveries cannot starve one with few. Within a
// group deliveries are handed out in publish order. See docs/features.md
// ("Groups") and the layout in keys.go.

// DefaultGroupConcurrency is a group's K when WithGroupConcurrency was
// never given for the queue.
const DefaultGroupConcurrency = 1

// MaxGroupConcurrency bounds WithGroupConcurrency.
const MaxGroupConcurrency = 1_000_000

// MaxGroupRateLimitN bounds the n of WithGroupRateLimit. Each group keeps
// a log of its last n hand-outs (13 bytes each), so n bounds that memory:
// at most about 130 KB a group.
const MaxGroupRateLimitN = 10_000

// Group makes the delivery one of group key (1 to MaxKeyLength bytes, any
// bytes). The queue hands out at most K deliveries of a group at a time
// (see WithGroupConcurrency), in publish order, and takes the groups in
// turn; a per-group rate may apply (WithGroupRateLimit). It combines with
// Delay and At (the delivery joins its group's line when due), TTL, TTR
// and Header. Priority and Upsert refuse it with an *ArgumentError: a
// group's line is first in, first out, and a keyed item has its own
// concurrency of one per key.
func Group(key string) PublishOption {
	return func(o *publishOptions) error {
		switch {
		case key == "":
			return argError("group", key, "must not be empty")
		case len(key) > MaxKeyLength:
			return argError("group", key, fmt.Sprintf("must be at most %d bytes, is %d", MaxKeyLength, len(key)))
		}
		o.group = key
		return nil
	}
}

// WithGroupConcurrency sets K, how many deliveries of one group may be in
// flight at a time (taken and not yet acked, rejected, pushed on or
// returned), across every connection and process. The setting is stored
// in Redis and applies to every connection; a handle opened without this
// option leaves it as it is. k must be between 1 and
// MaxGroupConcurrency; bad values are an *ArgumentError and change
// nothing. Default: DefaultGroupConcurrency (1) for a queue where it was
// never set.
func WithGroupConcurrency(k int) QueueOption {
	return func(o *queueOptions) error {
		if k < 1 || k > MaxGroupConcurrency {
			return argError("group concurrency", k, fmt.Sprintf("must be between 1 and %d", MaxGroupConcurrency))
		}
		o.groupK = &k
		return nil
	}
}

// WithGroupRateLimit limits how fast each group hands out deliveries: at
// most n deliveries of one group in any window of length per, by Redis's
// clock, while other groups go on. A group that reached its limit waits
// (in a sorted set of the queue, by the time its oldest hand-out of the
// window leaves it) without consumers polling Redis. Changing n starts
// every group's window over. The setting is stored in Redis and applies
// to every connection; a handle opened without this option leaves it as
// it is, and WithoutGroupRateLimit removes it. n must be between 1 and
// MaxGroupRateLimitN, per a whole number of milliseconds between
// MinRateLimitPer and MaxRateLimitPer; bad values are an *ArgumentError
// and change nothing. Default: none.
func WithGroupRateLimit(n int64, per time.Duration) QueueOption {
	return func(o *queueOptions) error {
		switch {
		case n < 1 || n > MaxGroupRateLimitN:
			return argError("group rate limit n", n, fmt.Sprintf("must be between 1 and %d", MaxGroupRateLimitN))
		case per < MinRateLimitPer || per > MaxRateLimitPer:
			return argError("group rate limit per", per, fmt.Sprintf("must be between %v and %v", MinRateLimitPer, MaxRateLimitPer))
		case per%time.Millisecond != 0:
			return argError("group rate limit per", per, "must be a whole number of milliseconds")
		}
		o.groupRate = &RateLimit{N: n, Per: per}
		return nil
	}
}

// WithoutGroupRateLimit removes the queue's per-group rate limit (see
// WithGroupRateLimit), for every connection.
func WithoutGroupRateLimit() QueueOption {
	return func(o *queueOptions) error {
		o.groupRate = &RateLimit{}
		return nil
	}
}

// setGroupOptions adds to pipe the writes that store the group settings of
// o in the queue's meta hash (fields gk, grate_n and grate_ms, read by the
// scripts: see grouped() in scripts/lib.lua). Each is one command.
func setGroupOptions(ctx context.Context, pipe redis.Cmdable, k queueKeys, o queueOptions) {
	if o.groupK != nil {
		pipe.HSet(ctx, k.meta(), "gk", *o.groupK)
	}
	if o.groupRate != nil {
		if o.groupRate.IsZero() {
			pipe.HDel(ctx, k.meta(), "grate_n", "grate_ms")
		} else {
			pipe.HSet(ctx, k.meta(), "grate_n", o.groupRate.N, "grate_ms", o.groupRate.Per.Milliseconds())
		}
	}
}
