package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The keyspace-poll timers baseline: event timers as a common design builds them
// with one expiring key per timer and a poller
// (our own code, from its description), to run side by side with redq's
// Timers.
//
//   - Create(key, after): SET timers:<ns>:timer:<key> with a PX expiry and
//     SADD the key to timers:<ns>:registered (the bench creates a
//     thousand at a time, in one MULTI).
//   - Poll, from any number of processes, each on its own schedule: SCAN
//     the timer key prefix and SADD the keys that still exist into a
//     temporary set, SDIFF the registered set against it, LPUSH what
//     expired to the list timers:<ns>:queue and SREM it from registered.
//   - Next: BRPOP on the list.
//
// A timer fires only when someone polls, every poll reads every timer, two
// polls that overlap push the same key twice, and a key taken with BRPOP
// by a consumer that dies is gone.

const (
	// pollTimersScanCount is the COUNT of each SCAN of a poll, and how many keys
	// one pipelined LPUSH / SREM pair or one fill round trip carries.
	pollTimersScanCount = 1000
	// pollTimersBlock is the BRPOP timeout of a waiting consumer (1 s is the
	// smallest go-redis sends).
	pollTimersBlock = time.Second
	// pollTimersFillWorkers create timers in parallel when a run fills.
	pollTimersFillWorkers = 4
	// pollTimersSettleCheck is how often a run looks whether the baseline has
	// fired and delivered everything.
	pollTimersSettleCheck = 50 * time.Millisecond
)

// pollTimersSystem runs the timer workloads on the baseline and nothing else.
type pollTimersSystem struct{ unmeasured }

// newPollTimers returns the keyspace-poll timers baseline.
func newPollTimers() system { return pollTimersSystem{} }

// Name returns "poll-timers".
func (pollTimersSystem) Name() string { return "poll-timers" }

var _ timerSystem = pollTimersSystem{}

// pollTimers is one namespace of baseline timers.
type pollTimers struct {
	rdb    *redis.Client
	prefix string // timers:<ns>
	// afterDiff, when set (tests only), is called by each poll between its
	// SDIFF and its push: the window in which an overlapping poll pushes
	// the same timers again.
	afterDiff func()
}

// newPollTimersNS returns a namespace of timers on rdb that no earlier run used.
func newPollTimersNS(rdb *redis.Client) *pollTimers {
	ns := strings.TrimPrefix(baseKeyPrefix("poll-timers"), "redq-bench:")
	return &pollTimers{rdb: rdb, prefix: "timers:" + strings.ReplaceAll(ns, ":", "-")}
}

func (t *pollTimers) timerKey(key string) string { return t.prefix + ":timer:" + key }
func (t *pollTimers) registered() string         { return t.prefix + ":registered" }
func (t *pollTimers) queue() string              { return t.prefix + ":queue" }

// createMany creates the timers keys[i], each expiring after afters[i]
// (whole ms, at least 1), in one round trip: per timer SET PX and SADD,
// as Create does, all in one MULTI.
func (t *pollTimers) createMany(ctx context.Context, keys []string, afters []time.Duration) error {
	_, err := t.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			p.Set(ctx, t.timerKey(k), "1", max(afters[i], time.Millisecond))
			p.SAdd(ctx, t.registered(), k)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pollTimers: create %d timers: %w", len(keys), err)
	}
	return nil
}

