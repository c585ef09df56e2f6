package redq

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// waiter lets an idle consumer wait on Redis for a publish instead of
// sleeping. The first few consuming queues of a connection wait with a
// waiter each; the others share one connection (see sharedWaits). It
// blocks with BLMOVE from the tail of ready to the tail of ready: the
// command returns as soon as the list holds something, and moves
// nothing (the element goes back where it was), so no delivery ever sits
// outside ready and unacked storage because of the wait.
//
// The wait runs on a dedicated connection whose CLIENT ID is known, so
// StopConsuming can end it at once with CLIENT UNBLOCK instead of waiting
// up to pollDuration. On a single-node client that connection is taken
// from the client. On a cluster client it is taken from the master that
// serves the key's slot, and CLIENT UNBLOCK goes to that node; after an
// error (the slot moved, the node died or was demoted) the connection is
// dropped, the slot map reloaded, and the next wait finds the master anew.
// On a server without CLIENT ID (miniredis) it uses the pool with waits of
// at most 100ms; on other clients (a ring) it uses the pool, and stopping
// waits for the current wait to time out.
type waiter struct {
	client redis.UniversalClient
	key    string
	// single is set on a single-node client with a dedicated connection:
	// a new connection is taken from it after an error (see failed).
	single *redis.Client
	// cluster is set on a cluster client with a dedicated connection:
	// the connection is then (re)taken from the key's master by resolve.
	cluster   *redis.ClusterClient
	topo      topology
	dedicated *redis.Conn   // nil: use the pool (or, on a cluster, resolve first)
	node      *redis.Client // on a cluster: the master that holds dedicated
	// target is where interrupt sends CLIENT UNBLOCK: the dedicated
	// connection's id and a client of its node. nil: nothing to interrupt.
	target atomic.Pointer[waitTarget]
	// short is set when the server has no CLIENT ID (miniredis): waits
	// are then cut to shortWait so that stopping stays quick.
	short bool
}

// waitTarget names the connection a wait blocks on.
type waitTarget struct {
	id  int64
	via redis.Cmdable // a client of the node that holds the connection
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
	if !dedicated {
		return w
	}
	switch c := client.(type) {
	case *redis.Client:
		w.single = c
		w.dedicated = c.Conn()
	case *redis.ClusterClient:
		w.cluster = c
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
	return w.waitKey(ctx, w.key, d, onTime)
}

// waitKey is wait on another list of the queue (one in the same slot as
// the waiter's key): the resume list of a paused queue.
func (w *waiter) waitKey(ctx context.Context, key string, d time.Duration, onTime bool) error {
	if err := w.prepare(ctx); err != nil {
		return err
	}
	var c blockingCmdable = w.client
	if w.dedicated != nil {
		c = w.dedicated
		if onTime {
			stop := w.unblockAt(d)
			defer stop()
		}
	}
	if w.short {
		d = min(d, shortWait)
	}
	var err error
	if d < time.Second {
		// go-redis rounds BLMOVE's timeout up to whole seconds; send the
		// fraction ourselves (it stays within the default read timeout).
		err = c.Do(ctx, "BLMOVE", key, key, "RIGHT", "RIGHT", waitSecs(d)).Err()
		if errors.Is(err, errBareCmdable) {
			// a bare Cmdable (see universal): whole seconds only
			err = c.BLMove(ctx, key, key, "RIGHT", "RIGHT", time.Second).Err()
		}
	} else {
		err = c.BLMove(ctx, key, key, "RIGHT", "RIGHT", d.Truncate(time.Second)).Err()
	}
	return w.waited(ctx, err, d)
}

// prepare makes the waiter ready to wait: on a cluster it finds the key's
// master, and it learns the dedicated connection's id (see identify).
func (w *waiter) prepare(ctx context.Context) error {
	if err := w.resolve(ctx); err != nil {
		return err
	}
	if err := w.identify(ctx); err != nil {
		w.failed(err)
		return err
	}
	return nil
}

// waited turns the error of a wait of up to d into the wait's answer: a
// timeout (redis.Nil) is nil; any other error drops what it may have
// invalidated (see failed); a cluster's answer that the key's slot is
// being migrated is nil after a brief pause.
func (w *waiter) waited(ctx context.Context, err error, d time.Duration) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return nil
	}
	w.failed(err)
	if migrating(err) {
		// The slot is being migrated and the key is on its way: the
		// fetch that follows is redirected; there is nothing to wait on
		// here, so wait briefly and let the caller fetch.
		select {
		case <-ctx.Done():
		case <-time.After(min(d, shortWait)):
		}
		return nil
	}
	return err
}

