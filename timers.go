package redq

import (
	"context"
	"time"
)

// Timers is a named set of event timers: each has a key and a due time,
// and when it is due it fires once, to one of the processes waiting in
// Next, however many wait. Timers are keyed deliveries without a payload
// (see Queue.Upsert), so they share that engine's guarantees:
//
//   - a timer's due time is judged by Redis's clock, to the millisecond,
//     and its fire reaches a waiting Next within about a millisecond; no
//     poller process is needed, and the cost of a fire does not grow with
//     the number of timers;
//   - fires are at least once: a fire taken by a process that dies before
//     Ack fires again once a cleaner has run (see Cleaner), and two
//     processes never hold fires of one key at once;
//   - a key has at most one pending timer; Set while its fire is being
//     handled sets a new timer, which the old fire's Ack does not remove.
//
// Open timer sets with Connection.OpenTimers.
type Timers interface {
	// Set creates the timer of key, due after d, or moves it to that time
	// if it is pending. d must be between 0 and MaxDelay.
	Set(ctx context.Context, key string, d time.Duration) error
	// SetAt is Set with a due time, by Redis's clock (a time in the past
	// means now).
	SetAt(ctx context.Context, key string, t time.Time) error
	// Create creates the timer of key, due after d, only when no timer of
	// that key is pending, and reports whether it did.
	Create(ctx context.Context, key string, d time.Duration) (bool, error)
	// Cancel removes the pending timer of key and reports whether there was
	// one. A fire being handled is not affected.
	Cancel(ctx context.Context, key string) (bool, error)
	// Lookup returns the due time of key's pending timer; ErrorNotFound
	// when none is pending.
	Lookup(ctx context.Context, key string) (time.Time, error)
	// Next waits up to timeout until a timer fires and returns the fire,
	// as Queue.Take and Round.Next wait: ErrorTimeout when none fired in
	// time (timeout 0 does not wait), an error matching ctx's when ctx
	// ends, ErrorConsumingStopped after StopAllConsuming, and an
	// *ArgumentError for a negative timeout. Any number of processes may
	// wait; each fire goes to one. The fire is this connection's until it
	// is acked or released.
	Next(ctx context.Context, timeout time.Duration) (Fire, error)
	// NextBatch is Next for up to max fires: it returns as soon as at
	// least one timer fired, with every fire that is due then (up to max),
	// taken in one call to Redis for up to 1,000 of them. Ack them
	// together with Fires.Ack. max must be at least 1.
	NextBatch(ctx context.Context, max int64, timeout time.Duration) (Fires, error)
}

// Fires is a batch of fires, as Timers.NextBatch returns it.
type Fires []Fire

// Ack acks every fire, as Fire.Ack does each, in one call to Redis per
// timer set (and per 1,000 fires), shared with the acks of other
// goroutines of the connection. It returns the errors of the fires that
// were not acked, by their index; an empty map when all were.
func (fs Fires) Ack(ctx context.Context) map[int]error {
	errs := map[int]error{}
	var ds Deliveries
	var at []int
	for i, f := range fs {
		if rf, ok := f.(redisFire); ok {
			ds = append(ds, rf.d)
			at = append(at, i)
			continue
		}
		if f == nil {
			errs[i] = argError("fire", i, "must not be nil")
			continue
		}
		if err := f.Ack(ctx); err != nil {
			errs[i] = err
		}
	}
	if len(ds) > 0 {
		for j, err := range ds.AckContext(ctx) {
			errs[at[j]] = err
		}
	}
	return errs
}

// Fire is a timer that fired (see Timers.Next).
type Fire interface {
	// Key returns the timer's key.
	Key() string
	// Due returns when the timer was due, by Redis's clock.
	Due() time.Time
	// Ack ends the fire: the timer is done. A timer of the same key set
	// meanwhile stays and fires at its own time.
	Ack(ctx context.Context) error
	// Release hands the fire back: the timer fires again after delay (0:
	// at once). A timer of the same key set meanwhile replaces it.
	Release(ctx context.Context, delay time.Duration) error
}

// timerTag makes the hash tag of a timer set's keys: a queue name cannot
// contain ':', so no queue shares a timer set's keys.
const timerTag = "timers:"

type redisTimers struct {
	q *redisQueue
}

func (c *redisConnection) OpenTimers(name string) (Timers, error) {
	if why := validName(name); why != "" {
		return nil, argError("timer set name", name, why)
	}
	if c.isStopped() {
		return nil, ErrorConsumingStopped
	}
	q := newQueue(c, name, queueOptions{retry: DefaultRetryPolicy})
	q.setKeys(newQueueKeys(c.opts.namespace, timerTag+name))
	if err := c.client.SAdd(context.Background(), c.keys.timers, name).Err(); err != nil {
		return nil, errorf("redq: open timers %q: %w", name, err)
	}
	return &redisTimers{q: q}, nil
}

func (t *redisTimers) Set(ctx context.Context, key string, d time.Duration) error {
	_, err := t.q.Upsert(ctx, key, nil, Delay(d))
	return err
}

func (t *redisTimers) SetAt(ctx context.Context, key string, at time.Time) error {
	_, err := t.q.Upsert(ctx, key, nil, At(at))
	return err
}

func (t *redisTimers) Create(ctx context.Context, key string, d time.Duration) (bool, error) {
	out, err := t.q.Upsert(ctx, key, nil, Delay(d), OnExisting(KeepExisting))
	return out == Created || out == Queued, err
}

func (t *redisTimers) Cancel(ctx context.Context, key string) (bool, error) {
	return t.q.Cancel(ctx, key)
}

func (t *redisTimers) Lookup(ctx context.Context, key string) (time.Time, error) {
	item, err := t.q.Lookup(ctx, key)
	if err != nil {
		return time.Time{}, err
	}
	if !item.Pending {
		return time.Time{}, errorf("redq: lookup %q: only its fire is being handled: %w", key, ErrorNotFound)
	}
	return item.Due, nil
}

func (t *redisTimers) Next(ctx context.Context, timeout time.Duration) (Fire, error) {
	d, err := t.q.Take(ctx, timeout)
	if err != nil {
		return nil, err
	}
	return redisFire{d.(*redisDelivery)}, nil
}

func (t *redisTimers) NextBatch(ctx context.Context, max int64, timeout time.Duration) (Fires, error) {
	ds, err := t.q.TakeBatch(ctx, max, timeout)
	if err != nil {
		return nil, err
	}
	fs := make(Fires, len(ds))
	for i, d := range ds {
		fs[i] = redisFire{d.(*redisDelivery)}
	}
	return fs, nil
}

type redisFire struct{ d *redisDelivery }

func (f redisFire) Key() string    { return f.d.key }
func (f redisFire) Due() time.Time { return time.UnixMilli(f.d.due) }

func (f redisFire) Ack(ctx context.Context) error { return f.d.AckContext(ctx) }

func (f redisFire) Release(ctx context.Context, delay time.Duration) error {
	return f.d.Release(ctx, delay)
}