// poll fires the timers whose key expired and returns how many it pushed.
func (t *pollTimers) poll(ctx context.Context) (int, error) {
	tmp := t.prefix + ":_registered_" + strconv.FormatUint(rand.Uint64(), 10)
	defer t.rdb.Del(context.WithoutCancel(ctx), tmp)
	var cursor uint64
	timerPrefix := t.timerKey("")
	for {
		keys, next, err := t.rdb.Scan(ctx, cursor, timerPrefix+"*", pollTimersScanCount).Result()
		if err != nil {
			return 0, fmt.Errorf("pollTimers: poll: SCAN: %w", err)
		}
		if len(keys) > 0 {
			live := make([]any, len(keys))
			for i, k := range keys {
				live[i] = strings.TrimPrefix(k, timerPrefix)
			}
			if err := t.rdb.SAdd(ctx, tmp, live...).Err(); err != nil {
				return 0, fmt.Errorf("pollTimers: poll: SADD: %w", err)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	fired, err := t.rdb.SDiff(ctx, t.registered(), tmp).Result()
	if err != nil {
		return 0, fmt.Errorf("pollTimers: poll: SDIFF: %w", err)
	}
	if t.afterDiff != nil {
		t.afterDiff()
	}
	for from := 0; from < len(fired); from += pollTimersScanCount {
		chunk := fired[from:min(from+pollTimersScanCount, len(fired))]
		vals := make([]any, len(chunk))
		for i, k := range chunk {
			vals[i] = k
		}
		_, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.LPush(ctx, t.queue(), vals...)
			p.SRem(ctx, t.registered(), vals...)
			return nil
		})
		if err != nil {
			return from, fmt.Errorf("pollTimers: poll: push fired timers: %w", err)
		}
	}
	return len(fired), nil
}

// next waits up to timeout for a fired timer and returns its key; "" when
// none came.
func (t *pollTimers) next(ctx context.Context, timeout time.Duration) (string, error) {
	kv, err := t.rdb.BRPop(ctx, timeout, t.queue()).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("pollTimers: BRPOP: %w", err)
	}
	return kv[1], nil
}

// left returns how many timers are still registered (not fired) and how
// many fires wait in the list.
func (t *pollTimers) left(ctx context.Context) (registered, queued int64, err error) {
	var sc *redis.IntCmd
	var lc *redis.IntCmd
	_, err = t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		sc = p.SCard(ctx, t.registered())
		lc = p.LLen(ctx, t.queue())
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("pollTimers: count what is left: %w", err)
	}
	return sc.Val(), lc.Val(), nil
}

// fill creates n timers, timer i due at due(i), pollTimersScanCount per round
// trip from pollTimersFillWorkers goroutines. Each expiry is the time to the
// due time from just before its round trip, rounded up to whole ms; the
// due time recorded (returned) is that moment plus the expiry, by this
// process's clock.
func (t *pollTimers) fill(ctx context.Context, n int, due func(i int) time.Time) ([]time.Time, error) {
	dues := make([]time.Time, n)
	calls := (n + pollTimersScanCount - 1) / pollTimersScanCount
	err := parallel(ctx, pollTimersFillWorkers, calls, func(ctx context.Context, c int) error {
		lo, hi := c*pollTimersScanCount, min((c+1)*pollTimersScanCount, n)
		keys := make([]string, 0, hi-lo)
		afters := make([]time.Duration, 0, hi-lo)
		now := time.Now()
		for i := lo; i < hi; i++ {
			after := max(due(i).Sub(now), time.Millisecond)
			after = (after + time.Millisecond - 1).Truncate(time.Millisecond)
			keys = append(keys, keyName(i))
			afters = append(afters, after)
			dues[i] = now.Add(after)
		}
		return t.createMany(ctx, keys, afters)
	})
	return dues, err
}

// pollTimersLead calibrates the lead of a run filling n timers on rdb (see
// calibratedLead), with throwaway timers in a namespace of their own.
func pollTimersLead(ctx context.Context, rdb *redis.Client, n int) (time.Duration, error) {
	cal := newPollTimersNS(rdb)
	far := time.Now().Add(24 * time.Hour)
	return calibratedLead(ctx, n, func(ctx context.Context, c int) error {
		_, err := cal.fill(ctx, c, func(int) time.Time { return far })
		return err
	})
}

// pollTimersCrew runs goroutines that stop gracefully: a stop lets each finish
// the command it is in (a poll, a BRPOP) rather than cancel it, so that
// no fire is dropped by the bench itself.
type pollTimersCrew struct {
	stopCtx context.Context // ended by stop: the loops check it between commands
	stopNow context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	err     error
}

func newPollTimersCrew(ctx context.Context) *pollTimersCrew {
	c := &pollTimersCrew{}
	c.stopCtx, c.stopNow = context.WithCancel(ctx)
	return c
}

// run starts n goroutines running loop(i); loop must return soon after
// stopCtx ends. The first error is kept.
func (c *pollTimersCrew) run(n int, loop func(i int) error) {
	for i := range n {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			if err := loop(i); err != nil {
				c.mu.Lock()
				if c.err == nil {
					c.err = err
				}
				c.mu.Unlock()
			}
		}()
	}
}

