package redq

import (
	"context"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Connection is a named client of redq. It registers itself in Redis and
// keeps a heartbeat alive while the process runs; a cleaner returns the
// unacked deliveries of connections whose heartbeat is gone.
//
// A connection stops only when asked (StopAllConsuming). Through a Redis
// outage of any length, a restart, a failover or a heartbeat gap, it
// pauses and resumes by itself: after HeartbeatErrorLimit failed
// heartbeats it hands out nothing until Redis answers (see
// HeartbeatError); when a cleaner declared it dead meanwhile, or Redis
// lost its registration, it goes on under a fresh registration with its
// queues, consumers, handlers and Take callers, while what it took before
// is no longer its own (see ConnectionLostError).
type Connection interface {
	// OpenQueue returns a handle on the named queue and lists the queue in
	// Redis. Names are validated: see ArgumentError. Options set the
	// handle's publish defaults, its handlers' retry policy and whether the
	// queue keeps expired deliveries. It fails with an *ArgumentError for a
	// bad name or option, ErrorConsumingStopped after StopAllConsuming, and
	// a Redis error (matching ErrorUnavailable or ErrorWritesRefused) when
	// the queue could not be listed. For example:
	//
	//	tasks, err := conn.OpenQueue("tasks", redq.WithPublishDefaults(redq.TTR(time.Minute)))
	OpenQueue(name string, opts ...QueueOption) (Queue, error)
	// OpenRound returns a handle on the named round queue, creating it
	// with the given period if it does not exist (see Round). Names are
	// validated like queue names. Options: RoundTTL, RoundChangeSettings.
	// It fails with an *ArgumentError for a bad name or period, or when the
	// round exists with another period or TTL (the error names the stored
	// one), and with ErrorConsumingStopped after StopAllConsuming. For
	// example:
	//
	//	feeds, err := conn.OpenRound("feeds", 5*time.Minute, redq.RoundTTL(24*time.Hour))
	OpenRound(name string, period time.Duration, opts ...RoundOption) (Round, error)
	// CollectStats reads the counts of the given queues.
	CollectStats(queueList []string) (Stats, error)
	// CollectStatsContext is CollectStats with a context.
	CollectStatsContext(ctx context.Context, queueList []string) (Stats, error)
	// GetOpenQueues lists the queues that were opened in this namespace.
	GetOpenQueues() ([]string, error)
	// GetOpenQueuesContext is GetOpenQueues with a context.
	GetOpenQueuesContext(ctx context.Context) ([]string, error)
	// OpenTimers returns the named set of timers (see Timers) and lists it
	// in Redis. Names follow the rules of queue names; a timer set and a
	// queue of the same name are separate. It fails as OpenQueue does. For
	// example:
	//
	//	reminders, err := conn.OpenTimers("invoice-reminders")
	OpenTimers(name string) (Timers, error)
	// OpenSchedules returns the named set of cron schedules (see
	// Schedules) and lists it in Redis. Names follow the rules of queue
	// names; a schedule set, a timer set and a queue of the same name are
	// separate. It fails as OpenQueue does. For example:
	//
	//	nightly, err := conn.OpenSchedules("reports")
	OpenSchedules(name string) (Schedules, error)
	// StopAllConsuming stops consuming on every queue of this connection,
	// waits for consumers to finish their current delivery, stops the
	// heartbeat and deletes it, so a cleaner may return what the connection
	// still holds at once (and then unlists it; until then the stats show
	// it as stopped). The channel is closed when all that is done. It is
	// the only way a connection stops, unless WithStopOnHeartbeatErrorLimit
	// makes the heartbeat error limit call it. Afterwards OpenQueue,
	// OpenTimers, OpenRound, StartConsuming, Take, Timers.Next, Round.Next
	// and the verbs on deliveries fail with ErrorConsumingStopped; queues
	// opened before may still publish, as in rmq.
	StopAllConsuming() <-chan struct{}
}

// Open opens a connection on any go-redis client (a single node, a failover
// client or a cluster client): it registers the connection in Redis and
// starts its heartbeat. tag names the connection (its full name is
// tag-<random>); errChan, if not nil, receives background errors
// (HeartbeatError, ConsumeError, DeliveryError, *ConnectionLostError, and
// at open an EvictionWarning when Redis may evict keys) and is never
// blocked on: errors that do not fit are dropped. The connection never
// stops by itself unless WithStopOnHeartbeatErrorLimit asks for it (see
// Connection).
//
// On failure it returns an error matching ErrorUnavailable (Redis could
// not be reached), ErrorConfiguration (password, ACL, database index, TLS,
// or a client kind an option cannot use), ErrorWritesRefused (a replica,
// out of memory, loading), or an *ArgumentError for a bad tag or option;
// nothing is left registered. The client is the caller's, and is not
// closed when opening fails. For example:
//
//	conn, err := redq.Open(ctx, "worker", redis.NewClient(&redis.Options{Addr: "localhost:6379"}), errChan)
func Open(ctx context.Context, tag string, client redis.UniversalClient, errChan chan<- error, opts ...Option) (Connection, error) {
	c, err := open(ctx, tag, client, errChan, opts)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// OpenConnection opens a connection on the Redis at network and address,
// database db, with a client of its own (rmq's constructor; see Open for
// tag, errChan and the options). An error at open matches ErrorUnavailable
// when Redis could not be reached, ErrorConfiguration when the settings
// are wrong (password, ACL, database index), ErrorWritesRefused when Redis
// accepts no writes, or *ArgumentError for bad input; the client it made
// is closed again. For example:
//
//	conn, err := redq.OpenConnection("worker", "tcp", "localhost:6379", 0, errChan)
func OpenConnection(tag, network, address string, db int, errChan chan<- error, opts ...Option) (Connection, error) {
	return OpenConnectionWithRedisOptions(tag, &redis.Options{Network: network, Addr: address, DB: db}, errChan, opts...)
}

// OpenConnectionWithRedisOptions opens a connection with a new client made
// from redisOptions (rmq's constructor; see Open for the rest). It fails
// as Open does, or with an *ArgumentError when redisOptions is nil; when
// opening fails, the client it made is closed again.
func OpenConnectionWithRedisOptions(tag string, redisOptions *redis.Options, errChan chan<- error, opts ...Option) (Connection, error) {
	if redisOptions == nil {
		return nil, argError("redis options", redisOptions, "must not be nil")
	}
	client := redis.NewClient(redisOptions)
	c, err := Open(context.Background(), tag, client, errChan, opts...)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return c, nil
}

// OpenConnectionWithRedisClient opens a connection on an existing client,
// as rmq's does: any go-redis redis.Cmdable. A UniversalClient (a client,
// a cluster, failover or ring client) gets the whole engine; a bare
// Cmdable (a custom type) works too, but its idle waits end on whole
// seconds only, so a due delivery may reach an idle consumer up to a
// second late. It fails as Open does, or with an *ArgumentError for a nil
// client; the client is not closed.
func OpenConnectionWithRedisClient(tag string, client redis.Cmdable, errChan chan<- error, opts ...Option) (Connection, error) {
	if client == nil {
		return nil, argError("redis client", client, "must not be nil")
	}
	return Open(context.Background(), tag, universal(client), errChan, opts...)
}

// OpenConnectionWithTestRedisClient opens a connection on a new embedded
// miniredis server, for tests and demos. The server lives as long as the
// process. Keys expire in miniredis only when its clock is moved
// (FastForward), so heartbeats there never lapse on their own. It fails
// when the server cannot start (no free loopback port) or as Open does;
// then the server and its client are closed again. For example:
//
//	conn, err := redq.OpenConnectionWithTestRedisClient("test", nil)
func OpenConnectionWithTestRedisClient(tag string, errChan chan<- error, opts ...Option) (Connection, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, errorf("redq: start embedded redis: %w", err)
	}
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	c, err := OpenConnectionWithRedisClient(tag, client, errChan, opts...)
	if err != nil {
		_ = client.Close()
		m.Close()
		return nil, err
	}
	return c, nil
}

type redisConnection struct {
	tag       string
	client    redis.UniversalClient
	errChan   chan<- error
	opts      options
	keys      globalKeys
	ids       *idSource
	acks      *committer
	counts    *countWriter // consumer counts (see AddConsumer)
	waits     *sharedWaits // idle queues beyond the first few wait here
	publisher *publisher
	keyed     *scriptBatcher // upserts, cancels and run-nows of keyed items
	handles   atomic.Int64   // numbers queue handles
	tokens    atomic.Uint64  // numbers calls that Redis remembers (see nextToken)
	topo      topology       // throttles slot map reloads (see topologyChanged)

	mu      sync.Mutex
	queues  []*redisQueue // queues that started consuming
	stopped bool
	// holders are the timer sets holding fires taken ahead, which
	// StopAllConsuming hands back (see redisTimers.keep).
	holders  map[*redisTimers]struct{}
	stopDone chan struct{}

	hbCancel context.CancelFunc
	hbDone   chan struct{}
	// nudge asks the heartbeat loop to beat now: a script said that the
	// connection is not registered for a queue.
	nudge chan struct{}

	// reg is the current registration (see registration); only the
	// heartbeat loop replaces it, under stateMu.
	reg     atomic.Pointer[registration]
	stateMu sync.Mutex
	// paused is set while the heartbeat fails HeartbeatErrorLimit times
	// in a row and after: the connection fetches nothing and hands out
	// nothing until a heartbeat succeeds (see heartbeatLoop).
	paused bool
	// beatsSent numbers the heartbeats sent; aliveAt is the number of the
	// last one that found the registration alive (see awaitVerdict).
	beatsSent, aliveAt uint64
	// changed is closed and replaced whenever reg, paused or aliveAt
	// change, waking those who wait on them.
	changed chan struct{}
	// closed is set once StopAllConsuming has stopped the consumers and
	// the heartbeat: from then on a cleaner may return what the connection
	// holds, so its deliveries are no longer settled through it.
	closed atomic.Bool

	// forceStaged makes every Push to another queue take the staged path
	// of a move between cluster slots (move.go), and afterStage, when set,
	// runs between its first and second step. Tests set them; a program
	// cannot.
	forceStaged bool
	afterStage  func()

	logs logState // problems going on, for WithLogger (logger.go)
}

func open(ctx context.Context, tag string, client redis.UniversalClient, errChan chan<- error, opts []Option) (*redisConnection, error) {
	if why := validName(tag); why != "" {
		return nil, argError("connection tag", tag, why)
	}
	if client == nil {
		return nil, argError("redis client", client, "must not be nil")
	}
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	c := &redisConnection{
		tag:     tag,
		client:  client,
		errChan: errChan,
		opts:    o,
		keys:    newGlobalKeys(o.namespace),
		ids:     newIDSource(),
		hbDone:  make(chan struct{}),
		nudge:   make(chan struct{}, 1),
		changed: make(chan struct{}),
	}
	c.acks = newCommitter(c)
	c.counts = newCountWriter(c)
	c.waits = newSharedWaits(client, o.namespace)
	c.publisher = newPublisher(c)
	c.keyed = newScriptBatcher(c, "k")
	name := c.newName()
	if o.waitReplicas > 0 {
		if err := c.checkWaitReplicas(ctx); err != nil {
			return nil, errorf("redq: open connection %s: %w", name, err)
		}
	}
	if err := c.register(ctx, name); err != nil {
		return nil, errorf("redq: register connection %s: %w", name, openError(err))
	}
	c.reg.Store(&registration{name: name})
	if errChan != nil {
		c.checkEviction(ctx)
	}
	hbCtx, cancel := context.WithCancel(context.Background())
	c.hbCancel = cancel
	go c.heartbeatLoop(hbCtx)
	return c, nil
}

// nextToken returns a token for a call that Redis remembers, so that the
// same call sent again after a lost reply is answered with the outcome of
// the first (see remove_held in scripts/lib.lua). Tokens are unique per
// connection.
func (c *redisConnection) nextToken() string { return strconv.FormatUint(c.tokens.Add(1), 10) }

// stoppedKeep bounds how long the stopped marker of a connection that
// stopped cleanly waits for a cleaner.
const stoppedKeep = 24 * time.Hour

// Name returns the connection's full name, tag-<random>, as it appears in
// Redis and in stats: the name of its current registration, which changes
// when the connection goes on under a fresh one (see ConnectionLostError).
func (c *redisConnection) Name() string { return c.reg.Load().name }

// registration is one life of the connection in Redis: a name in the
// connections set with a heartbeat, under which the connection is
// registered for queues and holds what it takes. Every delivery remembers
// the registration that took it, and its verbs act under that name only,
// so nothing taken under one registration is ever settled under another.
//
// A registration is dead once Redis no longer knows it: a cleaner
// declared it dead (its heartbeat lapsed) and may have returned what it
// held, or Redis lost it (a restart without persistence). The heartbeat
// loop then makes a fresh registration under a new name and the
// connection goes on under it (see renew).
type registration struct {
	name string
	dead atomic.Bool
}

// newName returns a fresh full name for the connection: tag-<random>.
func (c *redisConnection) newName() string {
	u := uuid.New()
	return c.tag + "-" + hex.EncodeToString(u[:6])
}

// register adds name to the connections set and starts its heartbeat.
func (c *redisConnection) register(ctx context.Context, name string) error {
	return scripts.register.Run(ctx, c.client, []string{c.keys.connections, c.keys.heartbeat(name)},
		name, c.opts.heartbeatTTL.Milliseconds()).Err()
}

// registration returns the current registration.
func (c *redisConnection) registration() *registration { return c.reg.Load() }

// update changes the connection's state under stateMu and wakes those who
// wait on it (see changed).
func (c *redisConnection) update(f func()) {
	c.stateMu.Lock()
	f()
	close(c.changed)
	c.changed = make(chan struct{})
	c.stateMu.Unlock()
}

// usable reports whether the connection may fetch and hand out deliveries
// now (not paused, its registration alive) and returns a channel that is
// closed at the next change.
func (c *redisConnection) usable() (*registration, bool, <-chan struct{}) {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	reg := c.reg.Load()
	return reg, !c.paused && !reg.dead.Load(), c.changed
}

// suspect is told that Redis answered a call under reg as if the
// connection were not registered (for a queue): the heartbeat loop looks
// at once whether reg is dead.
func (c *redisConnection) suspect(reg *registration) {
	if reg != c.registration() || reg.dead.Load() {
		return
	}
	select {
	case c.nudge <- struct{}{}:
	default:
	}
}

// awaitVerdict is called after Redis refused a take under reg because the
// connection is not registered for the queue. It has the heartbeat look
// and waits until either a newer registration replaced reg, or a heartbeat
// sent after the refusal found reg alive (so a cleaner did not declare it
// dead, and only the queue's registration is gone: it may be made again).
// It returns false when done is closed first.
func (c *redisConnection) awaitVerdict(reg *registration, done <-chan struct{}) bool {
	c.stateMu.Lock()
	after := c.beatsSent
	c.stateMu.Unlock()
	c.suspect(reg)
	for {
		c.stateMu.Lock()
		verdict := c.reg.Load() != reg || c.aliveAt > after
		changed := c.changed
		c.stateMu.Unlock()
		if verdict {
			return true
		}
		select {
		case <-done:
			return false
		case <-changed:
		}
	}
}

func (c *redisConnection) report(err error) {
	c.logReport(err)
	if c.errChan == nil {
		return
	}
	select {
	case c.errChan <- err:
	default:
	}
}

// heartbeatLoop refreshes the heartbeat of the current registration every
// heartbeat interval (and at once when nudged) until the connection stops.
//
// A failed refresh is reported as a HeartbeatError with the count of
// consecutive failures. At HeartbeatErrorLimit failures the connection
// pauses: it fetches nothing more and hands out none of the deliveries it
// buffered, since a cleaner may soon return them; consumers finish what
// they hold. It goes on trying, and resumes as soon as a heartbeat
// succeeds. (With WithStopOnHeartbeatErrorLimit it stops all consuming
// instead, as rmq does.)
//
// When Redis answers that it does not know the registration (a cleaner
// declared it dead, or Redis lost its data), the registration is dead: its
// buffered deliveries are dropped (they are the cleaner's), and the
// connection registers under a fresh name and goes on (see renew).
func (c *redisConnection) heartbeatLoop(ctx context.Context) {
	defer close(c.hbDone)
	ticker := time.NewTicker(c.opts.heartbeatInterval)
	defer ticker.Stop()
	timeout := max(c.opts.heartbeatInterval, time.Second)
	errCount := 0
	next := "" // the name a pending renewal registers
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-c.nudge:
		}
		reg := c.registration()
		var err error
		bctx, cancel := context.WithTimeout(ctx, timeout)
		if reg.dead.Load() {
			if next == "" {
				next = c.newName()
			}
			err = c.renew(bctx, reg, next)
			if err == nil {
				next = ""
			}
		} else {
			var seq uint64
			c.update(func() { c.beatsSent++; seq = c.beatsSent })
			var alive int
			start := time.Now()
			alive, err = scripts.heartbeat.Run(bctx, c.client, []string{c.keys.connections, c.keys.heartbeat(reg.name)},
				reg.name, c.opts.heartbeatTTL.Milliseconds()).Int()
			c.observe(EventHeartbeat, "", "", 1, start, err)
			if err == nil && alive == 0 {
				c.died(reg)
				next = c.newName()
				err = c.renew(bctx, reg, next)
				if err == nil {
					next = ""
				}
			} else if err == nil {
				c.update(func() { c.aliveAt = max(c.aliveAt, seq); c.paused = false })
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			c.topologyChanged(err)
			errCount++
			c.report(&HeartbeatError{RedisErr: err, Count: errCount})
			if errors.Is(err, redis.ErrClosed) {
				// The program closed the client: nothing will ever reach
				// Redis through it again, so there is nothing to wait for.
				go c.StopAllConsuming()
				return
			}
			if errCount >= c.opts.heartbeatErrorLimit {
				if c.opts.stopOnHeartbeatErrorLimit {
					go c.StopAllConsuming()
					return
				}
				c.update(func() { c.paused = true })
			}
			continue
		}
		if errCount > 0 {
			c.logRecovered("heartbeat")
		}
		errCount = 0
	}
}

