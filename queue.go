package redq

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Queue is a named queue: publish to it, consume from it, and manage its
// ready, rejected and unacked deliveries.
type Queue interface {
	// Publish adds payloads to the queue in one round trip.
	Publish(payload ...string) error
	// PublishBytes adds payloads to the queue in one round trip.
	PublishBytes(payload ...[]byte) error
	// PublishContext is Publish with a context. When ctx ends before Redis
	// answered, the payloads may or may not have been published.
	PublishContext(ctx context.Context, payload ...string) error
	// PublishBytesContext is PublishBytes with a context.
	PublishBytesContext(ctx context.Context, payload ...[]byte) error
	// Put publishes one payload with options: Delay or At (scheduled),
	// Priority, TTL, TTR and Header. They override the handle's defaults
	// (WithPublishDefaults). Bad options return an *ArgumentError and
	// publish nothing.
	Put(ctx context.Context, payload []byte, opts ...PublishOption) error
	// Upsert publishes a keyed delivery, or updates the pending item of the
	// key in place: by default (OnExisting(ReplaceAll)) with the new
	// payload and due time, so that a burst of upserts runs once after it
	// calms down (debounce; MaxWait bounds the wait). A key has at most one
	// pending item and at most one running delivery, across all
	// connections; an upsert while the key runs parks a successor that
	// becomes due once the running delivery is settled (Queued), so nothing
	// that arrives meanwhile is dropped. It takes Put's options (Delay, At,
	// Priority, TTL, TTR, Header) and OnExisting and MaxWait. The key is 1
	// to MaxKeyLength bytes, any bytes.
	Upsert(ctx context.Context, key string, payload []byte, opts ...PublishOption) (UpsertOutcome, error)
	// Cancel removes the pending item of the key (or its parked successor),
	// never a running delivery, and reports whether there was one.
	Cancel(ctx context.Context, key string) (bool, error)
	// Lookup reports what the key has; ErrorNotFound when it has neither a
	// pending item nor a running delivery.
	Lookup(ctx context.Context, key string) (KeyedItem, error)
	// RunNow makes the pending item of the key due now (a parked successor:
	// as soon as the running delivery is settled) and reports whether there
	// was one.
	RunNow(ctx context.Context, key string) (bool, error)
	// SetPushQueue sets where Push moves deliveries (nil: Push rejects). A
	// keyed delivery pushed on is upserted into the push queue by its key.
	// On Redis Cluster, Push between queues in one slot (see
	// SetPushQueueSameSlot) is one atomic script; between slots it is a
	// two-step move that a crash cannot break (see docs/cluster-moves.md).
	SetPushQueue(pushQueue Queue)
	// SetPushQueueSameSlot is SetPushQueue for programs that require the
	// fast path: it refuses, with an error matching ErrorCrossSlot and
	// changing nothing, a push queue whose keys are in another Redis
	// Cluster slot than this queue's (on any client, so that a program
	// tested on one Redis node fails the same way). Queues named
	// {group}name share the slot of group (see docs/cluster-moves.md).
	SetPushQueueSameSlot(pushQueue Queue) error
	// StartConsuming starts fetching deliveries for this handle's
	// consumers. As in rmq, prefetchLimit bounds the deliveries of the
	// queue that the connection holds: fetched and waiting in the buffer,
	// or handed to a consumer and not yet settled; the buffer is refilled
	// in one Redis call as soon as there is room (letting room gather for
	// two milliseconds while it is more than half full). An idle queue waits
	// on Redis for at most pollDuration per call; a publish wakes it at
	// once.
	StartConsuming(prefetchLimit int64, pollDuration time.Duration) error
	// StopConsuming stops fetching; consumers finish their current delivery.
	// Deliveries fetched but not yet handed to a consumer go back to the
	// head of ready. The channel is closed when all that is done.
	StopConsuming() <-chan struct{}
	// AddConsumer starts a goroutine that calls consumer for each delivery
	// and returns the consumer's name. It does not wait for Redis: the
	// consumer count that the stats show is written in the background (and
	// again after a failure while the queue consumes); the connection's own
	// CollectStats waits for it, other readers see it a round trip later.
	AddConsumer(tag string, consumer Consumer) (string, error)
	// AddConsumerFunc is AddConsumer for a function.
	AddConsumerFunc(tag string, consumerFunc ConsumerFunc) (string, error)
	// AddBatchConsumer starts a goroutine that calls consumer with up to
	// batchSize deliveries, or fewer once timeout passed since the first.
	AddBatchConsumer(tag string, batchSize int64, timeout time.Duration, consumer BatchConsumer) (string, error)
	// AddBatchConsumerFunc is AddBatchConsumer for a function.
	AddBatchConsumerFunc(tag string, batchSize int64, timeout time.Duration, batchConsumerFunc BatchConsumerFunc) (string, error)
	// AddHandler starts a goroutine that calls handler for each delivery
	// and settles it by the result: nil acks; an error (or a panic) sends
	// it back with the queue's retry policy's backoff (see
	// WithRetryPolicy) until it has been attempted MaxAttempts times, and
	// then rejects it with the error kept in its "Redq-Error" header. The
	// context is cancelled when the delivery's lease runs out (see TTR;
	// Touch extends it) or consuming stops.
	AddHandler(tag string, handler Handler) (string, error)
	// Take waits up to timeout (0: not at all) for a delivery and returns
	// it, owned by this connection like a consumer's: the caller must Ack,
	// Reject, Push or Release it, and the lease and cleaner rules apply. It
	// returns ErrorTimeout when nothing became ready in time. Take needs no
	// StartConsuming and works beside consumers of the same queue.
	Take(ctx context.Context, timeout time.Duration) (Message, error)
	// TakeBatch is Take for up to max deliveries: it returns as soon as at
	// least one is there, with as many as are ready, up to max.
	TakeBatch(ctx context.Context, max int64, timeout time.Duration) (Deliveries, error)
	// ReturnUnacked moves up to max of this connection's unacked deliveries
	// of the queue back to the head of ready.
	ReturnUnacked(max int64) (int64, error)
	// ReturnRejected moves up to max rejected deliveries back to ready.
	ReturnRejected(max int64) (int64, error)
	// PurgeReady deletes all ready deliveries (of every priority) and
	// returns how many. Delayed deliveries stay.
	PurgeReady() (int64, error)
	// PurgeRejected deletes all rejected deliveries and returns how many.
	PurgeRejected() (int64, error)
	// Destroy purges ready, rejected and delayed deliveries, ends a pause
	// (Pause) and resets the queue's counters, and unlists the queue: a
	// queue opened again under the name starts from zero, unpaused.
	// ErrorNotFound (after the
	// purge, as in rmq) when it was not listed. Unacked deliveries stay
	// with their connections and can still be acked.
	Destroy() (readyCount, rejectedCount int64, err error)
	// Drain removes up to count ready deliveries, highest priority first,
	// and returns their payloads.
	Drain(count int64) ([]string, error)
	// Remove deletes ready deliveries (and rejected ones if
	// removeFromRejected) whose payload equals payload: all of them when
	// count is 0, else at most count, the most recently published first.
	// It scans the lists: an operation for operators, not a hot path.
	Remove(payload string, count int64, removeFromRejected bool) error
	// RemoveBytes is Remove for a payload of bytes.
	RemoveBytes(payload []byte, count int64, removeFromRejected bool) error

	// ReturnUnackedContext is ReturnUnacked with a context.
	ReturnUnackedContext(ctx context.Context, max int64) (int64, error)
	// ReturnRejectedContext is ReturnRejected with a context.
	ReturnRejectedContext(ctx context.Context, max int64) (int64, error)
	// PurgeReadyContext is PurgeReady with a context.
	PurgeReadyContext(ctx context.Context) (int64, error)
	// PurgeRejectedContext is PurgeRejected with a context.
	PurgeRejectedContext(ctx context.Context) (int64, error)
	// DestroyContext is Destroy with a context.
	DestroyContext(ctx context.Context) (readyCount, rejectedCount int64, err error)
	// DrainContext is Drain with a context.
	DrainContext(ctx context.Context, count int64) ([]string, error)
	// RemoveContext is Remove with a context.
	RemoveContext(ctx context.Context, payload string, count int64, removeFromRejected bool) error

	// Pause pauses the queue for every connection: the state is kept in
	// Redis, and until Resume no consumer, batch consumer, handler or Take
	// of any connection gets a delivery of the queue; they wait without
	// errors as on an empty queue. Publishes, upserts, acks, rejects, the
	// cleaner and the promotion of due deliveries go on, so deliveries
	// gather in ready. Pausing a paused queue does nothing.
	Pause(ctx context.Context) error
	// Resume ends a pause (see Pause) and wakes the waiting consumers and
	// Take callers of every connection. Resuming a queue that is not
	// paused does nothing.
	Resume(ctx context.Context) error
}