// firstErr returns the first error a loop returned.
func (c *pollTimersCrew) firstErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// stop ends the loops, waits for them and returns the first error.
func (c *pollTimersCrew) stop() error {
	c.stopNow()
	c.wg.Wait()
	return c.firstErr()
}

// pollers starts n pollers, each polling and then pausing pause, until
// the crew stops.
func (t *pollTimers) pollers(ctx context.Context, c *pollTimersCrew, n int, pause time.Duration) {
	c.run(n, func(int) error {
		for c.stopCtx.Err() == nil {
			if _, err := t.poll(ctx); err != nil {
				return err
			}
			_ = sleep(c.stopCtx, pause)
		}
		return nil
	})
}

// consumers starts n consumers that take fires with BRPOP and record each
// in tl with the time it was received and its due time from dues.
func (t *pollTimers) consumers(ctx context.Context, c *pollTimersCrew, n int, tl *fireTally, dues []time.Time) {
	c.run(n, func(int) error {
		for c.stopCtx.Err() == nil {
			key, err := t.next(ctx, pollTimersBlock)
			if err != nil {
				return err
			}
			if key == "" {
				continue
			}
			at := time.Now()
			var due time.Time
			if k := keyIndex(key); k >= 0 && k < len(dues) {
				due = dues[k]
			}
			tl.fired(key, at, due)
		}
		return nil
	})
}

// FireTimers fills cfg.N timers (see fill), then starts cfg.Consumers
// consumers, the victim if any (it takes cfg.VictimTakes fires with BRPOP
// and returns without handling them: those fires are gone) and cfg.Pairs
// pollers, started together. Once every timer has been pushed (the
// registered set is empty) the pollers stop after their current poll;
// once the list is empty too the consumers stop.
func (pollTimersSystem) FireTimers(ctx context.Context, e *env, cfg timerConfig) (*fireTally, error) {
	rdb := e.newClient(cfg.Consumers + cfg.Pairs + pollTimersFillWorkers + 4)
	defer func() { _ = rdb.Close() }() // the measurement is taken; closing changes nothing
	t := newPollTimersNS(rdb)
	var err error
	if cfg.Lead, err = pollTimersLead(ctx, rdb, cfg.N); err != nil {
		return nil, fmt.Errorf("timers: %w", err)
	}
	base := time.Now()
	dues, err := t.fill(ctx, cfg.N, func(i int) time.Time { return timerDue(cfg, base, i) })
	if err != nil {
		return nil, fmt.Errorf("timers fill: %w", err)
	}
	if took, first := time.Since(base), timerDue(cfg, base, 0); time.Now().After(first) {
		return nil, fmt.Errorf("timers fill: setting %d timers took %s, longer than the lead %s", cfg.N, took, cfg.Lead)
	}
	tl := newFireTally(cfg.N)
	consumers := newPollTimersCrew(ctx)
	t.consumers(ctx, consumers, cfg.Consumers, tl, dues)
	if cfg.VictimTakes > 0 {
		consumers.run(1, func(int) error {
			for taken := 0; taken < cfg.VictimTakes && consumers.stopCtx.Err() == nil; {
				key, err := t.next(ctx, pollTimersBlock)
				if err != nil {
					return err
				}
				if key != "" {
					taken++ // and dies before handling it
				}
			}
			return nil
		})
	}
	pollers := newPollTimersCrew(ctx)
	t.pollers(ctx, pollers, max(cfg.Pairs, 1), cfg.Poll)
	last := timerDue(cfg, base, cfg.N-1)
	err = pollTimersSettle(ctx, t, last.Add(cfg.Drain), func() error {
		if err := consumers.firstErr(); err != nil {
			return err
		}
		return pollers.firstErr()
	}, pollers.stop)
	if serr := consumers.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return nil, fmt.Errorf("timers: %w (%s)", err, tl.counts())
	}
	return tl, nil
}