// died marks reg dead, which stops the connection's consumers from
// handing out what it took, and drops the deliveries it buffered: a
// cleaner returns them (or returned them already) to ready.
func (c *redisConnection) died(reg *registration) {
	c.update(func() { reg.dead.Store(true) })
	c.mu.Lock()
	queues := append([]*redisQueue(nil), c.queues...)
	c.mu.Unlock()
	for _, q := range queues {
		q.dropDead()
	}
}

// renew registers the connection under name in place of the dead
// registration old, so that it goes on with its queues, consumers and
// Take callers (each queue registers under the new name before it takes
// again), and says so on the error channel. Redis answered, so a pause
// for heartbeat errors ends too.
func (c *redisConnection) renew(ctx context.Context, old *registration, name string) error {
	if err := c.register(ctx, name); err != nil {
		return errorf("register connection %s in place of %s: %w", name, old.name, err)
	}
	c.update(func() {
		c.reg.Store(&registration{name: name})
		c.paused = false
	})
	c.report(&ConnectionLostError{OldName: old.name, NewName: name})
	return nil
}

// consuming records a queue that started consuming, so that
// StopAllConsuming stops it. (Handles that only publish are not kept: a
// program may open a queue per request.) It fails once the connection
// stopped.
func (c *redisConnection) consuming(q *redisQueue) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ErrorConsumingStopped
	}
	c.queues = append(c.queues, q)
	return nil
}