const (
	stateIdle = iota
	stateConsuming
	stateStopped

	// fetchChunk bounds how many deliveries one fetch script call moves.
	fetchChunk = 1000
	// fetchBudget bounds the bytes one fetch call moves, judged by the
	// size of the deliveries the last call moved: a chunk of 1,000 large
	// payloads would hold Redis in one script for a long time and keep the
	// consumers waiting for the whole chunk. Small payloads never reach it.
	fetchBudget = 1 << 20
	// firstFetch bounds the first fetch, made before any size is known.
	firstFetch = 64
)

type redisQueue struct {
	name       string
	defaults   publishOptions // what Publish and Put start from
	retry      RetryPolicy
	conn       *redisConnection
	keys       queueKeys
	unackedKey string // see setKeys
	repliesKey string
	// others holds connections whose leases of this queue ran out and
	// whose storage the next fetch declares (see fetch.lua); guarded by mu.
	others   []string
	othersMu sync.Mutex
	handle   int64 // numbers this handle's field in the replies hash
	// timers is set on the queue of a timer set (see OpenTimers), whose
	// fires are acked through fire_ack.lua; never changed after.
	timers    bool
	pushQueue atomic.Pointer[redisQueue]
	// fetchToken names the next fetch call; it changes only after a fetch
	// succeeded, so a call repeated after an error is recognised.
	fetchToken uint64
	// unsure is the last fetch when it failed (its reply may have been
	// lost after it took), until a fetch succeeds: what the stop sends
	// again (see settleUnsureFetch). Only the fetch loop touches it, and
	// the stop once the loop is over.
	unsure *unsureFetch
	// itemSize is the mean size of the deliveries the last fetch moved
	// (0 before the first); only the fetch loop touches it.
	itemSize int
	takes    takeSlots

	// regAs is the registration under which this handle registered the
	// connection for the queue (see register); nil: not yet.
	regMu sync.Mutex
	regAs *registration

	mu            sync.Mutex
	state         int
	prefetchLimit int64
	pollDuration  time.Duration
	buf           chan *redisDelivery
	room          chan struct{}
	stop          chan struct{}
	stopCtx       context.Context // cancelled when consuming stops
	stopCancel    context.CancelFunc
	stopDone      chan struct{}
	fetchDone     chan struct{}
	waiter        *waiter
	workers       sync.WaitGroup
	consumers     int64
	leftovers     []*redisDelivery
}

func newQueue(c *redisConnection, name string, o queueOptions) *redisQueue {
	q := &redisQueue{name: name, conn: c, handle: c.handles.Add(1), defaults: o.defaults, retry: o.retry}
	q.setKeys(newQueueKeys(c.opts.namespace, name))
	return q
}

// setKeys places the queue's storage under k (a timer set's differs from
// the queue of the same name: see OpenTimers). unackedKey and repliesKey
// are the connection's storage of the queue under the registration the
// handle was opened with (tests look at them); code that may run after a
// renewal names the registration instead.
func (q *redisQueue) setKeys(k queueKeys) {
	name := q.conn.Name()
	q.keys, q.unackedKey, q.repliesKey = k, k.unacked(name), k.replies(name)
}

// register registers the connection for the queue under reg (the fetch
// script serves only registered connections), unless this handle did
// already. A connection that goes on under a fresh registration registers
// again before it takes.
func (q *redisQueue) register(ctx context.Context, reg *registration) error {
	q.mu.Lock()
	n := q.consumers
	q.mu.Unlock()
	return q.registerWith(ctx, reg, n)
}

// registerWith is register with the handle's consumer count n, for a
// caller that holds q.mu (q.mu is never taken under regMu).
func (q *redisQueue) registerWith(ctx context.Context, reg *registration, n int64) error {
	q.regMu.Lock()
	defer q.regMu.Unlock()
	if q.regAs == reg {
		return nil
	}
	if err := scripts.setConsumers.Run(ctx, q.conn.client, []string{q.keys.consumers}, reg.name, n, "1").Err(); err != nil {
		return err
	}
	q.regAs = reg
	return nil
}

// forget makes the next take register the connection for the queue again
// under reg: Redis refused a take although reg is alive.
func (q *redisQueue) forget(reg *registration) {
	q.regMu.Lock()
	if q.regAs == reg {
		q.regAs = nil
	}
	q.regMu.Unlock()
}

func (q *redisQueue) String() string { return q.name }

func (q *redisQueue) SetPushQueue(pushQueue Queue) {
	rq, _ := pushQueue.(*redisQueue)
	q.pushQueue.Store(rq)
}