// pollTimersSettle waits until every timer has been pushed, then stops the
// pollers (stopPollers waits for their current poll), then waits until
// the list is empty: everything pushed has been taken. It fails when
// failed reports an error, ctx ends or deadline passes.
func pollTimersSettle(ctx context.Context, t *pollTimers, deadline time.Time, failed func() error, stopPollers func() error) error {
	stopped := false
	defer func() {
		if !stopped {
			_ = stopPollers()
		}
	}()
	for {
		if err := failed(); err != nil {
			return err
		}
		registered, queued, err := t.left(ctx)
		if err != nil {
			return err
		}
		if registered == 0 && !stopped {
			stopped = true
			if err := stopPollers(); err != nil {
				return err
			}
			continue
		}
		if stopped && queued == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not settled by the deadline: %d timers not fired, %d fires not taken", registered, queued)
		}
		if err := sleep(ctx, pollTimersSettleCheck); err != nil {
			return err
		}
	}
}

// TimerBurst fills n timers all due at one moment (a calibrated lead
// ahead, see fill), waits until the latest expiry has passed and
// timerBurstMargin more (the expiry Redis sets counts from when it runs
// the SET, a little after the time fill reads), then times consumers
// consumers and one poller from their start until every fire was
// received.
func (pollTimersSystem) TimerBurst(ctx context.Context, e *env, n, consumers int, _ int64) (time.Duration, error) {
	rdb := e.newClient(consumers + pollTimersFillWorkers + 4)
	defer func() { _ = rdb.Close() }() // the measurement is taken; closing changes nothing
	t := newPollTimersNS(rdb)
	lead, err := pollTimersLead(ctx, rdb, n)
	if err != nil {
		return 0, fmt.Errorf("burst: %w", err)
	}
	at := time.Now().Add(lead).Truncate(time.Millisecond)
	dues, err := t.fill(ctx, n, func(int) time.Time { return at })
	if err != nil {
		return 0, fmt.Errorf("burst fill: %w", err)
	}
	var latest time.Time
	for _, d := range dues {
		latest = later(latest, d)
	}
	if err := sleep(ctx, time.Until(latest.Add(timerBurstMargin))); err != nil {
		return 0, err
	}
	tl := newFireTally(n)
	crew := newPollTimersCrew(ctx)
	pollers := newPollTimersCrew(ctx)
	start := time.Now()
	t.consumers(ctx, crew, consumers, tl, dues)
	t.pollers(ctx, pollers, 1, pollTimersPoll)
	err = pollTimersAwait(ctx, tl, redqLimit(n), func() error {
		if err := crew.firstErr(); err != nil {
			return err
		}
		return pollers.firstErr()
	})
	elapsed := time.Since(start)
	if perr := pollers.stop(); err == nil {
		err = perr
	}
	if cerr := crew.stop(); err == nil {
		err = cerr
	}
	if err == nil {
		err = tl.counts().exact()
	}
	if err != nil {
		return 0, fmt.Errorf("burst: %w", err)
	}
	return elapsed, nil
}

// pollTimersAwait waits until tl saw every timer, failed reports an error, ctx
// ends or limit passes.
func pollTimersAwait(ctx context.Context, tl *fireTally, limit time.Duration, failed func() error) error {
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-tl.Done():
			return nil
		default:
		}
		if err := failed(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every timer fired within %s: %s", limit, tl.counts())
		}
		select {
		case <-tl.Done():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollTimersSettleCheck):
		}
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// unmeasured is a system that measures none of the queue workloads: a
// system made for other workloads (the timer baseline) embeds it.
type unmeasured struct{}

func (unmeasured) Publish(context.Context, *env, int, int, int) (time.Duration, error) {
	return 0, errNotMeasured
}
func (unmeasured) EndToEnd(context.Context, *env, e2eConfig) (time.Duration, error) {
	return 0, errNotMeasured
}
func (unmeasured) Steady(context.Context, *env, steadyConfig) (steadyResult, error) {
	return steadyResult{}, errNotMeasured
}
func (unmeasured) Idle(context.Context, *env, int, time.Duration) ([]time.Duration, error) {
	return nil, errNotMeasured
}
func (unmeasured) Queued(context.Context, *env, int, int) (time.Duration, error) {
	return 0, errNotMeasured
}
func (unmeasured) Unacked(context.Context, *env, int, int) (time.Duration, error) {
	return 0, errNotMeasured
}
func (unmeasured) ManyQueues(context.Context, *env, int, int) (time.Duration, error) {
	return 0, errNotMeasured
}
func (unmeasured) Recover(context.Context, *env, int) (time.Duration, error) {
	return 0, errNotMeasured
}
func (unmeasured) Memory(context.Context, *env, int) (float64, error) {
	return 0, errNotMeasured
}
