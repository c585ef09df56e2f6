package redq

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// setRateLimit adds to pipe the write that stores l as the queue's rate
// limit (fields rate_n and rate_ms of its meta hash, read by fetch.lua),
// or removes the limit when l is zero. Either is one command, so a fetch
// never sees half a setting.
func setRateLimit(ctx context.Context, pipe redis.Cmdable, k queueKeys, l RateLimit) {
	if l.IsZero() {
		pipe.HDel(ctx, k.meta(), "rate_n", "rate_ms")
		return
	}
	pipe.HSet(ctx, k.meta(), "rate_n", l.N, "rate_ms", l.Per.Milliseconds())
}

// rateLimitOf reads a rate limit from the fields rate_n and rate_ms of a
// queue's meta hash (0 when absent or mangled: no limit, as fetch.lua
// reads them).
func rateLimitOf(n, ms int64) RateLimit {
	if n <= 0 || ms <= 0 {
		return RateLimit{}
	}
	return RateLimit{N: n, Per: time.Duration(ms) * time.Millisecond}
}
