package redq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/push"
)

// sharedWaits lets the idle queues of one connection wait on Redis
// together, on one connection of their own, instead of one connection per
// waiting queue (see waiter).
//
// It uses Redis's key tracking (CLIENT TRACKING, RESP3): a read of a key
// on the tracking connection arms a one-shot invalidation, which Redis
// pushes to that connection when the key next changes. A queue that would
// wait asks for its list (ready, or the resume list of a paused queue) to
// be armed: the tracking connection reads its length, and a list that is
// not empty wakes the queue at once; an empty one wakes it when anything
// changes it (a publish, a return, the wake marker of a priority, a due
// delivery or a group slot, a resume), or when Redis flushes or drops the
// tracking. The queue then fetches as it would after its own wait. Spurious
// wakes (a change that leaves the list empty) cost a fetch.
//
// The connection waits in BLPOP on a kick list of its own, and go-redis
// handles the pushes that arrive meanwhile; a queue that needs a list
// armed pushes to the kick list, which ends the BLPOP (a push that comes
// before the BLPOP makes it return at once, so no arm is missed). A wait
// ends on its own at its deadline (a local timer, on time) and at once
// when consuming stops; nothing in Redis needs to be interrupted.
//
// A wake through here costs one round trip more than a queue's own wait,
// whose fetch rides in the wait's pipeline (see waiter.waitFetch), so the
// first ownWaits queues of a connection keep their own waiters and only
// the queues beyond them share. It serves single-node and failover clients
// on protocol 3 whose server passes a probe of the tracking at each
// (re)connection; elsewhere (a cluster, miniredis, RESP2) every queue keeps
// its own waiter.
type sharedWaits struct {
	client  *redis.Client // nil: not available for this client
	kickKey string
	// ownWaits is how many queues of the connection keep waiters of their
	// own (see claimOwn).
	ownWaits int

	mu       sync.Mutex
	own      int                             // queues holding an own waiter
	waits    map[string]map[*sharedWait]bool // by key
	arms     map[string]bool                 // keys to arm
	kicked   bool                            // a kick is on its way
	running  bool                            // the loop runs
	disabled bool                            // the server has no usable tracking
	probe    chan struct{}                   // the probe's invalidation arrived
}

// sharedWait is one queue's wait for one key.
type sharedWait struct {
	key  string
	woke chan struct{} // closed once
	once sync.Once
}

func (w *sharedWait) wake() { w.once.Do(func() { close(w.woke) }) }

// defaultOwnWaits is how many queues of a connection wait with their own
// waiter (a connection each) before the others share one.
const defaultOwnWaits = 8

// sharedWaitCycle bounds one BLPOP of the shared connection.
const sharedWaitCycle = 2 * time.Second

func newSharedWaits(client redis.UniversalClient, ns string) *sharedWaits {
	s := &sharedWaits{ownWaits: defaultOwnWaits, waits: map[string]map[*sharedWait]bool{}, arms: map[string]bool{}}
	if c, ok := client.(*redis.Client); ok && c.Options().Protocol != 2 {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		s.client = c
		s.kickKey = "{" + ns + "}:waits:" + hex.EncodeToString(b)
	}
	return s
}

// claimOwn reports whether a queue should wait with its own waiter: the
// connection cannot share waits, or fewer than ownWaits queues hold one
// (the queue then holds one until it calls releaseOwn).
func (s *sharedWaits) claimOwn() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil || s.disabled || s.own < s.ownWaits {
		s.own++
		return true
	}
	return false
}

// releaseOwn gives back what claimOwn took.
func (s *sharedWaits) releaseOwn() {
	s.mu.Lock()
	s.own--
	s.mu.Unlock()
}

// usable reports whether waits can be shared now (the probe may still
// find, later, that they cannot: wait then wakes its waiters).
func (s *sharedWaits) usable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.client != nil && !s.disabled
}