func (q *redisQueue) SetPushQueueSameSlot(pushQueue Queue) error {
	if pushQueue == nil {
		q.pushQueue.Store(nil)
		return nil
	}
	rq, ok := pushQueue.(*redisQueue)
	if !ok {
		return errorf("redq: push queue %v: %w", pushQueue, ErrorNotRedis)
	}
	if !q.sameSlot(rq) {
		return errorf("redq: push from %q (slot %d) to %q (slot %d): %w", q.name, keySlot(q.keys.ready),
			rq.name, keySlot(rq.keys.ready), ErrorCrossSlot)
	}
	q.pushQueue.Store(rq)
	return nil
}

// sameSlot reports whether p's keys are in q's cluster slot.
func (q *redisQueue) sameSlot(p *redisQueue) bool {
	return keySlot(q.keys.ready) == keySlot(p.keys.ready)
}

// Consuming

func (q *redisQueue) StartConsuming(prefetchLimit int64, pollDuration time.Duration) error {
	if prefetchLimit < 1 {
		return argError("prefetchLimit", prefetchLimit, "must be at least 1")
	}
	if pollDuration <= 0 {
		return argError("pollDuration", pollDuration, "must be positive")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch q.state {
	case stateConsuming:
		return ErrorAlreadyConsuming
	case stateStopped:
		return ErrorConsumingStopped
	}
	if q.conn.isStopped() {
		return ErrorConsumingStopped
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Register this connection for the queue before taking anything: the
	// fetch script refuses connections that are not registered, and a
	// cleaner unregisters a dead connection in the same step that returns
	// its deliveries.
	if err := q.registerWith(ctx, q.conn.registration(), q.consumers); err != nil {
		return errorf("redq: start consuming %q: %w", q.name, err)
	}
	// From here StopAllConsuming stops this queue; if it began meanwhile,
	// the queue does not start.
	if err := q.conn.consuming(q); err != nil {
		return err
	}
	q.state = stateConsuming
	q.prefetchLimit, q.pollDuration = prefetchLimit, pollDuration
	q.buf = make(chan *redisDelivery, prefetchLimit)
	q.room = make(chan struct{}, 1)
	q.stop = make(chan struct{})
	q.stopCtx, q.stopCancel = context.WithCancel(context.Background())
	q.fetchDone = make(chan struct{})
	go q.fetchLoop()
	return nil
}

func (q *redisQueue) StopConsuming() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch q.state {
	case stateIdle:
		q.state = stateStopped
		q.stopDone = make(chan struct{})
		close(q.stopDone)
		return q.stopDone
	case stateStopped:
		return q.stopDone
	}
	q.state = stateStopped
	q.stopDone = make(chan struct{})
	close(q.stop)
	q.stopCancel()
	go func() {
		q.interruptFetch()
		q.settleUnsureFetch()
		q.workers.Wait()
		q.returnBuffered()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		name := q.conn.Name()
		// (after a count written in the background, or it could land
		// after this one)
		_ = q.conn.counts.await(ctx)
		_ = scripts.setConsumers.Run(ctx, q.conn.client, []string{q.keys.consumers}, name, 0, "0").Err()
		_ = q.conn.client.HDel(ctx, q.keys.replies(name), q.fetchField()).Err()
		close(q.stopDone)
	}()
	return q.stopDone
}

// interruptFetch ends the fetch loop's wait on Redis, if any, until the
// loop has seen the stop and exited. (An interrupt can land just before the
// loop starts a wait, so it is repeated.)
func (q *redisQueue) interruptFetch() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		q.mu.Lock()
		w := q.waiter
		q.mu.Unlock()
		if w != nil {
			w.interrupt(ctx)
		}
		select {
		case <-q.fetchDone:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// unsureFetch is a fetch that failed: its registration and size, and
// when it was first sent. A resend of it under the same token may get the
// first send's deliveries back from Redis's record (see fetch.lua), whose
// leases started no earlier than that first send, not at the resend.
type unsureFetch struct {
	reg  *registration
	n    int64
	sent time.Time
}

// markUnsure remembers that a fetch of n under reg, sent at sent, failed
// and may have run: it keeps the earliest send of the same call (the
// token changes only after a fetch succeeded).
func (q *redisQueue) markUnsure(reg *registration, n int64, sent time.Time) {
	if u := q.unsure; u != nil && u.reg == reg && u.sent.Before(sent) {
		sent = u.sent
	}
	q.unsure = &unsureFetch{reg: reg, n: n, sent: sent}
}

// leaseStart is when the leases of a fetch under reg that was sent at sent
// started at the earliest: for deliveries that came back from the record
// of an earlier send of the same call (replayed), that send's time.
func (q *redisQueue) leaseStart(reg *registration, t taken, sent time.Time) time.Time {
	if u := q.unsure; t.replayed && u != nil && u.reg == reg && u.sent.Before(sent) {
		return u.sent
	}
	return sent
}

// settleUnsureFetch runs once the fetch loop is over. When its last fetch
// failed, Redis may have run it and lost the reply (a read timeout, a
// broken connection that go-redis did not retry), and the deliveries it
// took would stay in the connection's storage after the stop, unworked,
// until a cleaner returns them. The loop would have sent it again had it
// gone on; the stop does so, under the same token, so that Redis answers
// with the deliveries that call took (or, if it never ran, takes them now)
// and they go back to ready with the buffered ones.
func (q *redisQueue) settleUnsureFetch() {
	u := q.unsure
	q.unsure = nil
	if u == nil || u.reg.dead.Load() {
		return // nothing in doubt, or the cleaner's
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sent := time.Now()
	t, err := q.takeRaw(ctx, u.reg, u.n, q.fetchField(), q.fetchToken, q.prefetchLimit)
	if err != nil {
		if !isLost(err) {
			q.conn.report(&ConsumeError{Queue: q.name, RedisErr: errorf("resend a fetch whose reply was lost: %w", err), Count: 1})
		}
		return
	}
	q.fetchToken++
	if t.replayed && u.sent.Before(sent) {
		sent = u.sent
	}
	ds := q.deliveries(t, sent)
	q.mu.Lock()
	q.leftovers = append(q.leftovers, ds...)
	q.mu.Unlock()
}

// returnBuffered hands deliveries that were fetched but never given to a
// consumer back to the head of ready, oldest taken first, so another worker
// can take them without waiting for this connection to die.
func (q *redisQueue) returnBuffered() {
	q.mu.Lock()
	pending := q.leftovers
	q.leftovers = nil
	q.mu.Unlock()
	for {
		select {
		case d := <-q.buf:
			pending = append(pending, d)
			continue
		default:
		}
		break
	}
	// Those of a dead registration are the cleaner's; the rest go back per
	// registration (one, unless the connection went on under a fresh one
	// while a delivery waited).
	var regs []*registration
	byReg := map[*registration][]*redisDelivery{}
	for _, d := range pending {
		if d.reg.dead.Load() {
			continue
		}
		if byReg[d.reg] == nil {
			regs = append(regs, d.reg)
		}
		byReg[d.reg] = append(byReg[d.reg], d)
	}
	for _, reg := range regs {
		ds := byReg[reg]
		ids := make([]string, len(ds))
		for i, d := range ds {
			ids[len(ds)-1-i] = d.ref() // RPUSH the newest first: the oldest ends at the head
		}
		// The committer sends the call again while Redis is unreachable, up
		// to the retry timeout: a connection that goes on living would
		// otherwise keep these in its storage, unworked, until it dies and
		// a cleaner returns them.
		res, err := q.conn.acks.settle(context.Background(), q, reg, modeHead, nil, ids, nil)
		if err == nil {
			err = res.err(0)
		}
		if err != nil {
			// They stay in unacked storage; a cleaner returns them once the
			// connection is gone.
			q.conn.report(&ConsumeError{Queue: q.name, RedisErr: errorf("return buffered deliveries: %w", err), Count: 1})
		}
	}
}

// dropDead drops the buffered deliveries of dead registrations (see
// registration): a cleaner returns them to ready, and the connection must
// not work on them. Consumers skip any that arrive later.
func (q *redisQueue) dropDead() {
	q.mu.Lock()
	buf := q.buf
	kept := q.leftovers[:0]
	for _, d := range q.leftovers {
		if !d.reg.dead.Load() {
			kept = append(kept, d)
		}
	}
	q.leftovers = kept
	q.mu.Unlock()
	if buf == nil {
		return
	}
	var live []*redisDelivery
	for len(buf) > 0 {
		select {
		case d := <-buf:
			if !d.reg.dead.Load() {
				live = append(live, d)
			}
			continue
		default:
		}
		break
	}
	for _, d := range live {
		select {
		case buf <- d:
		default:
			// the fetch loop filled the room meanwhile: hand it back when
			// consuming stops
			q.mu.Lock()
			q.leftovers = append(q.leftovers, d)
			q.mu.Unlock()
		}
	}
	q.signalRoom()
}

func (q *redisQueue) addConsumer(tag string, run func()) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch q.state {
	case stateIdle:
		return "", ErrorNotConsuming
	case stateStopped:
		return "", ErrorConsumingStopped
	}
	q.consumers++
	name := fmt.Sprintf("%s-%d", tag, q.consumers)
	// The count goes to Redis in the background (see countWriter): only
	// the stats read it, and the connection's own reads wait for it.
	q.conn.counts.mark(q)
	q.workers.Add(1)
	go func() {
		defer q.workers.Done()
		run()
	}()
	return name, nil
}

func (q *redisQueue) AddConsumer(tag string, consumer Consumer) (string, error) {
	if consumer == nil {
		return "", argError("consumer", consumer, "must not be nil")
	}
	return q.addConsumer(tag, func() { q.consume(consumer) })
}

func (q *redisQueue) AddConsumerFunc(tag string, consumerFunc ConsumerFunc) (string, error) {
	if consumerFunc == nil {
		return "", argError("consumer func", consumerFunc, "must not be nil")
	}
	return q.AddConsumer(tag, consumerFunc)
}

func (q *redisQueue) AddBatchConsumer(tag string, batchSize int64, timeout time.Duration, consumer BatchConsumer) (string, error) {
	if consumer == nil {
		return "", argError("batch consumer", consumer, "must not be nil")
	}
	if batchSize < 1 {
		return "", argError("batchSize", batchSize, "must be at least 1")
	}
	if timeout <= 0 {
		return "", argError("batch timeout", timeout, "must be positive")
	}
	return q.addConsumer(tag, func() { q.consumeBatches(batchSize, timeout, consumer) })
}

func (q *redisQueue) AddBatchConsumerFunc(tag string, batchSize int64, timeout time.Duration, batchConsumerFunc BatchConsumerFunc) (string, error) {
	if batchConsumerFunc == nil {
		return "", argError("batch consumer func", batchConsumerFunc, "must not be nil")
	}
	return q.AddBatchConsumer(tag, batchSize, timeout, batchConsumerFunc)
}

// fetchLoop keeps the buffer filled while the connection holds fewer than
// prefetchLimit deliveries of the queue (buffered, or handed out and not
// yet settled: rmq's rule, which fetch.lua enforces). It refills as soon as
// there is room, moving up to the free room from ready to this
// connection's unacked storage in one script call; while more than half
// the buffer is full it lets room gather for up to refillPause first, so
// that busy consumers do not cost a fetch per delivery. When ready is
// empty it blocks on Redis until something is published or pollDuration
// passes.
func (q *redisQueue) fetchLoop() {
	defer close(q.fetchDone)
	ctx := context.Background() // the loop ends through q.stop and the waiter's interrupt
	w := newWaiter(q.conn.client, q.keys.ready, true)
	defer w.close()
	q.mu.Lock()
	q.waiter = w
	q.mu.Unlock()
	// The first few queues of the connection wait with a waiter (and a
	// connection) of their own; the others share one (see sharedWaits).
	own := q.conn.waits.claimOwn()
	defer func() {
		if own {
			q.conn.waits.releaseOwn()
		}
	}()
	low := q.prefetchLimit / 2
	errCount := 0
	capped := false // the connection held its limit at the last fetch
	for {
		select {
		case <-q.stop:
			return
		default:
		}
		// While the connection is paused (heartbeat errors) or its
		// registration is dead and not yet replaced, fetch nothing.
		reg := q.awaitUsable()
		if reg == nil {
			return
		}
		if err := q.register(ctx, reg); err != nil {
			errCount++
			q.conn.report(&ConsumeError{Queue: q.name, RedisErr: errorf("register for the queue: %w", err), Count: errCount})
			if !q.backoffWait(errCount) {
				return
			}
			continue
		}
		n := int64(len(q.buf))
		switch {
		case capped || n >= q.prefetchLimit:
			// Wait for a consumer to take from the buffer or settle a
			// delivery; a lease or a cleaner may also lower what the
			// connection holds, so look again after pollDuration.
			if !q.awaitRoom(q.pollDuration) {
				return
			}
			capped = false
			continue
		case n > low:
			if !q.gather(low) {
				return
			}
		}
		want := min(q.prefetchLimit-int64(len(q.buf)), q.chunk())
		got, hint, err := q.fetch(ctx, reg, want)
		// While the queue is idle (or paused), wait on Redis, with the
		// next fetch sent right behind the wait (see waitFetch): its reply
		// decides what comes next, as a fetch's does here.
		for err == nil && hint != hintCapped && q.mayWait(reg) {
			var ahead bool
			if !own && !q.conn.waits.usable() {
				own = q.conn.waits.claimOwn()
			}
			switch {
			case hint < hintLimited:
				// The rate limit holds: sleep until a hand-out leaves its
				// window (ready may be full: a wait on it would return at
				// once), and fetch.
				if !q.sleep(waitFor(q.pollDuration, limitedWait(hint))) {
					return
				}
				got, hint, err = q.fetch(ctx, reg, min(q.prefetchLimit-int64(len(q.buf)), q.chunk()))
				ahead = true
			case hint == hintPaused && !own:
				var stopped bool
				want, got, hint, stopped, err = q.sharedWaitFetch(ctx, reg, q.keys.resume(), q.pollDuration)
				if stopped {
					return
				}
				ahead = true
			case hint == hintPaused:
				// Paused: wait for a Resume (which wakes the wait) or
				// pollDuration, and fetch again.
				want, got, hint, ahead, err = q.waitFetch(ctx, w, reg, q.keys.resume(), q.pollDuration, false)
			case int64(got) < want && hint != 0 && !own:
				var stopped bool
				want, got, hint, stopped, err = q.sharedWaitFetch(ctx, reg, q.keys.ready, waitFor(q.pollDuration, hint))
				if stopped {
					return
				}
				ahead = true
			case int64(got) < want && hint != 0:
				want, got, hint, ahead, err = q.waitFetch(ctx, w, reg, q.keys.ready, waitFor(q.pollDuration, hint), hint > 0 && time.Duration(hint)*time.Millisecond < q.pollDuration)
			}
			if !ahead {
				break
			}
		}
		if err == nil && hint == hintCapped {
			if errCount > 0 {
				q.conn.logRecovered("queue " + q.name)
			}
			capped, errCount = true, 0
			continue
		}
		if err != nil {
			if isLost(err) {
				// A cleaner declared the registration dead (the heartbeat
				// loop replaces it), or the queue's registration alone is
				// gone (take it again).
				if !q.conn.awaitVerdict(reg, q.stop) {
					return
				}
				q.forget(reg)
				continue
			}
			q.conn.topologyChanged(err)
			errCount++
			q.conn.report(&ConsumeError{Queue: q.name, RedisErr: err, Count: errCount})
			if !q.backoffWait(errCount) {
				return
			}
			continue
		}
		if errCount > 0 {
			q.conn.logRecovered("queue " + q.name)
		}
		errCount = 0
	}
}

// mayWait reports whether the fetch loop may wait and fetch again at
// once under reg: consuming goes on, the connection is usable under reg
// (see awaitUsable), and the buffer has room for a fetch.
func (q *redisQueue) mayWait(reg *registration) bool {
	select {
	case <-q.stop:
		return false
	default:
	}
	r, ok, _ := q.conn.usable()
	return ok && r == reg && int64(len(q.buf)) < q.prefetchLimit
}

// sharedWaitFetch waits for key on the connection's shared waits (see
// sharedWaits; the wait ends on time by itself, a local timer) and then
// fetches, returning what it asked for and took and its hint as fetch
// does; stopped when consuming stopped during the wait.
func (q *redisQueue) sharedWaitFetch(ctx context.Context, reg *registration, key string, d time.Duration) (want int64, got int, hint int64, stopped bool, err error) {
	if !q.conn.waits.wait(ctx, key, d, q.stop) {
		return 0, 0, 0, true, nil
	}
	want = min(q.prefetchLimit-int64(len(q.buf)), q.chunk())
	got, hint, err = q.fetch(ctx, reg, want)
	return want, got, hint, false, err
}

// waitFetch waits on key (ready, or the resume list of a paused queue)
// for up to d and fetches right after, in the same pipeline (see
// waiter.waitFetch). It returns how many deliveries the fetch asked for
// and took and its hint, as fetch does; ahead is false when no fetch came
// with the wait (the waiter has no dedicated connection, or Redis refused
// the fetch, say for a script it did not know): the caller fetches then.
func (q *redisQueue) waitFetch(ctx context.Context, w *waiter, reg *registration, key string, d time.Duration, onTime bool) (want int64, got int, hint int64, ahead bool, err error) {
	want = min(q.prefetchLimit-int64(len(q.buf)), q.chunk())
	token, field, keys := q.fetchToken, q.fetchField(), q.fetchKeys(reg)
	sent := time.Now()
	cmd, spent, err := w.waitFetch(ctx, key, d, onTime, func(pipe redis.Pipeliner) *redis.Cmd {
		return scripts.fetch.EvalSha(ctx, pipe, keys, reg.name, want, token, field, q.prefetchLimit)
	})
	if cmd == nil {
		return want, 0, 0, false, err
	}
	v, ferr := cmd.Slice()
	if ferr != nil {
		if isLost(ferr) {
			return want, 0, 0, false, ferr
		}
		var redisErr redis.Error
		if !errors.As(ferr, &redisErr) {
			// It may have run with its reply lost: the next fetch (under
			// the same token) or the stop sends it again.
			q.markUnsure(reg, want, sent)
		}
		return want, 0, 0, false, err
	}
	t, perr := q.parseTaken(reg, v)
	// The fetch ran after Redis spent spent in the wait (and before its
	// reply arrived, should Redis's clock have jumped).
	ran := sent.Add(min(spent, time.Since(sent)))
	got, hint, ferr = q.accept(reg, want, t, ran, perr)
	if ferr != nil {
		return want, 0, 0, false, ferr
	}
	if got > 0 {
		// A consumer waits for these (the queue was idle): let it run
		// before this goroutine goes on to its next call. Without the
		// yield the consumer often waits until another thread is woken
		// for it, tens of µs on a busy machine.
		runtime.Gosched()
	}
	return want, got, hint, true, err
}

// backoffWait waits after the n-th consecutive failure of the fetch loop (see
// backoff); false once consuming stops.
func (q *redisQueue) backoffWait(n int) bool {
	select {
	case <-q.stop:
		return false
	case <-time.After(backoff(n, min(q.pollDuration, time.Second))):
		return true
	}
}

// awaitUsable waits until the connection may fetch and hand out
// deliveries (see redisConnection.usable) and returns its registration;
// nil once consuming stops.
func (q *redisQueue) awaitUsable() *registration {
	for {
		reg, ok, changed := q.conn.usable()
		if ok {
			return reg
		}
		select {
		case <-q.stop:
			return nil
		case <-changed:
		}
	}
}

// hintCapped is fetch.lua's hint when the connection holds its limit.
const hintCapped = -2

// hintPaused is fetch.lua's hint when the queue is paused: wait on its
// resume list (see Queue.Pause).
const hintPaused = -3

// hintReplayed is fetch.lua's hint when it answered a resend from the
// record of the first send; parseTaken makes it 0 (call again) and marks
// the take replayed.
const hintReplayed = -4

// hintLimited is the bound of fetch.lua's hints while the queue's rate
// limit holds: a hint below it is hintLimited minus the ms until the next
// hand-out is allowed (see limitedWait).
const hintLimited = -5

// limitedWait is the ms until the next hand-out of a rate-limited queue
// is allowed, from a fetch's hint below hintLimited, as the hints of due
// deliveries are.
func limitedWait(hint int64) int64 { return hintLimited - hint }

// sleep waits d or until consuming stops; false once it stops.
func (q *redisQueue) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-q.stop:
		return false
	case <-t.C:
		return true
	}
}

