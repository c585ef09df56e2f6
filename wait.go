package redq

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// waiter lets an idle consumer wait on Redis for a publish instead of
// sleeping. It blocks with BLMOVE from the tail of ready to the tail of
// ready: the command returns as soon as the list holds something, and moves
// nothing (the element goes back where it was), so no delivery ever sits
// outside ready and unacked storage because of the wait.
//
// On a single-node client the wait runs on a dedicated connection whose
// CLIENT ID is known, so StopConsuming can end it at once with CLIENT
// UNBLOCK instead of waiting up to pollDuration. On a cluster client it
// uses the pool and stopping waits for the current wait to time out; on a
// server without CLIENT ID (miniredis) it uses the pool with waits of at
// most 100ms.
type waiter struct {
	client    redis.UniversalClient
	key       string
	single    *redis.Client // where dedicated comes from (and a new one after an error)
	dedicated *redis.Conn   // nil: use the pool
	id        atomic.Int64
	// short is set when the server has no CLIENT ID (miniredis): waits
	// are then cut to shortWait so that stopping stays quick.
	short bool
}

const shortWait = 100 * time.Millisecond

type blockingCmdable interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
	BLMove(ctx context.Context, source, destination, srcpos, destpos string, timeout time.Duration) *redis.StringCmd
}

// newWaiter returns a waiter on key; with dedicated it waits on a
// connection of its own where it can (see waiter), else on the pool.
func newWaiter(client redis.UniversalClient, key string, dedicated bool) *waiter {
	w := &waiter{client: client, key: key}
	if c, ok := client.(*redis.Client); ok && dedicated {
		w.single = c
		w.dedicated = c.Conn()
	}
	return w
}

// wait returns when ready holds something or after d; nil either way.
//
// Redis checks the timeouts of blocked clients only when its event loop
// wakes (every 100ms at the default hz 10), so a BLMOVE on an idle server
// returns up to that much late. When the end of the wait matters (it is the
// due time of a delivery or the end of a lease: on time), the waiter ends
// it itself with CLIENT UNBLOCK at d, where it can (a dedicated connection).
func (w *waiter) wait(ctx context.Context, d time.Duration, onTime bool) error {
	if err := w.identify(ctx); err != nil {
		return err
	}
	var c blockingCmdable = w.client
	if w.dedicated != nil {
		c = w.dedicated
		if onTime {
			// The UNBLOCK can reach Redis before the BLMOVE has blocked
			// (d may be 1ms), and then does nothing: repeat it until the
			// wait has returned.
			done := make(chan struct{})
			defer close(done)
			t := time.AfterFunc(d, func() {
				ictx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				for {
					w.interrupt(ictx)
					select {
					case <-done:
						return
					case <-ictx.Done():
						return
					case <-time.After(time.Millisecond):
					}
				}
			})
			defer t.Stop()
		}
	}
	if w.short {
		d = min(d, shortWait)
	}
	var err error
	if d < time.Second {
		// go-redis rounds BLMOVE's timeout up to whole seconds; send the
		// fraction ourselves (it stays within the default read timeout).
		secs := strconv.FormatFloat(max(d.Seconds(), 0.001), 'f', 3, 64)
		err = c.Do(ctx, "BLMOVE", w.key, w.key, "RIGHT", "RIGHT", secs).Err()
		if errors.Is(err, errBareCmdable) {
			// a bare Cmdable (see universal): whole seconds only
			err = c.BLMove(ctx, w.key, w.key, "RIGHT", "RIGHT", time.Second).Err()
		}
	} else {
		err = c.BLMove(ctx, w.key, w.key, "RIGHT", "RIGHT", d.Truncate(time.Second)).Err()
	}
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		w.renew()
	}
	return err
}

// renew replaces the dedicated connection after an error. go-redis never
// uses a dedicated connection again once a command on it failed on the
// network (or with READONLY): every later command answers "Conn is in a
// bad state". After a Redis restart or a Sentinel failover the next wait
// would fail too, forever; the new connection is dialled when it is first
// used, to whichever server is the master then, and has a new CLIENT ID.
func (w *waiter) renew() {
	w.id.Store(0)
	if w.dedicated == nil {
		return
	}
	_ = w.dedicated.Close()
	w.dedicated = w.single.Conn()
}

// identify learns the dedicated connection's CLIENT ID, once per
// connection, or falls back to the pool when the server has no CLIENT ID.
func (w *waiter) identify(ctx context.Context) error {
	if w.dedicated == nil || w.id.Load() != 0 {
		return nil
	}
	id, err := w.dedicated.ClientID(ctx).Result()
	var redisErr redis.Error
	switch {
	case errors.As(err, &redisErr):
		// The server has no CLIENT ID: wait on the pool, briefly.
		_ = w.dedicated.Close()
		w.dedicated = nil
		w.short = true
		return nil
	case err != nil:
		w.renew()
		return err
	}
	w.id.Store(id)
	return nil
}

// interrupt ends a wait in progress, where the server allows it.
func (w *waiter) interrupt(ctx context.Context) {
	if id := w.id.Load(); id != 0 {
		_ = w.client.ClientUnblock(ctx, id).Err()
	}
}

func (w *waiter) close() {
	if w.dedicated != nil {
		_ = w.dedicated.Close()
	}
}