// holding records that t holds fires taken ahead, for StopAllConsuming to
// hand back; false once the connection stopped, when t must hand them back
// itself. letGo undoes it.
func (c *redisConnection) holding(t *redisTimers) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return false
	}
	if c.holders == nil {
		c.holders = map[*redisTimers]struct{}{}
	}
	c.holders[t] = struct{}{}
	return true
}

func (c *redisConnection) letGo(t *redisTimers) {
	c.mu.Lock()
	delete(c.holders, t)
	c.mu.Unlock()
}

// settleable refuses verbs on deliveries taken under reg once
// StopAllConsuming has finished (see closed): they go back to ready
// through a cleaner. The verbs on deliveries of a dead registration ask
// Redis anyway, so that they say what became of each delivery.
func (c *redisConnection) settleable(reg *registration) error {
	if c.closed.Load() && !reg.dead.Load() {
		return ErrorConsumingStopped
	}
	return nil
}

func (c *redisConnection) isStopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

func (c *redisConnection) OpenQueue(name string, opts ...QueueOption) (Queue, error) {
	q, err := c.openQueue(context.Background(), name, opts...)
	if err != nil {
		// a nil Queue, not a Queue holding a nil *redisQueue: callers
		// check queue == nil, as with rmq
		return nil, err
	}
	return q, nil
}