// refillPause is how long the fetch loop lets room gather while more than
// half the buffer is full (see fetchLoop).
const refillPause = 2 * time.Millisecond

// awaitRoom waits for room (a consumer took from the buffer, or a delivery
// of this handle was settled) or d; false once consuming stops.
func (q *redisQueue) awaitRoom(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-q.stop:
		return false
	case <-q.room:
	case <-t.C:
	}
	return true
}

// gather waits until the buffer holds at most low deliveries or
// refillPause passed; false once consuming stops.
func (q *redisQueue) gather(low int64) bool {
	t := time.NewTimer(refillPause)
	defer t.Stop()
	for int64(len(q.buf)) > low {
		select {
		case <-q.stop:
			return false
		case <-q.room:
		case <-t.C:
			return true
		}
	}
	return true
}

// backoff returns how long to wait after the n-th consecutive failure:
// doubling from 10ms up to limit.
func backoff(n int, limit time.Duration) time.Duration {
	d := 10 * time.Millisecond
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// chunk returns how many deliveries the next fetch may move: fetchChunk,
// or fewer when the deliveries are large (see fetchBudget).
func (q *redisQueue) chunk() int64 {
	if q.itemSize == 0 {
		return firstFetch
	}
	return int64(min(fetchChunk, max(1, fetchBudget/q.itemSize)))
}

// waitFor is how long an idle fetch loop waits: pollDuration, or until the
// next scheduled event (a due delivery, a lease running out) when that is
// sooner. hint is the fetch script's: ms until that event, or -1.
func waitFor(poll time.Duration, hint int64) time.Duration {
	if hint > 0 {
		return min(poll, time.Duration(hint)*time.Millisecond)
	}
	return poll
}

// fetch moves up to n deliveries into the buffer and returns how many and
// the fetch script's hint (see fetch.lua).
func (q *redisQueue) fetch(ctx context.Context, reg *registration, n int64) (int, int64, error) {
	sent := time.Now()
	t, err := q.takeRaw(ctx, reg, n, q.fetchField(), q.fetchToken, q.prefetchLimit)
	return q.accept(reg, n, t, sent, err)
}

// accept buffers what a fetch of up to n deliveries took (sent: when, at
// the earliest, it ran) and returns how many and the fetch script's hint.
func (q *redisQueue) accept(reg *registration, n int64, t taken, sent time.Time, err error) (int, int64, error) {
	if q.conn.opts.observer != nil {
		q.conn.observe(EventFetch, q.name, "", len(t.envs), sent, err)
	}
	if err != nil {
		q.markUnsure(reg, n, sent)
		return 0, 0, err
	}
	sent = q.leaseStart(reg, t, sent)
	q.unsure = nil
	q.fetchToken++
	size := 0
	for _, s := range t.envs {
		size += len(s)
	}
	for _, d := range q.deliveries(t, sent) {
		q.buf <- d
	}
	if len(t.envs) > 0 {
		q.itemSize = max(1, size/len(t.envs))
	}
	return len(t.envs), t.hint, nil
}

// deliveries makes the deliveries of a take, and rejects those whose
// payload cannot be read (see redisDelivery.faulty) instead of handing
// them out, as rmq does; when that fails they stay this connection's until
// a cleaner or their lease returns them, and the error channel says so.
func (q *redisQueue) deliveries(t taken, sent time.Time) []*redisDelivery {
	out := make([]*redisDelivery, 0, len(t.envs))
	var faulty []string
	for _, s := range t.envs {
		d := newDelivery(q, t.reg, s, t.fence, sent)
		if d.faulty != nil {
			faulty = append(faulty, d.ref())
			continue
		}
		out = append(out, d)
	}
	if len(faulty) > 0 {
		res, err := q.conn.acks.settle(context.Background(), q, t.reg, modeTail, nil, faulty, nil)
		if err == nil {
			err = res.err(0)
		}
		if err != nil {
			q.conn.report(&ConsumeError{Queue: q.name, RedisErr: errorf("reject %d deliveries with unreadable headers: %w", len(faulty), err), Count: 1})
		}
	}
	return out
}

// taken is what one fetch call took: the envelopes, the registration and
// the fence of the take (see fetch.lua) and the hint. replayed is set when
// the call was a resend and Redis answered from the record of the first
// send: the deliveries were taken then.
type taken struct {
	reg      *registration
	envs     []string
	fence    string
	hint     int64
	replayed bool
}

// takeRaw runs the fetch script under a field of the replies hash and a
// token (see fetch.lua), holding the connection's takes of the queue to
// limit (0: no limit).
func (q *redisQueue) takeRaw(ctx context.Context, reg *registration, n int64, field string, token uint64, limit int64) (taken, error) {
	v, err := scripts.fetch.Run(ctx, q.conn.client, q.fetchKeys(reg),
		reg.name, n, token, field, limit).Slice()
	if err != nil {
		return taken{}, err
	}
	return q.parseTaken(reg, v)
}

// parseTaken reads a reply of the fetch script.
func (q *redisQueue) parseTaken(reg *registration, v []any) (taken, error) {
	if len(v) < 3 {
		return taken{}, errorf("redq: short reply from fetch: %v", v)
	}
	fence, ok1 := v[len(v)-3].(int64)
	hint, ok2 := v[len(v)-2].(int64)
	need, ok3 := v[len(v)-1].(string)
	if !ok1 || !ok2 || !ok3 {
		return taken{}, errorf("redq: unexpected fetch fence, hint and need %v, %v, %v", v[len(v)-3], v[len(v)-2], v[len(v)-1])
	}
	q.needOthers(need)
	t := taken{reg: reg, envs: make([]string, len(v)-3), fence: strconv.FormatInt(fence, 10), hint: hint}
	if hint == hintReplayed {
		t.hint, t.replayed = 0, true
	}
	for i, x := range v[:len(v)-3] {
		s, ok := x.(string)
		if !ok {
			return taken{}, errorf("redq: unexpected fetch reply element %T", x)
		}
		t.envs[i] = s
	}
	return t, nil
}

// maxOthers bounds how many other connections' storage one fetch declares.
const maxOthers = 16

// fetchKeys is the KEYS of a fetch: the queue's keys, the log of takes
// of a rate limit as its own key, and the connection's storage and that
// of the other connections the last fetch named (see fetch.lua).
func (q *redisQueue) fetchKeys(reg *registration) []string {
	q.othersMu.Lock()
	others := q.others
	q.othersMu.Unlock()
	conns := make([][]string, 0, 1+len(others))
	conns = append(conns, q.keys.connKeys(reg.name))
	for _, c := range others {
		conns = append(conns, q.keys.connKeys(c))
	}
	return q.keys.scriptKeys(q.keys.rate(), nil, conns...)
}

// needOthers keeps the connections a fetch named (need: names separated
// by spaces) for the next fetch to declare.
func (q *redisQueue) needOthers(need string) {
	var others []string
	if need != "" {
		others = strings.Fields(need)
		if len(others) > maxOthers {
			others = others[:maxOthers]
		}
	}
	q.othersMu.Lock()
	q.others = others
	q.othersMu.Unlock()
}

// next waits for the next delivery; false once consuming stops.
func (q *redisQueue) next() (*redisDelivery, bool) {
	select {
	case <-q.stop:
		return nil, false
	default:
	}
	for {
		select {
		case <-q.stop:
			return nil, false
		case d := <-q.buf:
			q.signalRoom()
			ok, stopped := q.admit(d)
			if stopped {
				return nil, false
			}
			if !ok {
				continue
			}
			return d, true
		}
	}
}

// admit decides whether a delivery from the buffer may be handed out. It
// may not when its lease ran out (see below) or its registration is dead
// (the cleaner's: see registration). While the connection is paused (see
// HeartbeatError) it holds the delivery until the pause ends; when
// consuming stops meanwhile, the delivery is kept for returnBuffered and
// stopped is true.
func (q *redisQueue) admit(d *redisDelivery) (ok, stopped bool) {
	for {
		if d.reg.dead.Load() || d.leaseOver() {
			return false, false
		}
		_, usable, changed := q.conn.usable()
		if usable {
			return true, false
		}
		select {
		case <-q.stop:
			q.mu.Lock()
			q.leftovers = append(q.leftovers, d)
			q.mu.Unlock()
			return false, true
		case <-changed:
		}
	}
}

// A delivery with a TTR whose lease ran out while it sat in the buffer is
// not handed to a consumer: it may be taken by another already, and it goes
// back to ready when the next fetch or clean finds its lease over. (Keep the
// prefetch limit small against TTR times throughput to avoid this.)

func (q *redisQueue) signalRoom() {
	select {
	case q.room <- struct{}{}:
	default:
	}
}

func (q *redisQueue) consume(consumer Consumer) {
	for {
		d, ok := q.next()
		if !ok {
			return
		}
		consumer.Consume(d)
	}
}

func (q *redisQueue) consumeBatches(size int64, timeout time.Duration, consumer BatchConsumer) {
	for {
		d, ok := q.next()
		if !ok {
			return
		}
		batch := Deliveries{d}
		timer := time.NewTimer(timeout)
	collect:
		for int64(len(batch)) < size {
			select {
			case d := <-q.buf:
				q.signalRoom()
				if !d.leaseOver() {
					batch = append(batch, d)
				}
			case <-timer.C:
				break collect
			case <-q.stop:
				timer.Stop()
				q.mu.Lock()
				for _, d := range batch {
					q.leftovers = append(q.leftovers, d.(*redisDelivery))
				}
				q.mu.Unlock()
				return
			}
		}
		timer.Stop()
		var admitted Deliveries
		for i, d := range batch {
			ok, stopped := q.admit(d.(*redisDelivery))
			if stopped {
				q.mu.Lock()
				for _, d := range batch[i+1:] {
					q.leftovers = append(q.leftovers, d.(*redisDelivery))
				}
				q.mu.Unlock()
				return
			}
			if ok {
				admitted = append(admitted, d)
			}
		}
		if len(admitted) > 0 {
			consumer.Consume(admitted)
		}
	}
}

// parseCodes reads a {registered, r1..rn} script reply.
func parseCodes(v any, n int) ([]int64, bool, error) {
	ns, err := int64s(v)
	if err != nil {
		return nil, false, err
	}
	if len(ns) != n+1 {
		return nil, false, errorf("redq: script replied %d results for %d deliveries", len(ns)-1, n)
	}
	return ns[1:], ns[0] == 1, nil
}

// Management

func (q *redisQueue) ReturnUnacked(max int64) (int64, error) {
	return q.ReturnUnackedContext(context.Background(), max)
}

func (q *redisQueue) ReturnUnackedContext(ctx context.Context, max int64) (int64, error) {
	return q.returnUnacked(ctx, q.conn.Name(), max, false)
}

// returnUnacked moves up to max deliveries of conn's unacked hash back to
// ready in bounded chunks. With unregister (a cleaner on a dead
// connection), the connection is unregistered from the queue in the step
// that empties its hash.
func (q *redisQueue) returnUnacked(ctx context.Context, conn string, max int64, unregister bool) (int64, error) {
	if max < 0 {
		return 0, argError("max", max, "must not be negative")
	}
	un := "0"
	if unregister {
		un = "1"
	}
	var total int64
	cursor := "0"
	keys := q.keys.scriptKeys("", nil, q.keys.connKeys(conn))
	for total < max || (unregister && max == 0) {
		chunk := min(max-total, fetchChunk)
		if unregister {
			chunk = fetchChunk
		}
		res, err := scripts.returnUnacked.Run(ctx, q.conn.client, keys, conn, chunk, cursor, un).Slice()
		if err != nil {
			return total, errorf("redq: return unacked of %s on %q: %w", conn, q.name, err)
		}
		if len(res) != 3 {
			return total, errors.New("redq: unexpected reply from return_unacked")
		}
		moved, _ := res[0].(int64)
		cursor, _ = res[1].(string)
		remaining, _ := res[2].(int64)
		total += moved
		if remaining == 0 {
			break
		}
	}
	return total, nil
}

func (q *redisQueue) ReturnRejected(max int64) (int64, error) {
	return q.ReturnRejectedContext(context.Background(), max)
}

func (q *redisQueue) ReturnRejectedContext(ctx context.Context, max int64) (int64, error) {
	if max < 0 {
		return 0, argError("max", max, "must not be negative")
	}
	var total int64
	for total < max {
		n, err := scripts.returnRejected.Run(ctx, q.conn.client, q.keys.block0(), min(max-total, fetchChunk)).Int64()
		if err != nil {
			return total, errorf("redq: return rejected on %q: %w", q.name, err)
		}
		total += n
		if n == 0 {
			break
		}
	}
	return total, nil
}

// purge deletes what says: 'r' ready, 'j' rejected, 'd' delayed and the
// counters; it returns the ready, rejected and delayed counts before.
func (q *redisQueue) purge(ctx context.Context, what string) ([]int64, error) {
	v, err := scripts.purge.Run(ctx, q.conn.client, q.keys.block0(), what).Result()
	if err != nil {
		return nil, errorf("redq: purge %q: %w", q.name, err)
	}
	return int64s(v)
}

func (q *redisQueue) PurgeReady() (int64, error) {
	return q.PurgeReadyContext(context.Background())
}

func (q *redisQueue) PurgeReadyContext(ctx context.Context) (int64, error) {
	n, err := q.purge(ctx, "r")
	if err != nil {
		return 0, err
	}
	return n[0], nil
}

func (q *redisQueue) PurgeRejected() (int64, error) {
	return q.PurgeRejectedContext(context.Background())
}

func (q *redisQueue) PurgeRejectedContext(ctx context.Context) (int64, error) {
	n, err := q.purge(ctx, "j")
	if err != nil {
		return 0, err
	}
	return n[1], nil
}

func (q *redisQueue) Destroy() (readyCount, rejectedCount int64, err error) {
	return q.DestroyContext(context.Background())
}

func (q *redisQueue) DestroyContext(ctx context.Context) (readyCount, rejectedCount int64, err error) {
	// deliveries staged for a push queue in another slot are on their way
	// there, not the queue's: they arrive before the queue is unlisted
	// (after that no cleaner would finish their move)
	if _, err := q.finishStaged(ctx); err != nil {
		return 0, 0, err
	}
	// 'd' also ends a pause: the resume list goes with the flag
	v, err := scripts.purge.Run(ctx, q.conn.client, q.keys.scriptKeys(q.keys.resume(), nil), "rjd").Result()
	if err != nil {
		return 0, 0, errorf("redq: purge %q: %w", q.name, err)
	}
	n, err := int64s(v)
	if err != nil {
		return 0, 0, err
	}
	unlisted, err := q.conn.client.SRem(ctx, q.conn.keys.queues, q.name).Result()
	if err != nil {
		return n[0], n[1], errorf("redq: unlist queue %q: %w", q.name, err)
	}
	if unlisted == 0 {
		// as in rmq: the queue was not listed (destroyed already)
		return n[0], n[1], ErrorNotFound
	}
	return n[0], n[1], nil
}

func (q *redisQueue) Drain(count int64) ([]string, error) {
	return q.DrainContext(context.Background(), count)
}

func (q *redisQueue) DrainContext(ctx context.Context, count int64) ([]string, error) {
	if count < 0 {
		return nil, argError("count", count, "must not be negative")
	}
	if count == 0 {
		return nil, nil
	}
	items, err := scripts.drain.Run(ctx, q.conn.client, q.keys.block0(), count).StringSlice()
	if err != nil {
		return nil, errorf("redq: drain %q: %w", q.name, err)
	}
	out := make([]string, len(items))
	for i, s := range items {
		env, _ := decodeEnvelope(s)
		out[i] = env.payload
	}
	return out, nil
}

func (q *redisQueue) Remove(payload string, count int64, removeFromRejected bool) error {
	return q.RemoveContext(context.Background(), payload, count, removeFromRejected)
}

func (q *redisQueue) RemoveBytes(payload []byte, count int64, removeFromRejected bool) error {
	return q.RemoveContext(context.Background(), string(payload), count, removeFromRejected)
}

func (q *redisQueue) RemoveContext(ctx context.Context, payload string, count int64, removeFromRejected bool) error {
	if count < 0 {
		return argError("count", count, "must not be negative")
	}
	levels, err := q.conn.client.ZRevRange(ctx, q.keys.levels, 0, -1).Result()
	if err != nil {
		return errorf("redq: remove from %q: %w", q.name, err)
	}
	var removed int64
	lists := []string{q.keys.ready}
	for _, p := range levels {
		lists = append([]string{q.keys.level(p)}, lists...)
	}
	for _, list := range lists {
		left := count
		if count > 0 {
			left = count - removed
		}
		n, err := q.removeFrom(ctx, list, payload, left)
		removed += n
		if err != nil || (count > 0 && removed >= count) {
			return err
		}
	}
	if !removeFromRejected {
		return nil
	}
	if count > 0 {
		count -= removed
	}
	_, err = q.removeFrom(ctx, q.keys.rejected, payload, count)
	return err
}

// removeFrom scans a list in chunks and removes envelopes whose payload
// matches, each with an exact LREM (envelopes are unique by id).
func (q *redisQueue) removeFrom(ctx context.Context, key, payload string, count int64) (int64, error) {
	const chunk = 1000
	var removed int64
	for start := int64(0); ; start += chunk {
		items, err := q.conn.client.LRange(ctx, key, start, start+chunk-1).Result()
		if err != nil {
			return removed, errorf("redq: remove from %q: %w", q.name, err)
		}
		var match []string
		for _, s := range items {
			if env, _ := decodeEnvelope(s); env.payload == payload {
				match = append(match, s)
				if count > 0 && removed+int64(len(match)) >= count {
					break
				}
			}
		}
		if len(match) > 0 {
			pipe := q.conn.client.Pipeline()
			cmds := make([]*redis.IntCmd, len(match))
			for i, s := range match {
				cmds[i] = pipe.LRem(ctx, key, 1, s)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return removed, errorf("redq: remove from %q: %w", q.name, err)
			}
			for _, c := range cmds {
				removed += c.Val()
			}
			start -= int64(len(match)) // the list shifted left
		}
		if (count > 0 && removed >= count) || len(items) < chunk {
			return removed, nil
		}
	}
}

// fetchField is this handle's field in the replies hash.
func (q *redisQueue) fetchField() string { return "f" + strconv.FormatInt(q.handle, 10) }

// settle runs a verb ("ack", "reject" or "push") on takes of this queue
// made under reg through the connection's committer; report names the
// delivery in DeliveryErrors while the call is sent again.
func (q *redisQueue) settle(ctx context.Context, verb string, reg *registration, ids []string, report *redisDelivery) (res settleResult, err error) {
	if q.conn.opts.observer != nil {
		defer func(start time.Time) { q.conn.observe(EventSettle, q.name, verb, len(ids), start, err) }(time.Now())
	}
	if verb == "ack" {
		return q.conn.acks.settle(ctx, q, reg, modeAck, nil, ids, report)
	}
	if verb == "push" {
		if pq := q.pushQueue.Load(); pq != nil {
			if q.conn.stagesPush(q, pq) {
				return q.pushStaged(ctx, pq, reg, ids, report)
			}
			return q.conn.acks.settle(ctx, q, reg, modePush, pq, ids, report)
		}
	}
	return q.conn.acks.settle(ctx, q, reg, modeTail, nil, ids, report)
}
