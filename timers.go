package redq

import (
	"context"
	"sync"
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
	//
	// While fires back up, one call takes several due fires from Redis at
	// once (up to 32) and keeps those it does not return for the next Next
	// or NextBatch calls on this Timers: they are this connection's from
	// then on, as a taken fire is, and go back to the front of their line,
	// for any process to take, when no call asks for them within 100 ms or
	// consuming stops.
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
	q     *redisQueue
	ahead firesAhead
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
	q.timers = true
	if err := c.client.SAdd(context.Background(), c.keys.timers, name).Err(); err != nil {
		return nil, errorf("redq: open timers %q: %w", name, err)
	}
	return &redisTimers{q: q, ahead: firesAhead{size: 1}}, nil
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
	if timeout < 0 {
		return nil, argError("timeout", timeout, "must not be negative")
	}
	if t.q.takeStopped() {
		t.handBackAll()
		return nil, ErrorConsumingStopped
	}
	if d := t.ahead.pop(); d != nil {
		return redisFire{d}, nil
	}
	ds, err := t.q.TakeBatch(ctx, t.ahead.want(), timeout)
	if err != nil {
		return nil, err
	}
	t.ahead.took(len(ds))
	if len(ds) > 1 {
		t.keep(ds[1:])
	}
	return redisFire{ds[0].(*redisDelivery)}, nil
}

func (t *redisTimers) NextBatch(ctx context.Context, max int64, timeout time.Duration) (Fires, error) {
	if max < 1 {
		return nil, argError("max", max, "must be at least 1")
	}
	if timeout < 0 {
		return nil, argError("timeout", timeout, "must not be negative")
	}
	if t.q.takeStopped() {
		t.handBackAll()
		return nil, ErrorConsumingStopped
	}
	var fs Fires
	for int64(len(fs)) < max {
		d := t.ahead.pop()
		if d == nil {
			break
		}
		fs = append(fs, redisFire{d})
	}
	if len(fs) > 0 {
		timeout = 0 // with fires in hand, only those due now join them
	}
	ds, err := t.q.TakeBatch(ctx, max-int64(len(fs)), timeout)
	if int64(len(fs)) == max || (err != nil && len(fs) > 0) {
		return fs, nil
	}
	if err != nil {
		return nil, err
	}
	for _, d := range ds {
		fs = append(fs, redisFire{d.(*redisDelivery)})
	}
	return fs, nil
}

// firePrefetch is the most fires one Next call takes from Redis: the first
// is its answer, the others wait in the Timers for the next calls. A call
// takes one fire at first, and twice as many as the last time (up to
// firePrefetch) each time it took all it asked for, since then fires back
// up: a take costs Redis and the client about as much for one fire as for
// several, so taking them together is what lets a few goroutines keep up.
// A hand-back (fires nobody asked for in fireHold) halves it.
const firePrefetch = 32

// fireHold is how long a fire taken ahead waits in the Timers for a Next or
// NextBatch call before it goes back to Redis, to the front of its line,
// where any process can take it.
const fireHold = 100 * time.Millisecond

// firesAhead holds the fires a Next call took for later calls, oldest
// first, with when each was kept.
type firesAhead struct {
	mu    sync.Mutex
	fires []aheadFire
	size  int64       // how many the next take asks for
	timer *time.Timer // hands back what was kept fireHold ago; nil: none
	// back is held while fires go back, so that StopAllConsuming returns
	// only after a hand-back under way has ended.
	back sync.Mutex
}

type aheadFire struct {
	d    *redisDelivery
	kept time.Time
}

// want is how many fires the next take asks for.
func (a *firesAhead) want() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.size
}

// took adapts the next take's size to a take of n fires.
func (a *firesAhead) took(n int) {
	a.mu.Lock()
	if int64(n) >= a.size {
		a.size = min(2*a.size, firePrefetch)
	}
	a.mu.Unlock()
}