func (c *redisConnection) openQueue(ctx context.Context, name string, opts ...QueueOption) (*redisQueue, error) {
	if why := validQueueName(name); why != "" {
		return nil, argError("queue name", name, why)
	}
	o := queueOptions{retry: DefaultRetryPolicy}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if c.isStopped() {
		return nil, ErrorConsumingStopped
	}
	q := newQueue(c, name, o)
	// A plain pipeline: the queues set and the queue's meta hash live in
	// different cluster slots, and neither write depends on the other.
	pipe := c.client.Pipeline()
	pipe.SAdd(ctx, c.keys.queues, name)
	if o.keepExpired != nil {
		keep := "0"
		if *o.keepExpired {
			keep = "1"
		}
		pipe.HSet(ctx, q.keys.prefix+":meta", "keep_expired", keep)
	}
	if o.rate != nil {
		setRateLimit(ctx, pipe, q.keys, *o.rate)
	}
	setGroupOptions(ctx, pipe, q.keys, o)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, errorf("redq: open queue %q: %w", name, err)
	}
	return q, nil
}

func (c *redisConnection) GetOpenQueues() ([]string, error) {
	return c.GetOpenQueuesContext(context.Background())
}

func (c *redisConnection) GetOpenQueuesContext(ctx context.Context) ([]string, error) {
	names, err := c.client.SMembers(ctx, c.keys.queues).Result()
	if err != nil {
		return nil, errorf("redq: list queues: %w", err)
	}
	return names, nil
}

