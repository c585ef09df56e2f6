package redq

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// setPaused pauses (on) or resumes a queue's keys k in one script call
// (see scripts/pause.lua).
func setPaused(ctx context.Context, client redis.Cmdable, k queueKeys, on bool) error {
	arg := "0"
	if on {
		arg = "1"
	}
	return scripts.pause.Run(ctx, client, []string{k.meta(), k.resume()}, arg).Err()
}

// Pause pauses the queue for every connection (see Queue.Pause). The state
// is the field paused of the queue's meta hash; fetch.lua reads it.
func (q *redisQueue) Pause(ctx context.Context) error {
	if err := setPaused(ctx, q.conn.client, q.keys, true); err != nil {
		return errorf("redq: pause %q: %w", q.name, err)
	}
	return nil
}

// Resume ends a pause of the queue and wakes its waiting consumers and
// Take callers on every connection (see Queue.Resume).
func (q *redisQueue) Resume(ctx context.Context) error {
	if err := setPaused(ctx, q.conn.client, q.keys, false); err != nil {
		return errorf("redq: resume %q: %w", q.name, err)
	}
	return nil
}