// waitSecs is BLMOVE's timeout argument for d: seconds with a fraction,
// at least 1ms (0 would block for ever).
func waitSecs(d time.Duration) string {
	return strconv.FormatFloat(max(d.Seconds(), 0.001), 'f', 3, 64)
}

// waitMargin is the least time a pipelined wait leaves between its end
// and the client's read timeout: Redis ends a blocked command up to 100ms
// late at the default hz 10 (see wait), and the reply still has to come.
// The margin is half the read timeout, at most a second and at least
// this: with go-redis's default 5s, an idle consumer fetches every 4s.
const waitMargin = 150 * time.Millisecond

// minPipelinedWait is the shortest wait worth a pipeline: a client whose
// read timeout leaves less (under about 200ms) waits with waitKey.
const minPipelinedWait = 50 * time.Millisecond

// waitFetch is waitKey followed by a fetch in the same pipeline, on a
// dedicated connection: Redis runs the fetch (fetch adds it to the
// pipeline) as soon as the wait returns, so a delivery published into an
// idle queue reaches the consumer in the reply to the wait, one round trip
// after the publish instead of two.
//
// It returns the fetch's command (nil when it was not sent: there is no
// dedicated connection here, or the client's read timeout is too short
// for it, and the caller fetches on its own), and how long Redis spent
// from the pipeline's arrival to the start of the fetch (0 when unknown):
// the pipeline reads Redis's clock before the BLMOVE and between it and
// the fetch, so that a lease the fetch started can be measured from the
// send time plus that span, never from before it. err is the wait's
// error; the fetch's is on its command.
func (w *waiter) waitFetch(ctx context.Context, key string, d time.Duration, onTime bool, fetch func(redis.Pipeliner) *redis.Cmd) (*redis.Cmd, time.Duration, error) {
	if err := w.prepare(ctx); err != nil {
		return nil, 0, err
	}
	if w.dedicated == nil {
		return nil, 0, w.waitKey(ctx, key, d, onTime)
	}
	// A pipeline is read with the client's read timeout (a single
	// blocking command gets its timeout plus ten seconds): keep the wait
	// well inside it. Waiting less than asked is harmless; the caller
	// fetches and waits again.
	if rt := w.readTimeout(); rt > 0 {
		limit := rt - max(min(time.Second, rt/2), waitMargin)
		if limit < minPipelinedWait {
			return nil, 0, w.waitKey(ctx, key, d, onTime)
		}
		d = min(d, limit)
	}
	if onTime {
		stop := w.unblockAt(d)
		defer stop()
	}
	pipe := w.dedicated.Pipeline()
	t0 := pipe.Time(ctx)
	blocked := pipe.Do(ctx, "BLMOVE", key, key, "RIGHT", "RIGHT", waitSecs(d))
	t1 := pipe.Time(ctx)
	fetched := fetch(pipe)
	_, _ = pipe.Exec(ctx)
	if err := blocked.Err(); err != nil && !errors.Is(err, redis.Nil) {
		// on a migrating slot the fetch was refused too, and the caller
		// fetches anew (see waited)
		return fetched, 0, w.waited(ctx, err, d)
	}
	var redisErr redis.Error
	if err := fetched.Err(); err != nil && !errors.As(err, &redisErr) {
		// The wait's reply came but the fetch's did not: the connection
		// is as broken as if the wait's had been lost.
		w.failed(err)
	}
	var spent time.Duration
	if a, b := t0.Val(), t1.Val(); t0.Err() == nil && t1.Err() == nil && b.After(a) {
		spent = b.Sub(a)
	}
	return fetched, spent, nil
}