func (c *redisConnection) StopAllConsuming() <-chan struct{} {
	c.mu.Lock()
	if c.stopDone != nil {
		c.mu.Unlock()
		return c.stopDone
	}
	c.stopped = true
	done := make(chan struct{})
	c.stopDone = done
	queues := append([]*redisQueue(nil), c.queues...)
	c.mu.Unlock()

	go func() {
		defer close(done)
		waits := make([]<-chan struct{}, len(queues))
		for i, q := range queues {
			waits[i] = q.StopConsuming()
		}
		for _, w := range waits {
			<-w
		}
		c.mu.Lock()
		holders := c.holders
		c.holders = nil
		c.mu.Unlock()
		for t := range holders {
			t.handBackAll()
		}
		c.hbCancel()
		<-c.hbDone
		c.closed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Without its heartbeat the connection is dead to the next clean,
		// which returns what it still holds and unlists it (as rmq does,
		// it stays listed, inactive, until then). The marker lets the
		// stats tell that it stopped cleanly rather than died.
		name := c.Name()
		err := scripts.stop.Run(ctx, c.client, []string{c.keys.connections, c.keys.heartbeat(name), c.keys.stopped(name)},
			name, stoppedKeep.Milliseconds()).Err()
		if err != nil {
			c.report(&HeartbeatError{RedisErr: errorf("delete heartbeat: %w", err), Count: 1})
		}
		// the publish connections go back (a publish after this opens
		// them again)
		c.publisher.fast.close()
	}()
	return done
}