// wait returns when key may have changed, after d, or once stop is
// closed (false then). A wait that could not be armed (the server turned
// out to have no usable tracking) returns at once, true.
func (s *sharedWaits) wait(ctx context.Context, key string, d time.Duration, stop <-chan struct{}) bool {
	w := &sharedWait{key: key, woke: make(chan struct{})}
	s.mu.Lock()
	if s.disabled {
		s.mu.Unlock()
		return true
	}
	ws := s.waits[key]
	if ws == nil {
		ws = map[*sharedWait]bool{}
		s.waits[key] = ws
	}
	ws[w] = true
	s.arms[key] = true
	start := !s.running
	s.running = true
	kick := !start && !s.kicked
	s.kicked = s.kicked || kick
	s.mu.Unlock()
	if start {
		go s.loop()
	} else if kick {
		s.kick(ctx)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	stopped := false
	select {
	case <-w.woke:
	case <-t.C:
	case <-stop:
		stopped = true
	}
	s.mu.Lock()
	delete(s.waits[key], w)
	if len(s.waits[key]) == 0 {
		delete(s.waits, key)
	}
	s.mu.Unlock()
	// The loop ends after its current BLPOP when no one waits any more.
	return !stopped
}

// kick ends the shared connection's BLPOP (or makes the next one return at
// once). The list expires should the loop have ended meanwhile.
func (s *sharedWaits) kick(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	pipe := s.client.Pipeline()
	pipe.LPush(ctx, s.kickKey, "k")
	pipe.PExpire(ctx, s.kickKey, time.Minute)
	if _, err := pipe.Exec(ctx); err != nil {
		// The loop ends its BLPOP after sharedWaitCycle anyway.
		s.mu.Lock()
		s.kicked = false
		s.mu.Unlock()
	}
}

// wakeKeys wakes the waits on keys (all of them for nil keys).
func (s *sharedWaits) wakeKeys(keys []string, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if all {
		for _, ws := range s.waits {
			for w := range ws {
				w.wake()
			}
		}
		return
	}
	for _, k := range keys {
		if k == s.kickKey && s.probe != nil {
			close(s.probe)
			s.probe = nil
			continue
		}
		for w := range s.waits[k] {
			w.wake()
		}
	}
}

// HandlePushNotification takes Redis's invalidation pushes on the shared
// connection: ["invalidate", [key, ...]], or ["invalidate", nil] when Redis
// flushed or dropped the tracking (every wait wakes then).
func (s *sharedWaits) HandlePushNotification(_ context.Context, _ push.NotificationHandlerContext, n []interface{}) error {
	if len(n) < 2 || n[1] == nil {
		s.wakeKeys(nil, true)
		return nil
	}
	items, ok := n[1].([]interface{})
	if !ok {
		s.wakeKeys(nil, true)
		return nil
	}
	keys := make([]string, 0, len(items))
	for _, it := range items {
		if k, ok := it.(string); ok {
			keys = append(keys, k)
		}
	}
	s.wakeKeys(keys, false)
	return nil
}

// errNoTracking says that the server gave no usable key tracking.
var errNoTracking = errors.New("redq: no key tracking on this server")

// loop runs the shared connection while someone waits: it arms the keys
// asked for and blocks until kicked, handling invalidations meanwhile.
func (s *sharedWaits) loop() {
	ctx := context.Background()
	var conn *redis.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	fails := 0
	for {
		s.mu.Lock()
		if len(s.waits) == 0 {
			s.running = false
			s.kicked = false
			s.arms = map[string]bool{}
			s.mu.Unlock()
			return
		}
		var keys []string
		if conn == nil {
			// a new connection tracks nothing yet: arm every key waited on
			for k := range s.waits {
				keys = append(keys, k)
			}
		} else {
			for k := range s.arms {
				if s.waits[k] != nil {
					keys = append(keys, k)
				}
			}
		}
		s.arms = map[string]bool{}
		s.kicked = false
		s.mu.Unlock()
		if conn == nil {
			c, err := s.connect(ctx)
			if errors.Is(err, errNoTracking) {
				s.mu.Lock()
				s.disabled = true
				s.running = false
				s.mu.Unlock()
				s.wakeKeys(nil, true)
				return
			}
			if err != nil {
				fails++
				s.wakeKeys(nil, true)
				time.Sleep(backoff(fails, time.Second))
				continue
			}
			conn = c
		}
		err := s.arm(ctx, conn, keys)
		if err == nil {
			err = conn.BLPop(ctx, sharedWaitCycle, s.kickKey).Err()
			if errors.Is(err, redis.Nil) {
				err = nil
			}
		}
		if err != nil {
			// The connection (and what it tracked) may be gone: every
			// wait fetches again, and the next connection arms anew.
			_ = conn.Close()
			conn = nil
			fails++
			s.wakeKeys(nil, true)
			time.Sleep(backoff(fails, time.Second))
			continue
		}
		fails = 0
	}
}

// arm reads the length of keys on conn, which makes Redis track them for
// it, and wakes the waits on those that are not empty.
func (s *sharedWaits) arm(ctx context.Context, conn *redis.Conn, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := conn.Pipeline()
	lens := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		lens[i] = pipe.LLen(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	var ready []string
	for i, c := range lens {
		if c.Val() > 0 {
			ready = append(ready, keys[i])
		}
	}
	s.wakeKeys(ready, false)
	return nil
}

// connect opens the shared connection, turns tracking on and probes it:
// a write to a key the connection read must reach the handler before the
// reply of a command sent after it. errNoTracking: it did not.
func (s *sharedWaits) connect(ctx context.Context) (*redis.Conn, error) {
	conn := s.client.EphemeralConn()
	fail := func(err error) (*redis.Conn, error) {
		_ = conn.Close()
		return nil, err
	}
	if err := conn.RegisterPushNotificationHandler("invalidate", s, false); err != nil {
		return fail(errNoTracking)
	}
	var redisErr redis.Error
	if err := conn.Do(ctx, "CLIENT", "TRACKING", "ON").Err(); err != nil {
		if errors.As(err, &redisErr) {
			return fail(errNoTracking)
		}
		return fail(err)
	}
	probe := make(chan struct{})
	s.mu.Lock()
	s.probe = probe
	s.mu.Unlock()
	pipe := conn.Pipeline()
	pipe.LLen(ctx, s.kickKey)
	pipe.LPush(ctx, s.kickKey, "probe")
	pipe.LRem(ctx, s.kickKey, 0, "probe")
	if _, err := pipe.Exec(ctx); err != nil {
		return fail(err)
	}
	if err := conn.Ping(ctx).Err(); err != nil {
		return fail(err)
	}
	select {
	case <-probe:
		return conn, nil
	default:
	}
	s.mu.Lock()
	s.probe = nil
	s.mu.Unlock()
	return fail(errNoTracking)
}