// readTimeout is the read timeout of the dedicated connection's client,
// as go-redis keeps it once the options are set up (5 s by default; 0 or
// less: none).
func (w *waiter) readTimeout() time.Duration {
	switch {
	case w.single != nil:
		return max(w.single.Options().ReadTimeout, 0)
	case w.cluster != nil:
		return max(w.cluster.Options().ReadTimeout, 0)
	}
	return 0
}

// unblockAt ends the wait on the dedicated connection at d with CLIENT
// UNBLOCK (see wait); the returned func stops it once the wait is over.
// The UNBLOCK can reach Redis before the BLMOVE has blocked (d may be
// 1ms), and then does nothing: it is repeated until the wait has returned.
func (w *waiter) unblockAt(d time.Duration) func() {
	done := make(chan struct{})
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
	return func() {
		t.Stop()
		close(done)
	}
}

// migrating reports whether err is a cluster's answer about a slot being
// migrated (ASK, TRYAGAIN): nothing is wrong, the key is elsewhere for now.
func migrating(err error) bool {
	var redisErr redis.Error
	if !errors.As(err, &redisErr) {
		return false
	}
	msg := redisErr.Error()
	return strings.HasPrefix(msg, "ASK ") || strings.HasPrefix(msg, "TRYAGAIN ")
}

// resolve takes a dedicated connection on the master that serves the key's
// slot now, on a cluster client that has none.
func (w *waiter) resolve(ctx context.Context) error {
	if w.cluster == nil || w.dedicated != nil {
		return nil
	}
	node, err := w.cluster.MasterForKey(ctx, w.key)
	if err != nil {
		w.failed(err)
		return err
	}
	w.dedicated, w.node = node.Conn(), node
	return nil
}

// failed forgets what a failed wait may have invalidated: the connection's
// id (it may be dialled anew, with a new id) and the dedicated connection
// itself. go-redis never uses a dedicated connection again once a command
// on it failed on the network (or with READONLY): every later command
// answers "Conn is in a bad state", so after a Redis restart or a failover
// every wait would fail. On a single node a new connection is taken at
// once; it is dialled when first used, to whichever server is the master
// then. On a cluster the connection may be on a node that died or no
// longer serves the key's slot: it is dropped, the slot map reloaded when
// the error says the topology changed, and the next wait resolves the
// key's master anew.
func (w *waiter) failed(err error) {
	w.target.Store(nil)
	switch {
	case w.single != nil && w.dedicated != nil:
		_ = w.dedicated.Close()
		w.dedicated = w.single.Conn()
	case w.cluster != nil:
		if w.dedicated != nil {
			_ = w.dedicated.Close()
			w.dedicated = nil
		}
		if topologyError(err) {
			w.topo.reload(w.cluster)
		}
	}
}

// identify learns the dedicated connection's CLIENT ID, once per
// connection, or falls back to the pool when the server has no CLIENT ID.
func (w *waiter) identify(ctx context.Context) error {
	if w.dedicated == nil || w.target.Load() != nil {
		return nil
	}
	id, err := w.dedicated.ClientID(ctx).Result()
	var redisErr redis.Error
	switch {
	case errors.As(err, &redisErr):
		// The server has no CLIENT ID: wait on the pool, briefly.
		_ = w.dedicated.Close()
		w.dedicated = nil
		w.cluster = nil
		w.short = true
		return nil
	case err != nil:
		w.failed(err)
		return err
	}
	var via redis.Cmdable = w.client
	if w.cluster != nil {
		// CLIENT UNBLOCK must reach the node that holds the connection:
		// the cluster client would send it to any node.
		via = w.node
	}
	w.target.Store(&waitTarget{id: id, via: via})
	return nil
}

// interrupt ends a wait in progress, where the server allows it.
func (w *waiter) interrupt(ctx context.Context) {
	if t := w.target.Load(); t != nil {
		_ = t.via.ClientUnblock(ctx, t.id).Err()
	}
}

func (w *waiter) close() {
	if w.dedicated != nil {
		_ = w.dedicated.Close()
	}
}