// pop returns the oldest fire kept, nil when none is. Fires of a dead
// registration are dropped: a cleaner returns them, and this connection
// must not work on them.
func (a *firesAhead) pop() *redisDelivery {
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.fires) > 0 {
		d := a.fires[0].d
		a.fires[0] = aheadFire{}
		a.fires = a.fires[1:]
		if !d.reg.dead.Load() {
			return d
		}
	}
	return nil
}

// drain removes and returns the fires kept at least age ago (0: all), and
// halves the take size when there were any.
func (a *firesAhead) drain(age time.Duration) []*redisDelivery {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*redisDelivery
	now := time.Now()
	for len(a.fires) > 0 && now.Sub(a.fires[0].kept) >= age {
		if d := a.fires[0].d; !d.reg.dead.Load() {
			out = append(out, d)
		}
		a.fires[0] = aheadFire{}
		a.fires = a.fires[1:]
	}
	if len(out) > 0 {
		a.size = max(a.size/2, 1)
	}
	return out
}

// keep holds ds for the next calls and makes sure a hand-back is due. Once
// the connection stopped, they go back at once.
func (t *redisTimers) keep(ds Deliveries) {
	a := &t.ahead
	now := time.Now()
	a.mu.Lock()
	for _, d := range ds {
		a.fires = append(a.fires, aheadFire{d: d.(*redisDelivery), kept: now})
	}
	if a.timer != nil {
		a.mu.Unlock()
		return
	}
	if t.q.conn.holding(t) {
		a.timer = time.AfterFunc(fireHold, t.handBackOld)
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	t.handBackAll()
}

// handBackOld hands back the fires kept at least fireHold ago, and comes
// back for the others when they are that old.
func (t *redisTimers) handBackOld() {
	a := &t.ahead
	a.back.Lock()
	defer a.back.Unlock()
	old := a.drain(fireHold)
	a.mu.Lock()
	if len(a.fires) > 0 {
		a.timer = time.AfterFunc(time.Until(a.fires[0].kept.Add(fireHold)), t.handBackOld)
	} else {
		a.timer = nil
		t.q.conn.letGo(t)
	}
	a.mu.Unlock()
	t.handBack(old)
}

// handBackAll hands back every fire kept, and returns once a hand-back
// under way has ended too.
func (t *redisTimers) handBackAll() {
	a := &t.ahead
	a.back.Lock()
	defer a.back.Unlock()
	a.mu.Lock()
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.mu.Unlock()
	t.q.conn.letGo(t)
	t.handBack(a.drain(0))
}

// handBack puts fires taken ahead back to the front of their lines, due as
// they were and with no attempt counted, as a stopping consumer hands back
// its buffer. When that fails they stay this connection's until a cleaner
// returns them, and the error channel says so.
func (t *redisTimers) handBack(ds []*redisDelivery) {
	if len(ds) == 0 {
		return
	}
	q := t.q
	var regs []*registration
	byReg := map[*registration][]string{}
	for i := len(ds) - 1; i >= 0; i-- { // the newest first: the oldest ends at the head
		d := ds[i]
		if byReg[d.reg] == nil {
			regs = append(regs, d.reg)
		}
		byReg[d.reg] = append(byReg[d.reg], d.ref())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, reg := range regs {
		res, err := q.conn.acks.settle(ctx, q, reg, modeHead, nil, byReg[reg], nil)
		if err == nil {
			err = res.err(0)
		}
		if err != nil {
			q.conn.report(&ConsumeError{Queue: q.name, RedisErr: errorf("hand back %d timer fires taken ahead: %w", len(byReg[reg]), err), Count: 1})
		}
	}
}

type redisFire struct{ d *redisDelivery }

func (f redisFire) Key() string    { return f.d.key }
func (f redisFire) Due() time.Time { return time.UnixMilli(f.d.due) }

func (f redisFire) Ack(ctx context.Context) error { return f.d.AckContext(ctx) }

func (f redisFire) Release(ctx context.Context, delay time.Duration) error {
	return f.d.Release(ctx, delay)
}
